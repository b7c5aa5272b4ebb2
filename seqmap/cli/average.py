"""``seqmap average CHECKPOINT ... --out DIR``: one checkpoint with the mean weights of several."""

from __future__ import annotations

import argparse
from pathlib import Path

from seqmap.cli.errors import UserError
from seqmap.paths import file_above


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
    from seqmap.checkpoints.averaging import save_averaged

    if len(args.checkpoints) < 2:
        raise UserError("give at least two checkpoint directories to average")
    paths = [Path(p) for p in args.checkpoints]
    for path in paths:
        if (path / "checkpoints").is_dir():
            raise UserError(f"{path} is a run directory; give its checkpoint directories ({path}/checkpoints/step-*)")
        if [p.resolve() for p in paths].count(path.resolve()) > 1:  # also step-1 and ./run/../step-1
            raise UserError(f"{path} is given twice; give each checkpoint once (each counts once in the mean)")
    if Path(args.out).exists():
        raise UserError(f"--out {args.out} already exists; give a new directory (averaging never overwrites)")
    above = file_above(args.out)
    if above is not None:
        raise UserError(f"{above} is a file, so --out {args.out} cannot be made under it; give a new directory")
    out = save_averaged(args.checkpoints, args.out)
    print(f"averaged {len(args.checkpoints)} checkpoints into {out}")
    return 0
