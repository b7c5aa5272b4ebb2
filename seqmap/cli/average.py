"""``seqmap average CHECKPOINT ... --out DIR``: one checkpoint with the mean weights of several."""

from __future__ import annotations

import argparse

from seqmap.cli.common import UserError


def add_parser(commands) -> None:
    average = commands.add_parser(
        "average", allow_abbrev=False, help="average the weights of several checkpoints",
        description="Average the weights of checkpoints of one run into a new checkpoint directory,\n"
                    "usable with translate/evaluate like any other.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  seqmap average runs/en-zh/checkpoints/step-0* --out runs/en-zh/averaged")
    average.add_argument("checkpoints", nargs="+", help="checkpoint directories (step-N)")
    average.add_argument("--out", required=True, help="the new checkpoint directory")
    average.set_defaults(handler=cmd_average)


def cmd_average(args: argparse.Namespace) -> int:
    from seqmap.training.averaging import save_averaged

    if len(args.checkpoints) < 2:
        raise UserError("give at least two checkpoint directories to average")
    out = save_averaged(args.checkpoints, args.out)
    print(f"averaged {len(args.checkpoints)} checkpoints into {out}")
    return 0
