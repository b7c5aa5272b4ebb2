"""``seqmap data list | download NAME | prepare NAME --from DIR``: the public corpora seqmap knows."""

from __future__ import annotations

import argparse
from pathlib import Path

from seqmap.cli.errors import UserError


def add_parser(commands) -> None:
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


def cmd_data(args: argparse.Namespace) -> int:
    from seqmap.data import datasets

    # each option belongs to some actions only: given to another, it would be ignored without a word
    for flag, value, actions in (("--dest", args.dest, ("download", "prepare")), ("--from", args.source, ("prepare",)),
                                 ("--base-url", args.base_url, ("download",)), ("--force", args.force, ("download",))):
        if value and args.action not in actions:
            raise UserError(f"{flag} is for seqmap data {' and '.join(actions)}, not {args.action}; leave it out"
                            + (f" or run seqmap data prepare {args.name or 'NAME'} --from {value}" if flag == "--from"
                               else ""))
    if args.action == "list":
        if args.name is not None:
            raise UserError(f"seqmap data list takes no NAME (got {args.name!r}); it lists every dataset")
        width = max(len(d.name) for d in datasets.list_datasets())
        for d in datasets.list_datasets():
            where = "bundled" if d.bundled else "download"
            print(f"{d.name:{width}s} {where:9s} {d.description} ({d.license})")
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
