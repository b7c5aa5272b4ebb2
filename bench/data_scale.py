"""Data at scale: preparing a large corpus, and training on it with flat memory.

    python bench/data_scale.py                                   # 100k, 1M and 4.5M synthetic pairs
    python bench/data_scale.py --sizes 100000 --steps 10         # a quick look
    python bench/data_scale.py --task lm --sizes 1000000 --epoch # a language model over one whole epoch
    python bench/data_scale.py --task classification             # a text classifier's TSV rows
    python bench/data_scale.py --baseline-tree /tmp/old --baseline-sizes 100000 1000000
    python bench/data_scale.py --json out.json                   # also write the rows as JSON

Per corpus size it writes a synthetic parallel corpus (Zipf-distributed pseudo-words over a 30,000-word
vocabulary per side, 10-40 words a sentence; the target is the source word by word through a fixed dictionary,
reversed)
or reads a user's (``--train FILE.tsv``), then measures, each in a fresh process:

* prepare: the tokenizer fit (``data.tokenizer_sample``) and the encoding into the memory-mapped prepared
  corpus (the task's ``load``, as ``seqmap train`` calls it), wall time and peak RSS;
* train: ``seqmap train`` on the prepared corpus (a new run directory): seconds from the command to step 1,
  peak RSS over ``--steps`` steps (with ``--epoch``: over one whole epoch, and the RSS at step 1 and at the last
  logged step beside it, the peak by the last logged step (the training steps' own, before the closing
  validation and checkpoint), and the RSS and the peak so far at every logged step in the JSON),
  and the training tokens/s the trainer logs at the last step.

``--task lm`` trains a decoder-only LM (3 layers, context 256) on the corpus's source side as one text file (a
line per sentence, read as one token stream); ``--task classification`` a 3-layer classifier on TSV rows whose
text is the source side and whose label (10 classes) is taken from the sentence's first word.

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
LM_CONFIG = """\
model: {{family: lm, d_model: 256, n_heads: 4, d_ff: 1024, dec_layers: 3, dropout: 0.1}}
data: {{task: lm, train: {train}, valid: {valid}, tokenizer: bpe, vocab_size: 8000, context: 256}}
train: {{batch_size: 16, lr: 0.0007, warmup: 4000, log_every: {log_every}, valid_every: 1000000,
        max_steps: {steps}, device: cpu}}
"""
CLASSIFIER_CONFIG = """\
model: {{family: classifier, d_model: 256, n_heads: 4, d_ff: 1024, enc_layers: 3, dropout: 0.1}}
data: {{task: classification, train: {train}, valid: {valid}, tokenizer: bpe, vocab_size: 8000, max_len: 256}}
train: {{max_tokens: 4096, lr: 0.0007, warmup: 4000, log_every: {log_every}, valid_every: 1000000,
        max_steps: {steps}, device: cpu}}
"""
CONFIGS = {"translation": CONFIG, "lm": LM_CONFIG, "classification": CLASSIFIER_CONFIG}


def as_task(tsv: Path, task: str) -> Path:
    """The corpus as ``task`` reads it: the TSV itself (translation), its source side as text (lm), or rows of
    source text and a label from its first word (classification); written once and reused."""
    if task == "translation":
        return tsv
    path = tsv.with_name(f"{tsv.stem}-{task}{'.txt' if task == 'lm' else '.tsv'}")
    if not path.is_file():
        tmp = path.with_suffix(".tmp")
        with open(tsv, encoding="utf-8") as src, open(tmp, "w", encoding="utf-8") as out:
            for line in src:
                text = line.split("\t", 1)[0]
                out.write(f"{text}\n" if task == "lm" else f"{text}\tc{len(text.split(' ', 1)[0]) % 10}\n")
        tmp.replace(path)
    return path


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


def train_run(command: list[str], run_dir: Path, steps: int, env: dict | None = None, epoch: bool = False) -> dict:
    """Start ``seqmap train``; seconds to step 1 (its first train event in metrics.jsonl), tokens/s at the last
    logged step, and the process's peak RSS (VmHWM) read just before it ends. With ``epoch`` the run ends by
    itself after one epoch (``train.max_epochs: 1``), and the RSS at step 1 is read too."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    metrics, first, last, peak, at_first = run_dir / "metrics.jsonl", None, None, 0.0, None
    rss_by_step: list[tuple[int, float, float]] = []  # (step, RSS GB, peak RSS so far GB) as each step is logged
    while process.poll() is None:
        peak = max(peak, _status(process.pid, "VmHWM"))
        if metrics.is_file():
            events = [json.loads(line) for line in metrics.read_text().splitlines() if '"train"' in line]
            if events and first is None:
                first, at_first = time.perf_counter() - start, _status(process.pid, "VmRSS")
            if events and (not rss_by_step or events[-1].get("step") != rss_by_step[-1][0]):
                rss_by_step.append((events[-1].get("step"), _status(process.pid, "VmRSS"),
                                    _status(process.pid, "VmHWM")))
            if events:
                last = events[-1]
            if not epoch and events and last.get("step", 0) >= steps:
                process.terminate()
                break
        time.sleep(0.05)
    process.wait()
    if epoch and process.returncode == 0:
        last = [json.loads(line) for line in metrics.read_text().splitlines() if '"train"' in line][-1]
    elif last is None or last.get("step", 0) < steps:
        raise SystemExit(f"{' '.join(command)} ended before step {steps}:\n{process.stderr.read()[-3000:]}")
    out = {"to_step1_s": first, "peak_rss_gb": peak, "train_tok_s": last.get("tokens_per_s")}
    if epoch:  # the RSS as the epoch went, beside the peak (which includes the closing validation and checkpoint)
        out.update(rss_step1_gb=at_first, steps=last.get("step"), rss_by_step=rss_by_step,
                   rss_last_step_gb=next((rss for _, rss, _ in reversed(rss_by_step) if rss > 0), None),
                   peak_rss_steps_gb=max((hwm for _, _, hwm in rss_by_step), default=None))
    return out


def _status(pid: int, field: str) -> float:
    """A memory field of /proc/PID/status (VmHWM: peak RSS, VmRSS: RSS now) in GB; 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
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
    parser.add_argument("--task", choices=sorted(CONFIGS), default="translation", help="what the corpus trains")
    parser.add_argument("--epoch", action="store_true",
                        help="train one whole epoch (not --steps) and report the RSS at step 1 and the peak")
    parser.add_argument("--json", type=Path, help="also write the rows to this file as a JSON list")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    python, rows = sys.executable, []
    valid = args.work / "valid.tsv"
    valid = as_task(synthetic_corpus(valid, 500, seed=99), args.task)
    corpora = [(None, args.train)] if args.train else [
        (n, as_task(synthetic_corpus(args.work / f"train-{n}.tsv", n), args.task)) for n in args.sizes]
    for size, train in corpora:
        name = f"{args.task}-{size or train.stem}"
        config = args.work / f"{name}.yaml"
        config.write_text(CONFIGS[args.task].format(train=train.resolve(), valid=valid.resolve(),
                                                    steps=0 if args.epoch else args.steps,
                                                    log_every=10 if args.epoch else args.steps))
        if args.epoch:
            config.write_text(config.read_text().replace("device: cpu}", "max_epochs: 1, device: cpu}"))
        prepared = args.work / f"prepared-{name}"
        for path in (prepared, args.work / f"prep-run-{name}", args.work / f"run-{name}"):
            subprocess.run(["rm", "-rf", str(path)], check=True)
        prepare = ("import sys; from pathlib import Path; from seqmap.config import load_config; "
                   "import seqmap.tasks; "
                   "cfg = load_config(sys.argv[1]); cfg.data.prepared_dir = sys.argv[2]; "
                   "seqmap.tasks.get(cfg.data.task).load(cfg.data, Path(sys.argv[3]), lambda _: None)")
        prep_s, prep_rss, _ = timed([python, "-c", prepare, str(config), str(prepared),
                                     str(args.work / f"prep-run-{name}")])
        run_dir = args.work / f"run-{name}"
        train = train_run([python, "-m", "seqmap", "train", str(config), "--run-dir", str(run_dir),
                           "--data.prepared_dir", str(prepared)], run_dir, args.steps, epoch=args.epoch)
        rows.append({"code": "seqmap (this tree)", "task": args.task, "pairs": size, "prepare_s": prep_s,
                     "prepare_peak_rss_gb": prep_rss,
                     **train})
        print(_row(rows[-1]), flush=True)
        if args.baseline_tree and size in args.baseline_sizes:
            run_dir = args.work / f"baseline-run-{name}"
            subprocess.run(["rm", "-rf", str(run_dir)], check=True)
            env = {**os.environ, "PYTHONPATH": str(args.baseline_tree.resolve())}
            base = train_run([python, "-m", "seqmap", "train", str(config), "--run-dir", str(run_dir)], run_dir,
                             args.steps, env=env, epoch=args.epoch)
            rows.append({"code": f"reference ({args.baseline_tree})", "task": args.task, "pairs": size,
                         "prepare_s": None, "prepare_peak_rss_gb": None, **base})
            print(_row(rows[-1]), flush=True)
    print(f"\n{cpu_name()}, {os.cpu_count()} cores; task {args.task}; "
          f"{'one epoch' if args.epoch else f'{args.steps} steps'} per run")
    print(f"| {'code':32s} | {'lines' if args.task == 'lm' else 'rows'} | prepare s | prepare RSS GB | seqmap train "
          "to step 1, s | peak RSS GB | train tok/s | steps | RSS at step 1, GB | RSS at the last step, GB "
          "| peak RSS by the last step, GB |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(_row(row))
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_name(), "task": args.task, "epoch": args.epoch,
                                         "steps": None if args.epoch else args.steps, "rows": rows}, indent=1) + "\n")


def _row(row: dict) -> str:
    def f(value, digits=1):
        return "-" if value is None else f"{value:,.{digits}f}"

    pairs = "-" if row["pairs"] is None else f"{row['pairs']:,}"
    return (f"| {row['code']:32s} | {pairs} | {f(row['prepare_s'])} | {f(row['prepare_peak_rss_gb'], 2)} "
            f"| {f(row['to_step1_s'])} | {f(row['peak_rss_gb'], 2)} | {f(row['train_tok_s'], 0)} "
            f"| {f(row.get('steps'), 0)} | {f(row.get('rss_step1_gb'), 2)} | {f(row.get('rss_last_step_gb'), 2)} "
            f"| {f(row.get('peak_rss_steps_gb'), 2)} |")


if __name__ == "__main__":
    main()
