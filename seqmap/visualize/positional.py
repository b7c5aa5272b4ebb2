"""Positional encodings as pictures: the sinusoidal table and RoPE's rotations.

    plot_positional(64, 100, "positions.png")

Three panels, computed by the modules the models use (``seqmap.nn.positional``):

1. the sinusoidal table PE (positions x dimensions): fast sines in the first
   dimensions, slow ones in the last;
2. RoPE's rotation angle p * theta_i (wrapped to [0, 2 pi)) against position p, for
   a few dimension pairs i from the fastest (theta_0 = 1 rad per position) to the slowest;
3. the same rotations on circles: where the 2-D pair (1, 0) of each chosen pair lands at
   the first positions (the fastest pair's points are numbered), one circle per pair.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from seqmap.nn.positional import RotaryPositional, sinusoidal_table
from seqmap.visualize.figures import check_format, figure_inches, save_figure

DPI = 120
CIRCLE_POSITIONS = 12  # positions shown on the circles


def positional_figure_size() -> tuple[float, float, int]:
    """(width, height) in inches and dpi of the positional figure."""
    width, height = figure_inches(14.0, 4.75)
    return width, height, DPI


def rope_angles(head_dim: int, length: int, base: float = 10000.0) -> np.ndarray:
    """(length, head_dim / 2) rotation angles in [0, 2 pi), read back from ``RotaryPositional``'s cos/sin tables."""
    rope = RotaryPositional(head_dim, max_len=length, base=base)
    half = head_dim // 2
    angles = torch.atan2(rope.sin[:length, :half].double(), rope.cos[:length, :half].double())
    return np.mod(angles.numpy(), 2 * np.pi)


def rope_pairs(head_dim: int, pairs: int) -> list[int]:
    """``pairs`` dimension pairs spread from the fastest (0) to the slowest (head_dim / 2 - 1)."""
    return sorted({int(round(i)) for i in np.linspace(0, head_dim // 2 - 1, max(1, pairs))})


def plot_positional(d_model: int, length: int, path: str | Path, *, head_dim: int | None = None,
                    base: float = 10000.0, pairs: int = 4) -> Figure:
    """Plot the sinusoidal encoding and RoPE rotations and write them to ``path`` (.png or .svg).

    Args:
        d_model: model width D (columns of the sinusoidal table).
        length: number of positions shown.
        path: output file; the suffix picks the format.
        head_dim: width RoPE rotates, d_model / n_heads in a model (default: d_model); even.
        base: the frequency base of both schemes (10000 in the papers; ``model.rope_base``).
        pairs: how many RoPE dimension pairs to draw.

    Returns:
        The written Figure (panels: table, its colorbar, angles, circles).
    """
    from_d_model = head_dim is None
    head_dim = d_model if head_dim is None else head_dim
    for name, flag, value in (("d_model", "--d-model", d_model), ("length", "--length", length),
                              ("head_dim", "--head-dim", head_dim), ("pairs", "--pairs", pairs)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} ({flag}) must be a positive integer, got {value!r}")
    if head_dim % 2:
        raise ValueError(f"RoPE rotates pairs of dimensions: head_dim (--head-dim) must be even, got {head_dim}"
                         + (" from d_model (--d-model, its default); give an even --d-model or --head-dim"
                            if from_d_model else ""))
    if base <= 1:
        raise ValueError(f"base (--base) must be > 1, got {base}")
    path = check_format(path)
    width, height, dpi = positional_figure_size()
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    grid = fig.add_gridspec(1, 3, width_ratios=[1.3, 1.3, 1])
    table_ax, angle_ax = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
    circle_ax = fig.add_subplot(grid[2], projection="polar")

    table = sinusoidal_table(length, d_model, base).numpy()  # (length, D)
    image = table_ax.imshow(table, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    fig.colorbar(image, ax=table_ax, label="PE value")
    table_ax.set(xlabel="dimension", ylabel="position", title=f"sinusoidal encoding (D = {d_model})")

    angles = rope_angles(head_dim, length, base)  # (length, Dh/2)
    chosen = rope_pairs(head_dim, pairs)
    positions = np.arange(length)
    shown = min(length, CIRCLE_POSITIONS)
    for k, i in enumerate(chosen):
        theta = base ** (-2 * i / head_dim)
        label = f"pair {i}: {theta:.3g} rad/pos"
        x, y = _break_wraps(positions, angles[:, i])
        line, = angle_ax.plot(x, y, linewidth=1.2, label=label)
        radius = 1.0 - 0.18 * k
        circle_ax.plot(angles[:shown, i], np.full(shown, radius), marker="o", markersize=3, linewidth=0.8,
                       color=line.get_color())
        if k == 0:
            for p in range(shown):
                circle_ax.annotate(str(p), (angles[p, i], radius), fontsize=6, xytext=(3, 3),
                                   textcoords="offset points")
    angle_ax.set(xlabel="position", ylabel="rotation angle (rad, mod 2π)", ylim=(0, 2 * np.pi),
                 title=f"RoPE angle p·θ_i (head_dim = {head_dim})")
    angle_ax.legend(fontsize=7, loc="upper right")
    circle_ax.set_rlim(0, 1.1)
    circle_ax.set_yticklabels([])
    circle_ax.set_title(f"RoPE pairs rotated, positions 0-{shown - 1}", fontsize=10)
    save_figure(fig, path)
    return fig


def _break_wraps(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Insert NaN where a wrapped angle jumps from 2 pi back to 0, so the line does not draw the jump."""
    jumps = np.flatnonzero(np.diff(y) < 0) + 1
    return np.insert(x.astype(float), jumps, np.nan), np.insert(y, jumps, np.nan)
