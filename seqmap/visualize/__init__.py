"""Plots: attention heatmaps, training curves, positional encodings.

    plot_attention(weights, src_tokens, tgt_tokens, "attn.png")    # (T, S) or (L, H, T, S)
    plot_run_attention(load_run(run_dir), "ein Haus", "attn.svg")   # translate, force-decode, plot
    plot_curves(run_dir, "curves.png")                              # from RUN_DIR/metrics.jsonl
    plot_positional(64, 100, "positions.png")                       # sinusoidal table and RoPE angles

Every function builds a ``matplotlib.figure.Figure`` directly (no pyplot): no GUI
backend is touched, no global figure is left open, and the figure is returned for
inspection after it is written. The format comes from the file suffix (``.png`` or
``.svg``); a PNG is exactly ``figure size x dpi`` pixels (no tight bounding box),
an SVG keeps its text as text (searchable, editable).

This package needs matplotlib; the rest of seqmap does not import it.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

FORMATS = (".png", ".svg")
_GRID = 0.25  # figure sizes are whole quarter inches and dpis multiples of 4: size x dpi is a whole pixel count


def figure_inches(width: float, height: float) -> tuple[float, float]:
    """Round a figure size up to whole quarter inches (with a dpi divisible by 4: exact pixel sizes)."""
    return math.ceil(width / _GRID) * _GRID, math.ceil(height / _GRID) * _GRID


def check_format(path: str | Path) -> Path:
    """``path`` as a Path, after checking its suffix names a format we write."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"cannot write {path}: the plot format comes from the file suffix; "
                         f"use one of {', '.join(FORMATS)}")
    return path


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (.png or .svg by suffix) at the figure's own size and dpi."""
    path = check_format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "seqmap"}), warnings.catch_warnings():
        # missing glyphs were reported once, by name, when the fonts were chosen (attention.label_fonts)
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        fig.savefig(path, format=path.suffix.lower()[1:], dpi=fig.dpi)
    return path


# the public functions, imported after the helpers above that their modules use
from seqmap.visualize.attention import plot_attention, plot_run_attention  # noqa: E402
from seqmap.visualize.curves import plot_curves  # noqa: E402
from seqmap.visualize.positional import plot_positional  # noqa: E402

__all__ = ["FORMATS", "figure_inches", "plot_attention", "plot_curves", "plot_positional", "plot_run_attention",
           "save_figure"]
