"""Fonts for token labels: matplotlib's default, plus an installed font for the characters it lacks.

DejaVu Sans has no Chinese, Japanese or Korean characters. ``label_fonts`` adds, as a fallback list, the
installed fonts that have them: the usual CJK families first (Noto Sans CJK, Source Han Sans, WenQuanYi,
Droid Sans Fallback, ...), then any other installed font that covers them. matplotlib lists the system's
fonts once and caches the list, so a font installed since is not in it: the system's font folders are
read again before giving up. When no font has the characters, one ``MissingGlyphsWarning`` names them
and the package to install (``seqmap plot`` prints it as one line); they are then drawn as boxes.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence

from matplotlib import font_manager
from matplotlib.ft2font import FT2Font

DEFAULT_FONT = "DejaVu Sans"  # matplotlib's own font, always installed
CJK_FONTS = (  # tried first, in order, for characters DEFAULT_FONT lacks
    "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK TC", "Noto Sans CJK KR", "Noto Sans SC",
    "Source Han Sans SC", "Source Han Sans", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback",
    "AR PL UMing CN", "Microsoft YaHei", "SimHei", "PingFang SC", "Hiragino Sans GB", "Arial Unicode MS",
)
INSTALL_HINT = "Debian/Ubuntu: sudo apt install fonts-noto-cjk"
PLACEHOLDER_FONTS = ("Last Resort",)  # fonts whose every glyph is a box naming its block: no help for a label


class MissingGlyphsWarning(UserWarning):
    """No installed font has some characters of the labels: they are drawn as boxes."""


@functools.cache
def _charmap(path: str) -> frozenset[int]:
    """Code points of the font file at ``path`` (its first face; none if FreeType cannot read it)."""
    try:
        return frozenset(FT2Font(path).get_charmap())
    except (OSError, RuntimeError, ValueError):
        return frozenset()


def _families() -> dict[str, str]:
    """Families to try for characters the default font lacks, each with one of its files: ``CJK_FONTS`` in order,
    then every other installed family (read from matplotlib's list, so no lookup warns about a weight)."""
    files: dict[str, str] = {}
    for entry in font_manager.fontManager.ttflist:
        if not entry.name.startswith(PLACEHOLDER_FONTS):
            files.setdefault(entry.name, entry.fname)
    ordered = [*(f for f in CJK_FONTS if f in files), *sorted(set(files) - {DEFAULT_FONT, *CJK_FONTS})]
    return {family: files[family] for family in ordered}


def _default_charmap() -> frozenset[int]:
    path = font_manager.fontManager.findfont(font_manager.FontProperties(family=DEFAULT_FONT))
    return _charmap(path)


def _add_new_system_fonts() -> bool:
    """Give matplotlib the font files installed since it cached its list of the system's fonts; any added?"""
    known = {f.fname for f in font_manager.fontManager.ttflist}
    added = False
    for path in font_manager.findSystemFonts():
        if path not in known:
            try:
                font_manager.fontManager.addfont(path)
                added = True
            except (OSError, RuntimeError, ValueError):  # a file FreeType cannot read: not a font to use
                continue
    return added


_warned_missing = False  # one warning per process about characters no font has


def label_fonts(texts: Sequence[str]) -> list[str]:
    """Font families for ``texts``: the default, plus installed fonts for characters it lacks (a fallback list)."""
    global _warned_missing
    missing = {ord(c) for text in texts for c in text if not c.isascii()} - _default_charmap()
    fonts = [DEFAULT_FONT]
    if missing:
        missing = _cover(missing, fonts)
    if missing and _add_new_system_fonts():
        missing = _cover(missing, fonts)
    if missing and not _warned_missing:
        _warned_missing = True
        shown = "".join(chr(c) for c in sorted(missing)[:12])
        warnings.warn(f"no installed font has the characters {shown!r}{'...' if len(missing) > 12 else ''}, so "
                      f"they are drawn as boxes; install a CJK font ({INSTALL_HINT}) and plot again",
                      MissingGlyphsWarning, stacklevel=3)
    return fonts


def _cover(missing: set[int], fonts: list[str]) -> set[int]:
    """Append to ``fonts`` the families that have some of ``missing``; the code points still missing."""
    for family, path in _families().items():
        if not missing:
            break
        covered = _charmap(path)
        if family not in fonts and missing & covered:
            fonts.append(family)
            missing = missing - covered
    return missing
