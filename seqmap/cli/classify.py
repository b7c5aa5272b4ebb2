"""``seqmap classify RUN_DIR [TEXT ...] [--input FILE]``: the class of each text (or image file), by a classifier."""

from __future__ import annotations

import argparse

from seqmap.cli.errors import UserError, check_text
from seqmap.cli.trained_run import load, run_parser
from seqmap.tasks.registry import TASKS


def add_parser(commands) -> None:
    classify = run_parser(
        commands, "classify", "the class of each text (or image), by a trained classifier",
        "Print one line per text: the predicted class, a tab, and its probability.\n"
        "Texts come from the arguments, from --input FILE (one per line), or from stdin.\n"
        "An image classifier (model.family=vit) reads image files instead (PNG, JPEG, ...), converted\n"
        "to its channels and resized to its image size.",
        "examples:\n  seqmap classify runs/sections \"a library for parsing JSON\"\n"
        "  seqmap classify runs/sections --input texts.txt --top 3\n"
        "  seqmap classify runs/mnist_vit digit.png --top 3")
    classify.add_argument("texts", nargs="*", metavar="TEXT", help="texts to classify (image files for an image "
                                                                     "classifier)")
    classify.add_argument("--input", help="a file of texts, one per line (image paths for an image "
                                          "classifier)")
    classify.add_argument("--top", type=int, default=1, help="print the k most likely classes (default 1)")
    classify.set_defaults(handler=cmd_classify)


def cmd_classify(args: argparse.Namespace) -> int:
    import torch

    from seqmap.data.batching import collate_images, collate_labels
    from seqmap.data.pipeline import classification_ids

    if args.texts and args.input:
        raise UserError("give texts as arguments or --input FILE, not both")
    run = load(args, task=("classification", "image"))
    if args.top < 1:
        raise UserError(f"--top must be at least 1, got {args.top}")
    if args.input:
        from seqmap.data.corpus import read_lines

        texts = read_lines(args.input, "--input")
    elif args.texts:
        for number, text in enumerate(args.texts, start=1):
            check_text(text, f"TEXT {number}")
        texts = args.texts
    else:
        from seqmap.data.corpus import read_stdin

        texts = read_stdin()
    if not texts:
        raise UserError("nothing to classify: give TEXT arguments, --input FILE, or pipe texts into stdin")
    empty = next((number for number, text in enumerate(texts, start=1) if not text.strip()), None)
    images = TASKS[run.cfg.data.task].input == "image"
    if images and empty is not None:
        where = "an argument" if args.texts else f"line {empty} of {args.input or 'stdin'}"
        raise UserError(f"{where} is empty; an image classifier reads one image path per line")
    labels, k = run.labels, min(args.top, len(run.labels))
    for text in texts:
        if images:
            batch = collate_images(read_run_image(run, text)[None], [0]).to(run.device)
        else:
            batch = collate_labels([(classification_ids(run.src_tok, text, run.cfg.data.max_len), 0)]).to(run.device)
        with torch.no_grad():
            probs = run.model(batch.src, batch.src_mask).softmax(-1)[0]
        top = probs.topk(k)
        print("\t".join(f"{labels.decode(i)}\t{p:.3f}" for p, i in zip(top.values.tolist(), top.indices.tolist())))
    return 0


def read_run_image(run, path: str):
    """An image file as the image classifier ``run`` reads it: (C, H, W) uint8 in its channels and size."""
    from seqmap.data.images import read_image_file

    m = run.cfg.model
    return read_image_file(path, "L" if m.image_channels == 1 else "RGB", (m.image_height, m.image_width))
