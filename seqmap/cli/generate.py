"""``seqmap generate RUN_DIR --prompt TEXT``: continue a prompt with a trained language model."""

from __future__ import annotations

import argparse

from seqmap.cli.ct2 import ct2_generate
from seqmap.cli.errors import check_text
from seqmap.cli.trained_run import decode_config, load, refuse_unless, run_parser


def add_parser(commands) -> None:
    generate = run_parser(
        commands, "generate", "continue a prompt with a trained language model",
        "Sample a continuation of --prompt (temperature, top-k, top-p from the run's decode config,\n"
        "or --decode.temperature / --decode.top_k / --decode.top_p / --decode.max_new_tokens).",
        "example:\n  seqmap generate runs/shakespeare --prompt \"ROMEO:\" --decode.max_new_tokens 300")
    generate.add_argument("--prompt", default="", help="text to continue")
    generate.add_argument("--seed", type=int, default=0, help="sampling seed (same seed, same text)")
    generate.add_argument("--greedy", action="store_true",
                          help="search (greedy, or beam with --decode.beam_size) instead of sampling")
    generate.add_argument("--ct2", metavar="DIR",
                          help="generate with this CTranslate2 export of the run (seqmap export ct2 RUN_DIR --out "
                               "DIR); greedy outputs are seqmap's, samples CTranslate2's; --quantize int8: in int8")
    generate.set_defaults(handler=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    from seqmap.decoding.text import continuation, generate_texts, lm_prompt

    run = load(args)
    refuse_unless(args, run, "generate")
    check_text(args.prompt, "--prompt")
    decode = decode_config(run, args)
    if args.ct2 is not None:
        prompt = lm_prompt(run.tgt_tok, args.prompt)
        (output,) = ct2_generate(run, args, decode, [prompt], sample=not args.greedy)
        print(args.prompt + continuation(run.tgt_tok, prompt, output))
        return 0
    (text,) = generate_texts(run.model, run.tgt_tok, [args.prompt], decode, sample=not args.greedy, seed=args.seed,
                             device=run.device)
    print(args.prompt + text)
    return 0
