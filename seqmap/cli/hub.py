"""``seqmap import hf SOURCE --out RUN_DIR``: a pretrained Hugging Face model as an ordinary seqmap run."""

from __future__ import annotations

import argparse
from pathlib import Path

from seqmap.cli.common import UserError


def add_parser(commands) -> None:
    p = commands.add_parser(
        "import", allow_abbrev=False, help="import a pretrained model (Hugging Face format) as a run directory",
        description="hf SOURCE: a directory written by transformers' save_pretrained (config.json,\n"
                    "model.safetensors, tokenizer.json), or a Hub name where the Hub can be reached.\n"
                    "Imports GPT2LMHeadModel so far (MarianMT, BERT and ViT: issue 15). The result opens\n"
                    "with every verb, like a trained run.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  seqmap import hf ~/models/gpt2 --out runs/gpt2\n"
               "  seqmap generate runs/gpt2 --prompt \"Hello, I'm a language model,\" --greedy")
    p.add_argument("format", choices=["hf"], help="the format of SOURCE (hf: Hugging Face transformers)")
    p.add_argument("source", metavar="SOURCE", help="a save_pretrained directory, or a Hub name")
    p.add_argument("--out", required=True, help="the run directory to write")
    p.set_defaults(handler=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    from seqmap.data.tokenizer_base import TokenizerError
    from seqmap.hub import HubError, import_hf

    try:
        checkpoint = import_hf(args.source, args.out)
    except (HubError, TokenizerError) as e:
        raise UserError(str(e)) from None
    print(f"imported {args.source} into {Path(args.out)} ({checkpoint.name})")
    return 0
