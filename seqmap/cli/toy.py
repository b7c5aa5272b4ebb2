"""``seqmap toy CONFIG``: train and evaluate a model on a synthetic task (copy, reverse, sort) in a minute."""

from __future__ import annotations

import argparse
import json
import time

from seqmap.cli.options import threads
from seqmap.config import read_yaml


def add_parser(commands) -> None:
    toy = commands.add_parser(
        "toy", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        help="train and evaluate a model on a synthetic task (copy, reverse, sort)",
        description="Train a model on a synthetic task, then decode a held-out set greedily and report\n"
                    "exact-match and token accuracy. Override any config key with --section.key VALUE.",
        epilog="example:\n  seqmap toy configs/toy/reverse_transformer.yaml --toy.steps 300 --model.d_model 64")
    toy.add_argument("config", help="YAML file with model: and toy: sections")
    toy.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    toy.set_defaults(handler=cmd_toy)


def cmd_toy(args: argparse.Namespace) -> int:
    from seqmap.training.toy import ToyRun, train_toy

    run = ToyRun.from_dict(read_yaml(args.config, args.overrides))
    torch_threads = threads(args.threads)
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
