"""Data at scale: preparing a large parallel corpus, and training on it with flat memory.

    python bench/data_scale.py                                   # 100k, 1M and 4.5M synthetic pairs
    python bench/data_scale.py --sizes 100000 --steps 10         # a quick look
    python bench/data_scale.py --baseline-tree /tmp/old --baseline-sizes 100000 1000000
    python bench/data_scale.py --json out.json                   # also write the rows as JSON

Per corpus size it writes a synthetic parallel corpus (Zipf-distributed pseudo-words over a 30,000-word
vocabulary per side, 10-40 words a sentence; the target is the source word by word through a fixed dictionary,
reversed)
or reads a user's (``--train FILE.tsv``), then measures, each in a fresh process:

* prepare: the tokenizer fit (``data.tokenizer_sample``) and the encoding into the memory-mapped prepared
  corpus (``seqmap.tasks.translation.load_translation``), wall time and peak RSS;
* train: ``seqmap train`` on the prepared corpus (a new run directory): seconds from the command to step 1,
  peak RSS over ``--steps`` steps, and the training tokens/s the trainer logs at the last step.

``--baseline-tree DIR`` runs ``seqmap train`` from another source tree (e.g. ``git worktree add /tmp/old
COMMIT``) on the same corpora (``--baseline-sizes``) for a like-for-like reference: there the first run does
everything (its "to step 1" includes reading and encoding the text). The model is a 3+3 Transformer
(d 256, 4 heads, FF 1024) with a joint 8,000-piece BPE vocabulary and 4,096-token batches.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_name  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIG = """\
model: {{family: transformer, d_model: 256, n_heads: 4, d_ff: 1024, enc_layers: 3, dec_layers: 3, dropout: 0.1}}
data: {{train: {train}, valid: {valid}, tokenizer: bpe, vocab_size: 8000, max_len: 256}}
train: {{max_tokens: 4096, lr: 0.0007, warmup: 4000, log_every: {log_every}, valid_every: 1000000, valid_bleu: false,
        max_steps: {steps}, device: cpu}}
"""


def synthetic_corpus(path: Path, pairs: int, seed: int = 0, vocab: int = 30_000) -> Path:
    """``pairs`` lines of ``source<TAB>target``; written once per size and reused."""
    if path.is_file():
        return path
    rng = np.random.default_rng(seed)
    syllables = [a + b + c for a in "bdfgklmnprstvwz" for b in "aeiou" for c in ("", "n", "r", "s")]

    def words(n: int) -> np.ndarray:
        """Distinct pseudo-words of syllables, the frequent ones short (as in a natural language, so BPE splits
        them about as finely as it splits English or German)."""
        out, seen = [], set()
        while len(out) < n:
            size = 1 + min(3, int(rng.exponential(0.35 + 2.5 * len(out) / n)))
            word = "".join(rng.choice(syllables, size))
            if word not in seen:
                seen.add(word)
                out.append(word)
        return np.array(out)

    src_words, tgt_words = words(vocab), words(vocab)
    ranks = 1.0 / np.arange(1, vocab + 1)
    probs = ranks / ranks.sum()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for start in range(0, pairs, 100_000):
            n = min(100_000, pairs - start)
            lengths = rng.integers(10, 41, n)
            ids = rng.choice(vocab, int(lengths.sum()), p=probs)
            cuts = np.cumsum(lengths)[:-1]
            lines = []
            for sentence in np.split(ids, cuts):
                lines.append(f"{' '.join(src_words[sentence])}\t{' '.join(tgt_words[sentence[::-1]])}\n")
            f.writelines(lines)
    tmp.replace(path)
    return path


def timed(command: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(seconds, peak RSS in GB, output) of a command run to its end under /usr/bin/time."""
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", *command], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return seconds, int(done.stderr.strip().splitlines()[-1]) / 1e6, done.stdout


def train_run(command: list[str], run_dir: Path, steps: int, env: dict | None = None) -> dict:
    """Start ``seqmap train``; seconds to step 1 (its first train event in metrics.jsonl), tokens/s at the last
    logged step, and the process's peak RSS (VmHWM) read just before it ends."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    metrics, first, last, peak = run_dir / "metrics.jsonl", None, None, 0.0
    while process.poll() is None:
        peak = max(peak, _hwm(process.pid))
        if metrics.is_file():
            events = [json.loads(line) for line in metrics.read_text().splitlines() if '"train"' in line]
            if events and first is None:
                first = time.perf_counter() - start
            if events and events[-1].get("step", 0) >= steps:
                last = events[-1]
                process.terminate()
                break
        time.sleep(0.05)
    process.wait()
    if last is None:
        raise SystemExit(f"{' '.join(command)} ended before step {steps}:\n{process.stderr.read()[-3000:]}")
    return {"to_step1_s": first, "peak_rss_gb": peak, "train_tok_s": last.get("tokens_per_s")}


def _hwm(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1e6
    except OSError:
        pass
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 4_500_000])
    parser.add_argument("--train", type=Path, help="a TSV corpus of your own instead of synthetic ones")
    parser.add_argument("--work", type=Path, default=Path("bench-data-scale"), help="corpora and runs go here")
    parser.add_argument("--steps", type=int, default=20, help="training steps per run (tokens/s at the last)")
    parser.add_argument("--baseline-tree", type=Path, help="another seqmap source tree to run as the reference")
    parser.add_argument("--baseline-sizes", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--json", type=Path, help="also write the rows to this file as a JSON list")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    python, rows = sys.executable, []
    valid = args.work / "valid.tsv"
    synthetic_corpus(valid, 500, seed=99)
    corpora = [(None, args.train)] if args.train else [
        (n, synthetic_corpus(args.work / f"train-{n}.tsv", n)) for n in args.sizes]
    for size, train in corpora:
        name = size or train.stem
        config = args.work / f"{name}.yaml"
        config.write_text(CONFIG.format(train=train.resolve(), valid=valid.resolve(), steps=args.steps,
                                        log_every=args.steps))
        prepared = args.work / f"prepared-{name}"
        for path in (prepared, args.work / f"prep-run-{name}", args.work / f"run-{name}"):
            subprocess.run(["rm", "-rf", str(path)], check=True)
        prepare = ("import sys; from pathlib import Path; from seqmap.config import load_config; "
                   "from seqmap.tasks.translation import load_translation; "
                   "cfg = load_config(sys.argv[1]); cfg.data.prepared_dir = sys.argv[2]; "
                   "load_translation(cfg.data, Path(sys.argv[3]), lambda _: None)")
        prep_s, prep_rss, _ = timed([python, "-c", prepare, str(config), str(prepared),
                                     str(args.work / f"prep-run-{name}")])
        run_dir = args.work / f"run-{name}"
        train = train_run([python, "-m", "seqmap", "train", str(config), "--run-dir", str(run_dir),
                           "--data.prepared_dir", str(prepared)], run_dir, args.steps)
        rows.append({"code": "seqmap (this tree)", "pairs": size, "prepare_s": prep_s, "prepare_peak_rss_gb": prep_rss,
                     **train})
        print(_row(rows[-1]), flush=True)
        if args.baseline_tree and size in args.baseline_sizes:
            run_dir = args.work / f"baseline-run-{name}"
            subprocess.run(["rm", "-rf", str(run_dir)], check=True)
            env = {**os.environ, "PYTHONPATH": str(args.baseline_tree.resolve())}
            base = train_run([python, "-m", "seqmap", "train", str(config), "--run-dir", str(run_dir)], run_dir,
                             args.steps, env=env)
            rows.append({"code": f"reference ({args.baseline_tree})", "pairs": size, "prepare_s": None,
                         "prepare_peak_rss_gb": None, **base})
            print(_row(rows[-1]), flush=True)
    print(f"\n{cpu_name()}, {os.cpu_count()} cores; {args.steps} steps per run")
    print(f"| {'code':32s} | pairs | prepare s | prepare RSS GB | seqmap train to step 1, s | peak RSS GB | "
          "train tok/s |\n|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(_row(row))
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_name(), "steps": args.steps, "rows": rows}, indent=1) + "\n")


def _row(row: dict) -> str:
    def f(value, digits=1):
        return "-" if value is None else f"{value:,.{digits}f}"

    pairs = "-" if row["pairs"] is None else f"{row['pairs']:,}"
    return (f"| {row['code']:32s} | {pairs} | {f(row['prepare_s'])} | {f(row['prepare_peak_rss_gb'], 2)} "
            f"| {f(row['to_step1_s'])} | {f(row['peak_rss_gb'], 2)} | {f(row['train_tok_s'], 0)} |")


if __name__ == "__main__":
    main()
