"""Writing figures: sizes in whole quarter inches, the format from the file suffix, no pyplot.

The helpers every plot of ``seqmap.visualize`` uses; see the package docstring for what they promise.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from seqmap.paths import file_above

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
    if path.is_dir():
        raise ValueError(f"cannot write {path}: it is a directory; give a file in it (e.g. {path / 'plot.png'})")
    above = file_above(path)
    if above is not None:
        raise ValueError(f"cannot write {path}: {above} is a file, not a directory; give a path in a directory")
    return path


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (.png or .svg by suffix) at the figure's own size and dpi."""
    path = check_format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "seqmap"}), warnings.catch_warnings():
        # missing glyphs were reported once, by name, when the fonts were chosen (fonts.label_fonts)
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        fig.savefig(path, format=path.suffix.lower()[1:], dpi=fig.dpi)
    return path
