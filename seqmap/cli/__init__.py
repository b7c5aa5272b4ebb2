"""The ``seqmap`` command line: one subcommand per job.

    seqmap train CONFIG [--run-dir DIR] [--section.key VALUE ...]   train on your text
    seqmap train --resume RUN_DIR [--section.key VALUE ...]         continue a run exactly
    seqmap translate RUN_DIR [TEXT ...] [--input FILE]              translate (stdin if no text)
    seqmap transcribe RUN_DIR AUDIO ...                             speech to text (a speech run)
    seqmap evaluate RUN_DIR --src FILE --ref FILE                   BLEU / chrF / TER / perplexity
    seqmap generate RUN_DIR --prompt TEXT                           sample from a language model
    seqmap classify RUN_DIR [TEXT ...] [--input FILE]               the class of each text (a classifier)
    seqmap average CHECKPOINT ... --out DIR                         average checkpoint weights
    seqmap data list | download NAME | prepare NAME --from DIR      public corpora
    seqmap toy CONFIG                                               a synthetic task in a minute
    seqmap serve RUN_DIR [--host 127.0.0.1] [--port 8000]           HTTP API and a page to explore attention

Overrides are dotted config keys (``--train.lr 3e-4 --model.d_model 64``).
User errors (a missing file, bad YAML, a wrong option, a broken checkpoint) print
one line to stderr and exit with status 2; under torchrun the processes other than
rank 0 begin theirs with ``[rank N]`` (``_report``).

Each verb is one module here (``train.py``, ``translate.py``, ``evaluate.py``, ``generate.py``,
``classify.py``, ``average.py``, ``data.py``, ``plot.py``, ``toy.py``; ``serve`` lives in ``seqmap.serve``) with its
``add_parser(commands)`` and its ``cmd_*`` handler. What they share: ``errors.py`` (the user error, exit
statuses), ``options.py`` (``--threads``, ``--decode.*`` overrides), ``trained_run.py`` (a command on a
trained run). This module assembles the parser and runs the chosen handler.
"""

from __future__ import annotations

import argparse
import os
import sys

import seqmap
from seqmap.cli import average, classify, data, evaluate, generate, hub, plot, toy, train, transcribe, translate
from seqmap.cli.errors import INTERRUPTED_STATUS, USAGE_ERROR, UserError
from seqmap.cli.options import unrecognized
from seqmap.config import ConfigError

__all__ = ["USAGE_ERROR", "UserError", "build_parser", "main"]

# in the order `seqmap --help` lists them
VERBS = (train, translate, transcribe, evaluate, generate, classify, average, data, hub, plot, toy)
NO_OVERRIDES = ("classify", "average", "data", "import", "export", "plot")  # verbs no --section.key reaches


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="seqmap", allow_abbrev=False, description="Sequence models and attention in PyTorch.")
    parser.add_argument("--version", action="version", version=f"seqmap {seqmap.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    for verb in VERBS:
        verb.add_parser(commands)
    from seqmap import serve  # imports neither FastAPI nor uvicorn until `serve` runs

    serve.add_parser(commands)
    parser.commands = commands  # each verb's parser, for errors in its arguments (``unrecognized``)
    return parser


def _split_overrides(tokens: list[str]) -> tuple[list[str], list[str]]:
    """``--section.key VALUE`` / ``--section.key=VALUE`` overrides (anywhere, even before CONFIG), and the other
    tokens in their order; everything after a bare ``--`` is left to argparse."""
    overrides, rest = [], []
    items = list(tokens)
    while items:
        tok = items.pop(0)
        if tok == "--":
            rest += [tok, *items]
            break
        if tok.startswith("--") and "." in tok.split("=", 1)[0]:
            overrides.append(tok)
            if "=" not in tok and items:
                overrides.append(items.pop(0))
        else:
            rest.append(tok)
    return overrides, rest


def _user_errors() -> tuple[type[Exception], ...]:
    """Errors that mean "fix your input": one line on stderr, exit 2, no traceback."""
    from seqmap.checkpoints import CheckpointError
    from seqmap.data.corpus import DataError
    from seqmap.data.datasets import DatasetError
    from seqmap.data.tokenizers import TokenizerError
    from seqmap.decoding.align import NoAttentionError
    from seqmap.runs import RunError
    from seqmap.training.trainer import TrainingError

    return DataError, DatasetError, TokenizerError, RunError, CheckpointError, TrainingError, NoAttentionError


def _report(line: str) -> None:
    """``seqmap: LINE`` on stderr. Under torchrun every process meets an error in the config or the command line:
    rank 0's line is the report and the others begin theirs with ``[rank N]``, so one error does not read as
    several. None is left out: an error may be one process's alone, and torchrun stops the other processes when
    one fails, so none can wait to see whether rank 0 reported the same. The rank is torchrun's ``RANK`` when
    ``WORLD_SIZE`` > 1 (as ``seqmap.training.distributed`` reads it before a process group exists)."""
    world, rank = os.environ.get("WORLD_SIZE", "1"), os.environ.get("RANK", "0")
    prefix = f"[rank {rank}] " if world not in ("", "1") and rank not in ("", "0") else ""
    print(f"{prefix}seqmap: {line}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    overrides, rest = _split_overrides(sys.argv[1:] if argv is None else argv)
    args, stray = parser.parse_known_args(rest)
    for name in ("text", "texts", "audio"):  # translate, classify, transcribe: inputs after an option land in stray
        if isinstance(getattr(args, name, None), list):
            setattr(args, name, [*getattr(args, name), *(tok for tok in stray if not tok.startswith("-"))])
            stray = [tok for tok in stray if tok.startswith("-")]
    if stray:
        unrecognized(parser.commands.choices[args.command], args.command, stray)
    args.overrides = overrides
    if overrides and args.command in NO_OVERRIDES:  # they were ignored without a word
        _report(f"error: seqmap {args.command} takes no --SECTION.KEY options; leave out {overrides[0].split('=')[0]}")
        return USAGE_ERROR
    try:
        return args.handler(args)
    except (UserError, ConfigError, *_user_errors()) as e:
        _report(f"error: {e}")
        return USAGE_ERROR
    except KeyboardInterrupt:
        _report("interrupted")
        return INTERRUPTED_STATUS
    except BrokenPipeError:  # the reader of a pipe left (`seqmap translate ... | head -1`): no traceback
        try:  # Python flushes stdout again at exit: point it where that cannot fail
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is not a real file (captured in tests)
            pass
        return 141  # 128 + SIGPIPE, as the shell reports a process a closed pipe ended
