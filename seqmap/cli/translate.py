"""``seqmap translate RUN_DIR [TEXT ...] [--input FILE]``: translate sentences (stdin if none are given)."""

from __future__ import annotations

import argparse
import sys

from seqmap.cli.ct2 import ct2_decoder, refuse_with_ct2
from seqmap.cli.errors import UserError, check_text
from seqmap.cli.trained_run import decode_config, load, refuse_unless, run_parser


def add_parser(commands) -> None:
    translate = run_parser(
        commands, "translate", "translate sentences with a trained run",
        "Translate sentences given as arguments, in a file (--input), or on stdin, one per line.\n"
        "Decoding options come from the run's config; override them with --decode.KEY VALUE\n"
        "(--decode.beam_size 5 --decode.length_penalty 1.0 for beam search).",
        "examples:\n  seqmap translate runs/en-zh \"I love machine learning.\"\n"
        "  seqmap translate runs/en-zh --input test.en > test.hyp")
    translate.add_argument("text", nargs="*", help="sentences to translate")
    translate.add_argument("--input", help="a file of sentences, one per line")
    translate.add_argument("--nbest", type=int, default=1,
                           help="print N best translations as `i ||| text ||| score` (needs --decode.beam_size >= N)")
    translate.add_argument("--prefix", help="force every translation to start with this target text")
    translate.add_argument("--sample", action="store_true", help="sample (temperature/top-k/top-p) instead of search")
    translate.add_argument("--seed", type=int, default=0,
                           help="sampling seed: sentence i draws with seed + i (its text does not depend on others)")
    translate.add_argument("--align", action="store_true",
                           help="also print, per output token, the source token it attends to most")
    translate.add_argument("--align-layer", type=int, default=-1, help="layer whose heads --align averages")
    translate.add_argument("--ct2", metavar="DIR",
                           help="decode with this CTranslate2 export of the run (seqmap export ct2 RUN_DIR --out DIR); "
                                "greedy outputs are seqmap's; --quantize int8 runs it in int8")
    translate.set_defaults(handler=cmd_translate)


def cmd_translate(args: argparse.Namespace) -> int:
    from seqmap.decoding.text import source_ids, translate_nbest

    run = load(args)
    refuse_unless(args, run, "translate")
    texts = _read_inputs(args)
    if args.align:
        _check_align(run, args.align_layer)
    decode = decode_config(run, args)
    if args.prefix is not None:
        check_text(args.prefix, "--prefix")
    prefixes = None if args.prefix is None else [run.tgt_tok.encode(args.prefix)] * len(texts)
    sources = source_ids(run.src_tok, texts, run.cfg.data.max_src_len)  # a blank line translates as empty
    try:
        if args.ct2 is not None:
            refuse_with_ct2(args, {"--prefix": args.prefix is not None, "--sample": args.sample,
                                   "--align": args.align})
            nbest = ct2_decoder(run, args, decode)(sources, args.nbest)
        else:
            nbest = translate_nbest(run.model, sources, decode, n_best=args.nbest, prefixes=prefixes,
                                    sample=args.sample, seed=args.seed, device=run.device,
                                    scores=args.nbest > 1)  # printed with --nbest only
    except ValueError as e:  # e.g. --nbest larger than the beam
        raise UserError(str(e)) from None
    for i, (text, entries) in enumerate(zip(texts, nbest)):
        if args.nbest > 1:
            for e in entries:
                print(f"{i} ||| {run.tgt_tok.decode(e.output)} ||| {e.normalized:.4f}")
        else:
            print(run.tgt_tok.decode(entries[0].output))
        if args.align:
            _print_alignment(run, text, entries[0].output, args.align_layer)
    return 0


def _read_inputs(args: argparse.Namespace) -> list[str]:
    if args.text and args.input:
        raise UserError("give sentences as arguments or --input FILE, not both")
    if args.text:
        for number, text in enumerate(args.text, start=1):
            check_text(text, f"TEXT {number}")
        return list(args.text)
    if args.input:
        from seqmap.data.corpus import read_lines

        return read_lines(args.input, "--input")
    if sys.stdin is None or sys.stdin.isatty():
        raise UserError("nothing to translate: give TEXT arguments, --input FILE, or pipe sentences into stdin")
    from seqmap.data.corpus import read_stdin

    return read_stdin()


def _check_align(run, layer: int) -> None:
    """Before decoding: --align needs a model with attention, and --align-layer one of its layers."""
    import torch

    from seqmap.data.tokenizers import EOS
    from seqmap.decoding.align import forced_attention

    with torch.no_grad():
        weights = forced_attention(run.model, [EOS], [EOS], device=run.device)  # (L, H, T, 1)
    if weights is None:
        raise UserError("--align needs a model with attention (this RNN has rnn_attention=none)")
    layers = weights.size(0)
    if not -layers <= layer < layers:
        raise UserError(f"--align-layer {layer} is out of range: the model has {layers} attention layers "
                        f"(use 0..{layers - 1}, or -1 for the last)")


def _print_alignment(run, text: str, hyp_ids: list[int], layer: int) -> None:
    """Per output token, the source token it attends to most (stderr), and i-j pairs (stdout)."""
    from seqmap.decoding.align import align_sentence

    alignment = align_sentence(run.model, run.src_tok, run.tgt_tok, text, hyp_ids, layer=layer, device=run.device)
    if alignment is None:
        raise UserError("--align needs a model with attention (this RNN has rnn_attention=none)")
    print(f"  alignment: {alignment.pairs}")
    for line in alignment.lines:
        print(f"    {line}")
