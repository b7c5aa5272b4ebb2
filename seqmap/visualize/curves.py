"""Training curves from a run's ``metrics.jsonl``: loss, learning rate, perplexity and validation scores by step.

    plot_curves("runs/de_en", "curves.png")         # a run directory (or the metrics.jsonl itself)
    plot_curves(read_metrics(run_dir), "curves.svg")  # rows already read

One figure, one panel per quantity, sharing the step axis; a panel appears only
when some row has its values:

    loss                     train loss (as optimised: label smoothing included) and valid loss (NLL)
    learning rate            learning rate of the train rows
    perplexity               train and valid perplexity (log scale)
    BLEU / chrF              valid scores, when validation decoded (translation)
    WER (%)                  valid word (digit) error rate (speech)
    string accuracy (%)      valid share of transcripts equal to their reference (speech)
    accuracy / macro-F1 (%)  valid accuracy and macro-F1 (text, image and graph classifiers)

Test rows show as stars at the step they were taken. A resumed run logs some
steps twice; the last row of a (kind, step) wins. Missing values (a non-finite
loss is logged as null) leave gaps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from seqmap.visualize.figures import check_format, figure_inches, save_figure

PANEL_HEIGHT = 2.25  # inches
WIDTH = 8.0
DPI = 120
METRICS_FILE = "metrics.jsonl"

# panel title -> (kind, key, legend label) series drawn as lines; y log-scaled panels
PANELS = {
    "loss": [("train", "loss", "train loss"), ("valid", "loss", "valid loss")],
    "learning rate": [("train", "lr", "learning rate")],
    "perplexity": [("train", "ppl", "train ppl"), ("valid", "ppl", "valid ppl")],
    "BLEU / chrF": [("valid", "bleu", "valid BLEU"), ("valid", "chrf", "valid chrF")],
    "WER (%)": [("valid", "wer", "valid WER")],
    "string accuracy (%)": [("valid", "string_accuracy", "valid string accuracy")],
    "accuracy / macro-F1 (%)": [("valid", "accuracy", "valid accuracy"), ("valid", "macro_f1", "valid macro-F1")],
}
LOG_SCALE = {"perplexity"}
TEST_NAMES = {"bleu": "BLEU", "chrf": "chrF", "wer": "WER", "string_accuracy": "string accuracy",
              "macro_f1": "macro-F1"}  # key -> name of its test star (others: the key)


def read_rows(source: str | Path) -> list[dict]:
    """The rows of a metrics file (``source`` is the file or its run directory).

    A malformed last line (a run killed while writing) is skipped; any other
    malformed line is an error naming the file and line.
    """
    source = Path(source)
    path = source if source.suffix == ".jsonl" or source.is_file() else source / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: plotting curves needs the {METRICS_FILE} that "
                                "`seqmap train` writes into its run directory; check the path")
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if number == len(lines):
                break  # cut short by a killed run
            raise ValueError(f"{path}:{number}: not a JSON object ({err})") from err
    if not rows:
        raise ValueError(f"{path} holds no metrics rows: train for at least train.log_every steps first")
    return rows


def series(rows: Sequence[dict], kind: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of ``key`` in the rows of ``kind``, by step, the last row of a repeated step kept.

    Missing or null values become NaN (a gap in the line); all-missing gives empty arrays.
    """
    by_step = {}
    for row in rows:
        if row.get("kind") == kind and "step" in row and key in row:
            value = row[key]
            by_step[int(row["step"])] = math.nan if value is None else float(value)
    steps = sorted(by_step)
    values = np.array([by_step[s] for s in steps], dtype=float)
    if not np.isfinite(values).any():
        return np.array([]), np.array([])
    return np.array(steps, dtype=float), values


def curves_figure_size(n_panels: int) -> tuple[float, float, int]:
    """(width, height) in inches and dpi of a curves figure with ``n_panels`` panels."""
    width, height = figure_inches(WIDTH, 0.6 + PANEL_HEIGHT * n_panels)
    return width, height, DPI


def plot_curves(source: str | Path | Sequence[dict], path: str | Path, *, title: str | None = None) -> Figure:
    """Plot training curves and write them to ``path`` (.png or .svg).

    Args:
        source: a run directory, its ``metrics.jsonl``, or the rows themselves
            (dicts with ``kind``, ``step`` and values, as ``read_metrics`` returns).
        path: output file; the suffix picks the format.
        title: figure title (default: the run directory's name, when known).

    Returns:
        The written Figure, one axes per panel (top to bottom as in ``PANELS``).
    """
    path = check_format(path)
    if isinstance(source, (str, Path)):
        rows, name = read_rows(source), str(source)
    else:
        rows, name = list(source), "the given rows"
        if not rows:
            raise ValueError("no metrics rows to plot")
    panels = {}
    for panel, wanted in PANELS.items():
        lines = [(label, *series(rows, kind, key)) for kind, key, label in wanted]
        lines = [line for line in lines if len(line[1])]
        if lines:
            panels[panel] = lines
    if not panels:
        keys = list(dict.fromkeys(key for wanted in PANELS.values() for _, key, _ in wanted))
        raise ValueError(f"{name}: no train or valid rows with {', '.join(keys[:-1])} or {keys[-1]} to plot")
    width, height, dpi = curves_figure_size(len(panels))
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (panel, lines) in zip(axes, panels.items()):
        for label, steps, values in lines:
            marker = "o" if label.startswith("valid") else None
            ax.plot(steps, values, label=label, marker=marker, markersize=3, linewidth=1.2)
        _test_points(ax, rows, PANELS[panel])
        ax.set_ylabel(panel)
        if panel in LOG_SCALE:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    axes[-1].set_xlabel("step")
    default_title = Path(source).name if isinstance(source, (str, Path)) else None
    if title or default_title:
        fig.suptitle(title or default_title)
    save_figure(fig, path)
    return fig


def _test_points(ax, rows: Sequence[dict], wanted: list[tuple[str, str, str]]) -> None:
    """Stars for the test rows' values of this panel's keys."""
    for key in dict.fromkeys(key for _, key, _ in wanted):
        steps, values = series(rows, "test", key)
        if len(steps):
            name = "test " + TEST_NAMES.get(key, key)
            ax.plot(steps, values, linestyle="none", marker="*", markersize=9, label=name)
