"""The GAT paper's recipe on Cora / CiteSeer through ``seqmap train``, over several seeds: mean +- std test accuracy.

    python bench/gat_recipe.py --dataset cora --seeds 0-9 --json cora.json
    python bench/gat_recipe.py --dataset citeseer --seeds 0-9 --json citeseer.json
    python bench/gat_recipe.py --dataset cora --seeds 0 --train.patience 100   # any config override

Each seed is one ``seqmap.training.run_trainer.train`` of ``configs/{cora,citeseer}_gat.yaml`` (the recipe and
its sources are in the config's comments) with ``train.seed`` set, scored on the test nodes at the end
as ``seqmap train`` does (``seqmap.evaluation.evaluate_test_split``); nothing is trained here. Run
directories go to a temporary folder (``--keep-runs DIR`` keeps them).

One thread by default (``--threads``): accuracies are then deterministic per seed. Results measured with
this script (test accuracy, mean +- std over seeds 0-9, one thread, CPU) are in ``docs/graphs.md``.
Seconds per seed are printed but were not measured on a quiet machine: do not quote them.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from seqmap.config import load_config  # noqa: E402
from seqmap.evaluation import evaluate_test_split  # noqa: E402
from seqmap.training.run_trainer import train  # noqa: E402

DEFAULT_ROOT = ROOT.parent / "shared" / "data" / "planetoid"


def parse_seeds(text: str) -> list[int]:
    """'0-9' -> 0..9, '1,4,7' -> [1, 4, 7]."""
    seeds: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        seeds.extend(range(int(a), int(b) + 1) if b else [int(a)])
    return seeds


def train_seed(config: Path, graph: Path, seed: int, run_dir: Path, overrides: list[str]) -> dict:
    """One ``train`` of ``config`` on ``graph`` with ``train.seed = seed``: its test scores, epochs and kept step."""
    cfg = load_config(config, [f"--data.train={graph}", f"--train.seed={seed}", *overrides])
    start = time.perf_counter()
    result = train(cfg, run_dir, stream=io.StringIO(), test=evaluate_test_split)
    seconds = time.perf_counter() - start
    index = json.loads((run_dir / "checkpoints" / "index.json").read_text(encoding="utf-8"))
    test = result["test"]
    return dict(seed=seed, val_acc=result["best"], test_acc=test["accuracy"], test_macro_f1=test["macro_f1"],
                test_loss=test["loss"], epochs=result["step"], kept_epoch=index["best"]["step"], seconds=seconds)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="Other --section.key VALUE options override the config.")
    p.add_argument("--dataset", default="cora", choices=("cora", "citeseer"))
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="folder holding cora.npz and citeseer.npz")
    p.add_argument("--config", type=Path, help="run config (default: configs/DATASET_gat.yaml)")
    p.add_argument("--seeds", default="0-9", help="'0-9' or '0,3,5'")
    p.add_argument("--json", type=Path, help="write the per-seed rows and the summary here")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--keep-runs", type=Path, metavar="DIR", help="keep the run directories here (DIR/seed-N)")
    args, overrides = p.parse_known_args(argv)
    torch.set_num_threads(args.threads)
    config = args.config or ROOT / "configs" / f"{args.dataset}_gat.yaml"
    graph = args.root / f"{args.dataset}.npz"
    rows = []
    with tempfile.TemporaryDirectory(prefix="gat-recipe-") as tmp:
        runs = args.keep_runs or Path(tmp)
        for seed in parse_seeds(args.seeds):
            row = train_seed(config, graph, seed, runs / f"seed-{seed}", overrides)
            rows.append(row)
            print(f"{args.dataset} seed {seed}: val {row['val_acc']:.2f} test {row['test_acc']:.2f} "
                  f"epochs {row['epochs']} (kept {row['kept_epoch']}) {row['seconds']:.1f} s", flush=True)
    tests = [r["test_acc"] for r in rows]
    std = statistics.stdev(tests) if len(tests) > 1 else 0.0
    summary = dict(dataset=args.dataset, seeds=len(rows), test_mean=statistics.mean(tests), test_std=std,
                   val_mean=statistics.mean(r["val_acc"] for r in rows), threads=args.threads,
                   config=str(config), overrides=overrides, torch=torch.__version__)
    print(f"{args.dataset}: test accuracy {summary['test_mean']:.2f} +- {std:.2f} over {len(rows)} seeds "
          f"(val {summary['val_mean']:.2f})", flush=True)
    if args.json:
        args.json.write_text(json.dumps(dict(summary=summary, rows=rows), indent=2) + "\n")


if __name__ == "__main__":
    main()
