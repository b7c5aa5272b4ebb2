"""The Multi30k seq2seq ladder: score trained runs on test2016 beside the published figures, and chart them.

    python bench/ladder.py transformer=runs/m30k-transformer gru_attention=runs/m30k-gru-attention \\
        --data data/multi30k --json ladder.json --chart docs/images/multi30k_ladder.png

Each ``RUNG=RUN_DIR`` names a rung (``lstm``, ``gru_context``, ``gru_attention``, ``transformer``, ``convs2s``, or
the Transformer with another position scheme: ``transformer_relative``, ``transformer_relative_cp``) and a run
trained with its config (``configs/multi30k_de_en_*.yaml``). For each run the best checkpoint translates
test2016 with the run's own decode settings (``seqmap evaluate``'s code), and the table reports:

* BLEU on tokenized lowercased text: hypotheses lowercased, punctuation-normalised and tokenized with
  sacremoses as Multi30k's own ``task1-tokenize.sh`` does, scored against the official
  ``test2016.lc.norm.tok.en`` with ``tokenize=none``. This is how the published figures
  (bentrevett/pytorch-seq2seq) were computed, so the two columns compare.
* cased detokenized sacreBLEU (13a) against the raw references, with its signature, and chrF.
* training: steps, wall minutes, and the best validation BLEU (cased sacreBLEU on val, as logged).

``--chart`` draws the ladder (seqmap beside the published figure per rung) and the validation BLEU
curves over training time.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from seqmap.evaluation import evaluate_files  # noqa: E402
from seqmap.runs import load_run  # noqa: E402
from seqmap.training.runlog import read_metrics  # noqa: E402

# rung -> (label, published tokenized lowercased test2016 BLEU or None, source)
PUBLISHED = {
    "lstm": ("LSTM enc-dec, no attention", 13.8, "bentrevett/pytorch-seq2seq 1"),
    "gru_context": ("GRU, context at every step", 20.6, "bentrevett/pytorch-seq2seq 2"),
    "gru_attention": ("BiGRU + Bahdanau attention", 28.3, "bentrevett/pytorch-seq2seq 3"),
    "transformer": ("Transformer 3+3, d 256", 36.5, "bentrevett/pytorch-seq2seq 6"),
    "convs2s": ("ConvS2S 4+3, 256 channels", None, "none recorded (issue goal: 36.0)"),
    # the Transformer rung with only model.positional changed, for comparing position schemes
    "transformer_relative": ("Transformer 3+3, Shaw relative positions", None, "none recorded"),
    "transformer_relative_cp": ("Transformer 3+3, relative content-position terms", None, "none recorded"),
}


def training_summary(run_dir: Path) -> dict:
    """Steps and wall minutes of training (from train.log's last 'training stopped' line), and the valid curve."""
    steps = minutes = None
    log = run_dir / "train.log"
    if log.exists():
        for match in re.finditer(r"training stopped: .*?; (\d+) steps, ([\d.]+) min", log.read_text(encoding="utf-8")):
            steps, minutes = int(match[1]), float(match[2])
    curve = [(r["step"], r.get("train_minutes"), r.get("bleu")) for r in read_metrics(run_dir, "valid")]
    known = [(s, m) for s, m, _ in curve if m is not None]
    if known and len(known) < len(curve):  # logs older than train_minutes: minutes in proportion to steps
        rate = known[-1][1] / known[-1][0]
        curve = [(s, m, b, m is None) if m is not None else (s, s * rate, b, True) for s, m, b in curve]
    else:
        curve = [(s, m, b, False) for s, m, b in curve]
    best = max((b for _, _, b, _ in curve if b is not None), default=None)
    return {"steps": steps, "train_minutes": minutes, "best_valid_bleu": best, "valid_curve": curve}


def score_run(rung: str, run_dir: Path, data: Path, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    run = load_run(run_dir, "best")
    out = run_dir / "eval" / "test2016.hyp"
    result = evaluate_files(run, data / "test2016.de", data / "test2016.en", out=out,
                            tok_ref=data / "test2016.lc.norm.tok.en")
    label, published, source = PUBLISHED[rung]
    params = sum(p.numel() for p in run.model.parameters())
    return {"rung": rung, "label": label, "run_dir": str(run_dir), "checkpoint": run.checkpoint.name,
            "params": params, "published_bleu_lc_tok": published, "published_source": source,
            "bleu_lc_tok": result["bleu_lc_tok"], "bleu_lc_tok_signature": result["bleu_lc_tok_signature"],
            "bleu": result["bleu"], "bleu_signature": result["bleu_signature"], "chrf": result["chrf"],
            "hypotheses": str(out), **training_summary(run_dir)}


def table(rows: list[dict]) -> str:
    lines = ["| rung | params | BLEU tok+lc (published) | sacreBLEU cased | chrF | steps | train min | best val BLEU |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        minutes = "?" if r["train_minutes"] is None else f"{r['train_minutes']:.0f}"
        best = "?" if r["best_valid_bleu"] is None else f"{r['best_valid_bleu']:.2f}"
        published = "-" if r["published_bleu_lc_tok"] is None else r["published_bleu_lc_tok"]
        lines.append(f"| {r['label']} | {r['params'] / 1e6:.1f}M | **{r['bleu_lc_tok']:.2f}** "
                     f"({published}) | {r['bleu']:.2f} | {r['chrf']:.1f} | {r['steps']} | "
                     f"{minutes} | {best} |")
    if rows:
        lines += ["", f"tokenized lowercased: {rows[0]['bleu_lc_tok_signature']} (sacremoses lc+norm+tok)",
                  f"cased: {rows[0]['bleu_signature']}"]
    return "\n".join(lines)


def chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bars, curves) = plt.subplots(1, 2, figsize=(14, 4.4), gridspec_kw={"width_ratios": [1.1, 1]})
    xs = range(len(rows))
    width = 0.38
    published = [r["published_bleu_lc_tok"] for r in rows]
    ours = [r["bleu_lc_tok"] for r in rows]
    known = [(x, p) for x, p in zip(xs, published) if p is not None]  # a rung may have no published figure
    bars.bar([x - width / 2 for x, _ in known], [p for _, p in known], width, label="published (bentrevett)",
             color="#bbbbbb")
    bars.bar([x + width / 2 for x in xs], ours, width, label="seqmap", color="#1f77b4")
    for x, p in known:
        bars.text(x - width / 2, p + 0.5, f"{p:.1f}", ha="center", fontsize=8)
    for x, o in enumerate(ours):
        bars.text(x + width / 2, o + 0.5, f"{o:.1f}", ha="center", fontsize=8)
    labels = [r["label"].replace(", ", ",\n").replace(" + ", " +\n").replace("every step", "every\nstep") for r in rows]
    bars.set_xticks(list(xs), labels, fontsize=8)
    bars.set_ylabel("test2016 BLEU (tokenized, lowercased)")
    bars.set_title("Multi30k de-en: the seq2seq ladder")
    bars.legend(loc="upper left", fontsize=8)
    for r in rows:
        points = [(m, b, est) for _, m, b, est in r["valid_curve"] if m is not None and b is not None]
        if points:
            estimated = any(est for _, _, est in points)
            label = r["label"] + (" (minutes estimated from steps)" if estimated else "")
            curves.plot([m for m, _, _ in points], [b for _, b, _ in points], marker=".", label=label,
                        linestyle="--" if estimated else "-")
    curves.set_xlabel("training minutes (as logged by each run)")
    curves.set_ylabel("validation BLEU (sacreBLEU, cased)")
    curves.set_title("validation curves")
    curves.grid(alpha=0.3)
    curves.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # outside: no curve hidden
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="RUNG=RUN_DIR", help=f"rungs: {', '.join(PUBLISHED)}")
    p.add_argument("--data", type=Path, default=Path("data/multi30k"),
                   help="prepared Multi30k (seqmap data prepare multi30k): test2016.{de,en,lc.norm.tok.en}")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, help="write the rows to this file as JSON")
    p.add_argument("--chart", type=Path, help="write the ladder and validation curves as an image")
    args = p.parse_args(argv)
    rows = []
    for spec in args.runs:
        rung, _, run_dir = spec.partition("=")
        if rung not in PUBLISHED or not run_dir:
            p.error(f"{spec!r}: expected RUNG=RUN_DIR with RUNG one of {', '.join(PUBLISHED)}")
        rows.append(score_run(rung, Path(run_dir), args.data, args.threads))
    rows.sort(key=lambda r: list(PUBLISHED).index(r["rung"]))
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.chart:
        chart(rows, args.chart)
        print(f"chart written to {args.chart}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
