"""The ``seqmap`` command line: one subcommand per job.

    seqmap train CONFIG [--run-dir DIR] [--section.key VALUE ...]   train on your text
    seqmap train --resume RUN_DIR [--section.key VALUE ...]         continue a run exactly
    seqmap translate RUN_DIR [TEXT ...] [--input FILE]              translate (stdin if no text)
    seqmap evaluate RUN_DIR --src FILE --ref FILE                   BLEU / chrF / TER / perplexity
    seqmap generate RUN_DIR --prompt TEXT                           sample from a language model
    seqmap average CHECKPOINT ... --out DIR                         average checkpoint weights
    seqmap data list | download NAME | prepare NAME --from DIR      public corpora
    seqmap toy CONFIG                                               a synthetic task in a minute
    seqmap serve RUN_DIR [--host 127.0.0.1] [--port 8000]           HTTP API and a page to explore attention

Overrides are dotted config keys (``--train.lr 3e-4 --model.d_model 64``).
User errors (a missing file, bad YAML, a wrong option, a broken checkpoint) print
one line to stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import seqmap
from seqmap.config import ConfigError, apply_overrides, load_config, read_yaml

USAGE_ERROR = 2


class UserError(Exception):
    """A mistake the user can fix; printed as one line, exit status 2."""


def cmd_toy(args: argparse.Namespace) -> int:
    from seqmap.training.toy import ToyRun, train_toy

    run = ToyRun.from_dict(read_yaml(args.config, args.overrides))
    torch_threads = _threads(args.threads)
    start = time.perf_counter()
    metrics = train_toy(run.model, run.toy, log=print)
    wall = time.perf_counter() - start
    for example in metrics["examples"]:
        print(f"  src {example['src']}\n  ref {example['ref']}\n  hyp {example['hyp']}\n")
    summary = {
        "task": run.toy.task,
        "family": run.model.family,
        "exact_match": round(metrics["exact_match"], 4),
        "token_accuracy": round(metrics["token_accuracy"], 4),
        "eval_size": metrics["eval_size"],
        "final_loss": round(metrics["final_loss"], 4),
        "params": metrics["params"],
        "seconds": round(wall, 1),
        "threads": torch_threads,
    }
    print("metrics " + json.dumps(summary))
    return 0


# -- train / resume -----------------------------------------------------------------------

def cmd_train(args: argparse.Namespace) -> int:
    from seqmap.training.trainer import train

    _threads(args.threads)
    if args.resume:
        run_dir = Path(args.resume)
        if args.config is not None:
            raise UserError("give either CONFIG or --resume RUN_DIR (a resumed run reads RUN_DIR/config.yaml)")
        if not (run_dir / "config.yaml").is_file():
            raise UserError(f"--resume {run_dir}: no config.yaml there; is it a run directory?")
        cfg = load_config(run_dir / "config.yaml", args.overrides)
    else:
        if args.config is None:
            raise UserError("give a CONFIG file to train, or --resume RUN_DIR to continue a run")
        cfg = load_config(args.config, args.overrides)
        run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / Path(args.config).stem
    result = train(cfg, run_dir, resume=bool(args.resume))
    test = result.get("test")
    summary = {"run_dir": str(run_dir), "steps": result["step"], "best": result["best"],
               "train_minutes": round(result["train_seconds"] / 60, 2), "stop": result["stop_reason"]}
    if test and "bleu" in test:
        summary.update(test_bleu=round(test["bleu"], 2), test_chrf=round(test["chrf"], 2))
    elif test:
        summary.update(test_ppl=round(test["ppl"], 2))
    print("result " + json.dumps(summary, ensure_ascii=False))
    return 0


# -- using a trained run ---------------------------------------------------------------------

def _load(args: argparse.Namespace):
    from seqmap.runs import load_run

    _threads(getattr(args, "threads", None))
    return load_run(args.run_dir, args.checkpoint, args.device)


def _decode_config(run, args: argparse.Namespace):
    """The run's decode config with ``--decode.KEY VALUE`` overrides; other sections cannot change here."""
    from seqmap.config import DecodeConfig, from_dict, to_dict

    overrides = apply_overrides({}, args.overrides)
    other = [key for key in overrides if key != "decode"]
    if other:
        raise UserError(f"only --decode.* options can be overridden here, got --{other[0]}.*")
    values = {**to_dict(run.cfg.decode), **overrides.get("decode", {})}
    return from_dict(DecodeConfig, values, "decode")


def _read_inputs(args: argparse.Namespace) -> list[str]:
    if args.text and args.input:
        raise UserError("give sentences as arguments or --input FILE, not both")
    if args.text:
        return list(args.text)
    if args.input:
        from seqmap.data.corpus import read_lines

        return read_lines(args.input, "--input")
    if sys.stdin is None or sys.stdin.isatty():
        raise UserError("nothing to translate: give TEXT arguments, --input FILE, or pipe sentences into stdin")
    return [line.rstrip("\n") for line in sys.stdin]


def cmd_translate(args: argparse.Namespace) -> int:
    from seqmap.decoding.text import translate_nbest

    run = _load(args)
    if run.src_tok is None:
        raise UserError(f"{args.run_dir} is a language model; use `seqmap generate` instead")
    texts = _read_inputs(args)
    decode = _decode_config(run, args)
    prefixes = None if args.prefix is None else [run.tgt_tok.encode(args.prefix)] * len(texts)
    try:
        nbest = translate_nbest(run.model, [run.src_tok.encode(t) for t in texts], decode, n_best=args.nbest,
                                prefixes=prefixes, sample=args.sample, seed=args.seed, device=run.device)
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


def _print_alignment(run, text: str, hyp_ids: list[int], layer: int) -> None:
    """Per output token, the source token it attends to most (stderr), and i-j pairs (stdout)."""
    from seqmap.decoding.align import align_sentence

    alignment = align_sentence(run.model, run.src_tok, run.tgt_tok, text, hyp_ids, layer=layer, device=run.device)
    if alignment is None:
        raise UserError("--align needs a model with attention (this RNN has rnn_attention=none)")
    print(f"  alignment: {alignment.pairs}")
    for line in alignment.lines:
        print(f"    {line}")


def cmd_evaluate(args: argparse.Namespace) -> int:
    from seqmap.evaluation import evaluate_files

    run = _load(args)
    if run.src_tok is None:
        raise UserError(f"{args.run_dir} is a language model; evaluate needs a translation run")
    out = Path(args.out) if args.out else run.checkpoint.parent.parent / "eval" / (Path(args.src).name + ".hyp")
    try:
        result = evaluate_files(run, args.src, args.ref, _decode_config(run, args), out, n_best=args.nbest,
                                tokenize=args.tokenize, compare_with=args.compare, tok_ref=args.tok_ref)
    except ValueError as e:  # a bad --tokenize, --nbest beyond the beam, hypotheses of another length
        raise UserError(str(e)) from None
    print(f"BLEU = {result['bleu']:.2f}   {result['bleu_signature']}")
    print(f"chrF = {result['chrf']:.2f}   {result['chrf_signature']}")
    print(f"TER  = {result['ter']:.2f}   {result['ter_signature']}")
    if "bleu_lc_tok" in result:
        print(f"BLEU (tokenized, lowercased) = {result['bleu_lc_tok']:.2f}   {result['bleu_lc_tok_signature']}")
    print(f"reference perplexity = {result['ppl']:.2f}")
    print(f"{result['sentences']} hypotheses written to {out}")
    if "nbest_file" in result:
        print(f"{args.nbest}-best lists written to {result['nbest_file']}")
    if "compare" in result:
        c = result["compare"]
        print(f"paired bootstrap against {args.compare}: BLEU {c['bleu']:.2f} vs {c['other_bleu']:.2f}, "
              f"p = {c['p_value']:.4f}   {c['signature']}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from seqmap.decoding.text import generate_texts

    run = _load(args)
    if run.src_tok is not None:
        raise UserError(f"{args.run_dir} is a translation model; use `seqmap translate` instead")
    decode = _decode_config(run, args)
    (text,) = generate_texts(run.model, run.tgt_tok, [args.prompt], decode, sample=not args.greedy, seed=args.seed,
                             device=run.device)
    print(args.prompt + text)
    return 0


def cmd_average(args: argparse.Namespace) -> int:
    from seqmap.training.averaging import save_averaged

    if len(args.checkpoints) < 2:
        raise UserError("give at least two checkpoint directories to average")
    out = save_averaged(args.checkpoints, args.out)
    print(f"averaged {len(args.checkpoints)} checkpoints into {out}")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from seqmap import visualize

    try:
        _plot(args, visualize)
    except (FileNotFoundError, ValueError) as e:  # a wrong path, suffix or option: the message says which
        raise UserError(str(e)) from None
    print(f"wrote {args.out}")
    return 0


def _plot(args: argparse.Namespace, visualize) -> None:
    out = Path(args.out)
    if args.what == "positional":
        visualize.plot_positional(args.d_model, args.length, out, head_dim=args.head_dim)
    elif args.run_dir is None:
        raise UserError(f"seqmap plot {args.what} needs a RUN_DIR")
    elif args.what == "curves":
        visualize.plot_curves(args.run_dir, out, title=args.title)
    else:
        if not args.text:
            raise UserError("seqmap plot attention needs --text SENTENCE")
        from seqmap.runs import load_run

        run = load_run(args.run_dir, args.checkpoint)
        head = args.head if args.head in (None, "mean") else int(args.head)
        visualize.plot_run_attention(run, args.text, out, hypothesis=args.hyp, which=args.self or "cross",
                                     layer=args.layer, head=head, title=args.title)


# -- public corpora ----------------------------------------------------------------------------

def cmd_data(args: argparse.Namespace) -> int:
    from seqmap.data import datasets

    if args.action == "list":
        for d in datasets.list_datasets():
            where = "bundled" if d.bundled else "download"
            print(f"{d.name:16s} {where:9s} {d.description} ({d.license})")
        return 0
    if args.name is None:
        raise UserError(f"seqmap data {args.action} needs a dataset NAME (see `seqmap data list`)")
    dest = Path(args.dest) if args.dest else Path("data") / args.name
    if args.action == "download":
        path = datasets.download(args.name, dest, base_url=args.base_url, force=args.force)
    else:
        if args.source is None:
            raise UserError("seqmap data prepare needs --from DIR, a folder holding a copy of the files")
        path = datasets.prepare(args.name, args.source, dest)
    print(f"{args.name} ready in {path}")
    return 0


def _threads(threads: int | None) -> int:
    import torch

    if threads is not None:
        if threads <= 0:
            raise UserError(f"--threads must be > 0, got {threads}")
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="seqmap", allow_abbrev=False, description="Sequence models and attention in PyTorch.")
    parser.add_argument("--version", action="version", version=f"seqmap {seqmap.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    train = commands.add_parser(
        "train", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        help="train a model on your own text from one config file",
        description="Train the model described by CONFIG (model:, data:, train:, decode: sections).\n"
                    "The run directory gets the resolved config, tokenizer, log, metrics and checkpoints.\n"
                    "Override any config key with --section.key VALUE.",
        epilog="examples:\n  seqmap train configs/tatoeba_en_zh.yaml --run-dir runs/en-zh --train.max_steps 2000\n"
               "  seqmap train --resume runs/en-zh\n"
               "  torchrun --nproc_per_node 2 -m seqmap train CONFIG   (several processes / GPUs)")
    train.add_argument("config", nargs="?", help="YAML run config")
    train.add_argument("--run-dir", help="where the run is written (default: runs/CONFIG_NAME)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    train.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    train.set_defaults(handler=cmd_train)

    def run_parser(name: str, help_: str, description: str, epilog: str) -> argparse.ArgumentParser:
        p = commands.add_parser(name, allow_abbrev=False, help=help_, description=description, epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (or one checkpoint directory)")
        p.add_argument("--checkpoint", default="best", help="best (default), last, or a checkpoint directory")
        p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N")
        p.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
        return p

    translate = run_parser(
        "translate", "translate sentences with a trained run",
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
    translate.add_argument("--seed", type=int, default=0, help="sampling seed")
    translate.add_argument("--align", action="store_true",
                           help="also print, per output token, the source token it attends to most")
    translate.add_argument("--align-layer", type=int, default=-1, help="layer whose heads --align averages")
    translate.set_defaults(handler=cmd_translate)

    evaluate = run_parser(
        "evaluate", "score a trained run on a test set (sacreBLEU BLEU, chrF, TER, perplexity)",
        "Translate --src, score against --ref with sacreBLEU (BLEU tokenizer chosen by the target\n"
        "language: zh for Chinese, 13a otherwise) and report the reference perplexity.",
        "example:\n  seqmap evaluate runs/de-en --src data/multi30k/test2016.de --ref data/multi30k/test2016.en")
    evaluate.add_argument("--src", required=True, help="source sentences, one per line")
    evaluate.add_argument("--ref", required=True, help="reference translations, aligned with --src")
    evaluate.add_argument("--out", help="where to write the hypotheses (default: RUN_DIR/eval/SRC.hyp)")
    evaluate.add_argument("--nbest", type=int, default=1, help="also write N-best lists to OUT.nbest")
    evaluate.add_argument("--tokenize", help="sacreBLEU tokenizer (default: zh for Chinese targets, else 13a)")
    evaluate.add_argument("--tok-ref", metavar="TOK_REF",
                          help="also report BLEU on Moses-tokenized lowercased text against this reference "
                               "(e.g. Multi30k's test2016.lc.norm.tok.en), as most Multi30k papers do")
    evaluate.add_argument("--compare", metavar="OTHER_HYPS",
                          help="paired bootstrap significance test against another system's hypotheses")
    evaluate.set_defaults(handler=cmd_evaluate)

    generate = run_parser(
        "generate", "continue a prompt with a trained language model",
        "Sample a continuation of --prompt (temperature, top-k, top-p from the run's decode config,\n"
        "or --decode.temperature / --decode.top_k / --decode.top_p / --decode.max_new_tokens).",
        "example:\n  seqmap generate runs/shakespeare --prompt \"ROMEO:\" --decode.max_new_tokens 300")
    generate.add_argument("--prompt", default="", help="text to continue")
    generate.add_argument("--seed", type=int, default=0, help="sampling seed (same seed, same text)")
    generate.add_argument("--greedy", action="store_true",
                          help="search (greedy, or beam with --decode.beam_size) instead of sampling")
    generate.set_defaults(handler=cmd_generate)

    average = commands.add_parser(
        "average", allow_abbrev=False, help="average the weights of several checkpoints",
        description="Average the weights of checkpoints of one run into a new checkpoint directory,\n"
                    "usable with translate/evaluate like any other.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  seqmap average runs/en-zh/checkpoints/step-0* --out runs/en-zh/averaged")
    average.add_argument("checkpoints", nargs="+", help="checkpoint directories (step-N)")
    average.add_argument("--out", required=True, help="the new checkpoint directory")
    average.set_defaults(handler=cmd_average)

    data = commands.add_parser(
        "data", allow_abbrev=False, help="list, download or prepare public corpora",
        description="list: the corpora seqmap knows. download NAME: fetch and verify the public files.\n"
                    "prepare NAME --from DIR: use a local copy instead (checksums verified).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  seqmap data download multi30k --dest data/multi30k\n"
               "  seqmap data prepare ptb --from ~/corpora/ptb --dest data/ptb")
    data.add_argument("action", choices=["list", "download", "prepare"])
    data.add_argument("name", nargs="?", help="dataset name (see seqmap data list)")
    data.add_argument("--dest", help="output folder (default: data/NAME)")
    data.add_argument("--from", dest="source", help="prepare: folder with a local copy of the files")
    data.add_argument("--base-url", help="download: a mirror with the same file layout")
    data.add_argument("--force", action="store_true", help="download: fetch again even if files are present")
    data.set_defaults(handler=cmd_data)

    plot = commands.add_parser(
        "plot", allow_abbrev=False, help="attention heatmaps, learning curves, positional encodings",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="attention RUN_DIR --text T: heatmaps of what each output token attended to\n"
                    "  (source x output; Transformers: every layer and head, or --layer/--head;\n"
                    "  --self encoder for the encoder's self-attention).\n"
                    "curves RUN_DIR: training and validation curves from metrics.jsonl.\n"
                    "positional: the sinusoidal encoding and the RoPE rotation for a width.\n"
                    "The format follows --out's suffix: .png or .svg.",
        epilog="examples:\n  seqmap plot attention runs/en-zh --text \"I love machine learning.\" --out attn.png\n"
               "  seqmap plot curves runs/en-zh --out curves.svg\n"
               "  seqmap plot positional --d-model 128 --length 100 --out positional.png")
    plot.add_argument("what", choices=["attention", "curves", "positional"])
    plot.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a run directory (attention, curves)")
    plot.add_argument("--out", required=True, help="output image, .png or .svg")
    plot.add_argument("--text", help="attention: the source sentence (an LM: the text)")
    plot.add_argument("--hyp", help="attention: force this output instead of decoding one")
    plot.add_argument("--layer", type=int, help="attention: one layer (default: all)")
    plot.add_argument("--head", help="attention: one head, or 'mean' (default: all)")
    plot.add_argument("--self", choices=["encoder", "decoder"], help="attention: self-attention instead of cross")
    plot.add_argument("--checkpoint", default="best", help="attention: best (default), last or a directory")
    plot.add_argument("--title", help="figure title")
    plot.add_argument("--d-model", type=int, default=128, help="positional: width (default 128)")
    plot.add_argument("--length", type=int, default=100, help="positional: positions (default 100)")
    plot.add_argument("--head-dim", type=int, help="positional: RoPE head width (default: d-model)")
    plot.set_defaults(handler=cmd_plot)

    toy = commands.add_parser(
        "toy", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        help="train and evaluate a model on a synthetic task (copy, reverse, sort)",
        description="Train a model on a synthetic task, then decode a held-out set greedily and report\n"
                    "exact-match and token accuracy. Override any config key with --section.key VALUE.",
        epilog="example:\n  seqmap toy configs/toy/reverse_transformer.yaml --toy.steps 300 --model.d_model 64")
    toy.add_argument("config", help="YAML file with model: and toy: sections")
    toy.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    toy.set_defaults(handler=cmd_toy)
    from seqmap import serve  # imports neither FastAPI nor uvicorn until `serve` runs

    serve.add_parser(commands)
    return parser


def _split_overrides(tokens: list[str]) -> tuple[list[str], list[str]]:
    """``--section.key VALUE`` / ``--section.key=VALUE`` overrides, and the tokens that belong to none."""
    overrides, stray = [], []
    items = list(tokens)
    while items:
        tok = items.pop(0)
        if tok.startswith("--") and "." in tok:
            overrides.append(tok)
            if "=" not in tok and items:
                overrides.append(items.pop(0))
        else:
            stray.append(tok)
    return overrides, stray


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _user_errors() -> tuple[type[Exception], ...]:
    """Errors that mean "fix your input": one line on stderr, exit 2, no traceback."""
    from seqmap.data.corpus import DataError
    from seqmap.data.datasets import DatasetError
    from seqmap.data.tokenizers import TokenizerError
    from seqmap.decoding.align import NoAttentionError
    from seqmap.runs import RunError
    from seqmap.training.checkpoint import CheckpointError
    from seqmap.training.trainer import TrainingError

    return DataError, DatasetError, TokenizerError, RunError, CheckpointError, TrainingError, NoAttentionError


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, overrides = parser.parse_known_args(argv)
    bad = [tok for tok in overrides if tok.startswith("-") and "." not in tok and not _is_number(tok)]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)}")
    args.overrides = overrides
    if isinstance(getattr(args, "text", None), list):  # translate: sentences after an option land in overrides
        args.overrides, stray = _split_overrides(overrides)
        args.text = [*args.text, *stray]
    try:
        return args.handler(args)
    except (UserError, ConfigError, *_user_errors()) as e:
        print(f"seqmap: error: {e}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print("seqmap: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
