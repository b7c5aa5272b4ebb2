"""One language model's validation loss under two estimators, so that it can be set beside a peer's figure.

    python bench/lm_estimators.py runs/shakespeare                    # the tiny Shakespeare run
    python bench/lm_estimators.py runs/shakespeare --json out.json    # also write the figures as JSON

* **whole text**: what ``seqmap train`` logs and ``seqmap evaluate`` reports: the mean NLL of every
  validation token once, read in consecutive windows of ``data.context`` (each window starts afresh).
* **random batches**: nanoGPT's ``estimate_loss``: the mean loss of ``--batches`` batches of
  ``--batch-size`` windows of ``data.context`` tokens at uniformly random offsets of the validation
  text (nanoGPT's CPU command for tiny Shakespeare uses 20 batches of 12 x 64). One such estimate
  is a random number; the script draws ``--draws`` of them (seeds 0..draws-1) and reports their mean,
  standard deviation and range, so a single published estimate can be read against the spread.

Both read the validation text the run was trained with, encoded by the run's tokenizer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/machine.py

from machine import cpu_name  # noqa: E402

from seqmap.data.samplers import lm_chunks, lm_random_chunks  # noqa: E402
from seqmap.data.tokenizers import PAD  # noqa: E402
from seqmap.runs import load_run  # noqa: E402
from seqmap.tasks.lm import read_lm_texts  # noqa: E402


@torch.no_grad()
def summed_nll(model, inputs: torch.Tensor, targets: torch.Tensor, rows: int = 64) -> tuple[float, int]:
    """Summed NLL (float64) and the number of non-PAD targets, over (N, C) windows, ``rows`` at a time."""
    total, count = 0.0, 0
    for i in range(0, inputs.size(0), rows):
        x, y = inputs[i:i + rows], targets[i:i + rows]
        logits = model(None, None, x)  # (B, C, V)
        nll = F.cross_entropy(logits.flatten(0, 1).double(), y.flatten(), ignore_index=PAD, reduction="sum")
        total += nll.item()
        count += int((y != PAD).sum())
    return total, count


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--checkpoint", default="best", help="best (default) or last")
    p.add_argument("--batches", type=int, default=20, help="random batches per estimate (nanoGPT's eval_iters)")
    p.add_argument("--batch-size", type=int, default=12, help="windows per random batch")
    p.add_argument("--draws", type=int, default=200, help="independent random-batch estimates")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, help="write the figures to this file as JSON")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    run = load_run(args.run_dir, args.checkpoint)
    if run.cfg.model.family not in ("lm", "rnn_lm"):
        p.error(f"{args.run_dir} holds a {run.cfg.model.family} model; this bench scores language models")
    model, context = run.model.eval(), run.cfg.data.context
    stream = run.tgt_tok.encode(read_lm_texts(run.cfg.data)["valid"])

    nll, n = summed_nll(model, *lm_chunks(stream, context))
    whole = nll / n
    estimates = []
    for seed in range(args.draws):
        g = torch.Generator().manual_seed(seed)
        batch_means = []
        for _ in range(args.batches):
            b_nll, b_n = summed_nll(model, *lm_random_chunks(stream, context, args.batch_size, g))
            batch_means.append(b_nll / b_n)
        estimates.append(statistics.fmean(batch_means))  # nanoGPT: losses.mean() over the batches
    mean, std = statistics.fmean(estimates), statistics.stdev(estimates) if len(estimates) > 1 else 0.0

    print(f"# {cpu_name()}, {args.threads} threads, torch {torch.__version__}; run {args.run_dir} "
          f"({run.checkpoint.name}), context {context}, {len(stream):,} validation tokens")
    print("| estimator | loss | spread |\n|---|---:|---|")
    print(f"| whole text, consecutive windows of {context} ({n:,} targets) | {whole:.4f} | exact |")
    print(f"| random batches: {args.batches} x {args.batch_size} x {context}, mean of {args.draws} draws | "
          f"{mean:.4f} | std {std:.4f}, range {min(estimates):.4f}-{max(estimates):.4f} |")
    if args.json:
        args.json.write_text(json.dumps(dict(
            cpu=cpu_name(), threads=args.threads, torch=torch.__version__, run=str(args.run_dir),
            checkpoint=run.checkpoint.name, context=context, whole_text_loss=whole, whole_text_targets=n,
            random_batches=args.batches, random_batch_size=args.batch_size, draws=args.draws,
            random_mean=mean, random_std=std, random_min=min(estimates), random_max=max(estimates),
            estimates=estimates), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
