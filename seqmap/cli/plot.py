"""``seqmap plot attention | curves | positional``: heatmaps, learning curves, positional encodings."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seqmap.cli.errors import UserError, check_text
from seqmap.cli.evaluate_tasks import load_run_graph
from seqmap.tasks.registry import TASKS


def _int_option(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UserError(f"{name} must be a number or 'mean', got {value!r}") from None


def _reject_unused(args: argparse.Namespace, kind: str, names: tuple[str, ...]) -> None:
    """A UserError for options given that the attention plot of ``kind`` does not use (rather than ignore them)."""
    given = [f"--{name}" for name in names if getattr(args, name) is not None and getattr(args, name) is not False]
    if given:
        them = "them" if len(given) > 1 else "it"
        raise UserError(f"{', '.join(given)} cannot be used with {kind}: leave {them} out")


def add_parser(commands) -> None:
    plot = commands.add_parser(
        "plot", allow_abbrev=False, help="attention heatmaps, learning curves, positional encodings",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="attention RUN_DIR --text T: heatmaps of what each output token attended to\n"
                    "  (source x output; Transformers: every layer and head, ConvS2S: every decoder layer,\n"
                    "  or --layer/--head; --self encoder for the encoder's self-attention; --copy for a\n"
                    "  pointer-generator's copy head, with each output's p_gen).\n"
                    "attention RUN_DIR --image FILE: an image classifier (ViT): attention rollout and the\n"
                    "  last layer's class-token attention over the image.\n"
                    "attention RUN_DIR --node ID: a graph run (model.family gat): the node's attention over\n"
                    "  its neighbours, a panel per layer (--layer), mean of heads unless --head N.\n"
                    "curves RUN_DIR: training and validation curves from metrics.jsonl (loss, lr, perplexity,\n"
                    "  and what validation scored: BLEU/chrF, WER and string accuracy, or accuracy/macro-F1).\n"
                    "positional: the sinusoidal encoding and the RoPE rotation for a width.\n"
                    "The format follows --out's suffix: .png or .svg.",
        epilog="examples:\n  seqmap plot attention runs/en-zh --text \"I love machine learning.\" --out attn.png\n"
               "  seqmap plot attention runs/cora-gat --node 1701 --out node1701.png\n"
               "  seqmap plot curves runs/en-zh --out curves.svg\n"
               "  seqmap plot positional --d-model 128 --length 100 --out positional.png")
    plot.add_argument("what", choices=["attention", "curves", "positional"])
    plot.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a run directory (attention, curves)")
    plot.add_argument("--out", required=True, help="output image, .png or .svg")
    plot.add_argument("--text", help="attention: the source sentence (an LM: the text)")
    plot.add_argument("--image", help="attention: an image file, for an image classifier (model.family=vit)")
    plot.add_argument("--audio", help="attention: an audio file (WAV), for a speech run (model.family=speech)")
    plot.add_argument("--hyp", help="attention: force this output instead of decoding one")
    plot.add_argument("--node", type=int, help="attention, a graph run: the node whose neighbourhood to draw")
    plot.add_argument("--data", help="attention, a graph run: the graph .npz (default: the run's data.train)")
    plot.add_argument("--layer", type=int, help="attention: one layer (default: all)")
    plot.add_argument("--head", help="attention: one head, or 'mean' (default: all)")
    plot.add_argument("--self", choices=["encoder", "decoder"], help="attention: self-attention instead of cross")
    plot.add_argument("--copy", action="store_true", help="attention: a pointer-generator's copy head (model.copy) "
                      "instead of cross, each output labelled with its p_gen")
    plot.add_argument("--checkpoint", default="best", help="attention: best (default), last or a directory")
    plot.add_argument("--title", help="figure title")
    plot.add_argument("--d-model", type=int, default=128, help="positional: width (default 128)")
    plot.add_argument("--length", type=int, default=100, help="positional: positions (default 100)")
    plot.add_argument("--head-dim", type=int, help="positional: RoPE head width (default: d-model)")
    plot.set_defaults(handler=cmd_plot)


def cmd_plot(args: argparse.Namespace) -> int:
    import warnings

    from seqmap import visualize
    from seqmap.visualize.fonts import MissingGlyphsWarning

    def show(message, category, *where, **options) -> None:  # characters no font has: one line, no source line
        if issubclass(category, MissingGlyphsWarning):
            print(f"seqmap: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, *where, **options)

    try:
        with warnings.catch_warnings():  # puts showwarning back on the way out
            shown, warnings.showwarning = warnings.showwarning, show
            _plot(args, visualize)
    except (FileNotFoundError, ValueError) as e:  # a wrong path, suffix or option: the message says which
        raise UserError(str(e)) from None
    print(f"wrote {args.out}")
    return 0


def _plot(args: argparse.Namespace, visualize) -> None:
    out = Path(args.out)
    if args.title is not None:
        check_text(args.title, "--title")
    if args.what == "positional":
        if args.run_dir is not None:
            raise UserError(f"seqmap plot positional draws the encodings for --d-model/--length; it reads no run "
                            f"directory: leave out {args.run_dir}")
        visualize.plot_positional(args.d_model, args.length, out, head_dim=args.head_dim)
    elif args.run_dir is None:
        raise UserError(f"seqmap plot {args.what} needs a RUN_DIR")
    elif args.what == "curves":
        visualize.plot_curves(args.run_dir, out, title=args.title)
    else:
        if not args.text and args.node is None and not args.image and not args.audio:
            raise UserError("seqmap plot attention needs --text SENTENCE (an image classifier: --image FILE; a graph "
                            "run: --node ID; a speech run: --audio FILE)")
        from seqmap.runs import load_run

        run = load_run(args.run_dir, args.checkpoint)
        head = args.head if args.head in (None, "mean") else _int_option("--head", args.head)
        if (reads := TASKS[run.cfg.data.task].input) == "image":  # text, image, audio or graph
            if not args.image:
                raise UserError(f"{args.run_dir} classifies images: seqmap plot attention needs --image FILE")
            _reject_unused(args, "an image classifier", ("text", "layer", "hyp", "self", "copy", "data"))
            visualize.plot_image_attention(run, args.image, out, head=None if head == "mean" else head,
                                           title=args.title)
            return
        if args.image:
            raise UserError(f"--image is for image classifiers (model.family=vit); {args.run_dir} has "
                            f"data.task={run.cfg.data.task}")
        if (reads == "audio") != bool(args.audio):
            raise UserError(f"{args.run_dir} is a speech run: plot it with --audio FILE" if not args.audio else
                            f"--audio is for speech runs; {args.run_dir} has data.task={run.cfg.data.task}")
        if args.audio:
            _reject_unused(args, "a speech run (it draws the decoder's cross-attention)",
                           ("text", "hyp", "self", "copy", "data"))
            visualize.plot_speech_attention(run, args.audio, out, layer=args.layer, head=head, title=args.title)
            return
        if (reads == "graph") != (args.node is not None):
            raise UserError(f"{args.run_dir} is a graph run: plot it with --node ID" if args.node is None else
                            f"--node is for graph runs; {args.run_dir} reads text: plot it with --text SENTENCE")
        if args.node is not None:
            _reject_unused(args, "a graph run", ("text", "hyp", "self", "copy"))
            data = load_run_graph(run, args.data)
            visualize.plot_node_attention(run, data, args.node, out, layer=args.layer, head=head, title=args.title)
            return
        if not args.text.strip():
            raise UserError("--text is empty: seqmap plot attention needs --text SENTENCE")
        check_text(args.text, "--text")
        if args.hyp is not None:
            check_text(args.hyp, "--hyp")
        _reject_unused(args, "a text run (--data is for graph runs)", ("data",))
        if args.copy and args.self:
            raise UserError("--copy and --self pick different attentions: give one of them")
        which = args.self or ("copy" if args.copy else "cross")
        visualize.plot_run_attention(run, args.text, out, hypothesis=args.hyp, which=which,
                                     layer=args.layer, head=head, title=args.title)
