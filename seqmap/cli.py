"""The ``seqmap`` command line: one subcommand per job.

    seqmap toy CONFIG [--section.key VALUE ...]   train and evaluate on a synthetic task
    seqmap --version

Overrides are dotted config keys (``--toy.steps 200 --model.d_model 64``).
User errors (a missing file, bad YAML, a wrong option) print one line to stderr
and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

import seqmap
from seqmap.config import ConfigError, apply_overrides

USAGE_ERROR = 2


class UserError(Exception):
    """A mistake the user can fix; printed as one line, exit status 2."""


def read_config(path: str, overrides: list[str]) -> dict:
    """A YAML config file as a dict, with dotted ``overrides`` applied."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as e:
        raise UserError(f"cannot parse {path} as YAML: {_yaml_problem(e)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a mapping of sections (model:, toy:, ...), not a {type(data).__name__}")
    return apply_overrides(data, overrides)


def _yaml_problem(error: yaml.YAMLError) -> str:
    """One line from a YAML error: what is wrong and where."""
    problem = getattr(error, "problem", None)
    mark = getattr(error, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(error).split())


def cmd_toy(args: argparse.Namespace) -> int:
    from seqmap.training.toy import ToyRun, train_toy

    run = ToyRun.from_dict(read_config(args.config, args.overrides))
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

    toy = commands.add_parser(
        "toy", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        help="train and evaluate a model on a synthetic task (copy, reverse, sort)",
        description="Train a model on a synthetic task, then decode a held-out set greedily and report\n"
                    "exact-match and token accuracy. Override any config key with --section.key VALUE.",
        epilog="example:\n  seqmap toy configs/toy/reverse_transformer.yaml --toy.steps 300 --model.d_model 64")
    toy.add_argument("config", help="YAML file with model: and toy: sections")
    toy.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    toy.set_defaults(handler=cmd_toy)
    return parser


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, overrides = parser.parse_known_args(argv)
    bad = [tok for tok in overrides if tok.startswith("-") and "." not in tok and not _is_number(tok)]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)}")
    args.overrides = overrides
    try:
        return args.handler(args)
    except (UserError, ConfigError) as e:
        print(f"seqmap: error: {e}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print("seqmap: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
