"""``python -m seqmap.serve RUN_DIR [options]``: the same as ``seqmap serve RUN_DIR [options]``."""

import argparse
import sys

from seqmap.serve import add_parser, main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m seqmap.serve", allow_abbrev=False)
    serve = add_parser(parser.add_subparsers(dest="command"))
    serve.prog = "python -m seqmap.serve"
    sys.exit(main(serve.parse_args(sys.argv[1:])))
