"""The confusion matrix of a classifier: gold classes down, predicted classes across, each row as shares."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from seqmap.visualize.figures import check_format, figure_inches, save_figure


def plot_confusion(matrix: Sequence[Sequence[int]], names: Sequence[str], path: str | Path, *,
                   title: str | None = None) -> Figure:
    """Plot ``matrix[g][p]`` (examples of gold class g predicted as p) and write it to ``path`` (.png or .svg).

    Colours are each row's shares (recall on the diagonal), so rare classes read as clearly as common
    ones; every cell is labelled with its count.
    """
    path = check_format(path)
    counts = np.asarray(matrix, dtype=np.int64)
    n = len(names)
    if counts.shape != (n, n):
        raise ValueError(f"a confusion matrix for {n} classes must be {n} x {n}, got {counts.shape}")
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    side = 1.5 + 0.45 * n
    fig = Figure(figsize=figure_inches(side + 1.0, side), dpi=100, layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(shares, vmin=0.0, vmax=1.0, cmap="Blues")
    for g in range(n):
        for p in range(n):
            ax.text(p, g, str(counts[g, p]), ha="center", va="center", fontsize=8,
                    color="white" if shares[g, p] > 0.5 else "black")
    ax.set_xticks(range(n), names, rotation=60, ha="right")
    ax.set_yticks(range(n), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    fig.colorbar(image, ax=ax, label="share of the gold class")
    if title:
        fig.suptitle(title)
    save_figure(fig, path)
    return fig
