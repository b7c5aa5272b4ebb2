"""Labels in Chinese are drawn with an installed font that has the characters: a usual CJK family, any other
installed family, or one installed since matplotlib cached its font list; with none, one warning names the
characters and the package to install. Never the placeholder font whose every glyph is a box."""

import copy
import warnings

import pytest
from matplotlib import font_manager

from seqmap.visualize import fonts

FAMILY = "Seqmap Test Han"


def _han_font(path) -> str:
    """A TrueType font with two glyphs, 你 and 好 (squares), named ``FAMILY``."""
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    names = [".notdef", "ni", "hao"]
    builder = FontBuilder(1000, isTTF=True)
    builder.setupGlyphOrder(names)
    builder.setupCharacterMap({ord("你"): "ni", ord("好"): "hao"})
    glyphs = {}
    for name in names:
        pen = TTGlyphPen(None)
        pen.moveTo((100, 0)), pen.lineTo((100, 800)), pen.lineTo((900, 800)), pen.lineTo((900, 0))
        pen.closePath()
        glyphs[name] = pen.glyph()
    builder.setupGlyf(glyphs)
    builder.setupHorizontalMetrics({name: (1000, 100) for name in names})
    builder.setupHorizontalHeader(ascent=800, descent=-200)
    builder.setupNameTable({"familyName": FAMILY, "styleName": "Regular"})
    builder.setupOS2()
    builder.setupPost()
    builder.save(str(path))
    return str(path)


@pytest.fixture
def manager(monkeypatch):
    """A copy of matplotlib's font list, so fonts added here stay here; no system font folders to read."""
    monkeypatch.setattr(font_manager, "fontManager", copy.deepcopy(font_manager.fontManager))
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda *a, **k: [])
    monkeypatch.setattr(fonts, "_warned_missing", False)
    return font_manager.fontManager


def _without_cjk(manager) -> None:
    """As on a machine without CJK fonts (the test machine may have some)."""
    manager.ttflist = [f for f in manager.ttflist if not fonts._charmap(f.fname) & {ord("你"), ord("好")}
                       or f.name.startswith(fonts.PLACEHOLDER_FONTS)]


def test_a_font_installed_after_matplotlib_listed_the_fonts_is_found(manager, monkeypatch, tmp_path):
    _without_cjk(manager)
    path = _han_font(tmp_path / "han.ttf")
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda *a, **k: [path])  # on disk, not in the list
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fonts.label_fonts(["a", "你好"]) == [fonts.DEFAULT_FONT, FAMILY]
    assert FAMILY in {f.name for f in manager.ttflist}  # drawing with it finds it too


def test_any_installed_font_with_the_characters_serves(manager, tmp_path):
    _without_cjk(manager)
    manager.addfont(_han_font(tmp_path / "han.ttf"))  # not one of the usual CJK families
    assert FAMILY not in fonts.CJK_FONTS
    assert fonts.label_fonts(["你"]) == [fonts.DEFAULT_FONT, FAMILY]
    assert fonts.label_fonts(["abc é"]) == [fonts.DEFAULT_FONT]  # the default has these: nothing added


def test_without_a_font_one_warning_names_the_package_never_the_placeholder_font(manager):
    _without_cjk(manager)
    assert any(f.name.startswith("Last Resort") for f in manager.ttflist)  # matplotlib's: a box for every glyph
    with pytest.warns(fonts.MissingGlyphsWarning, match=r"no installed font has the characters '你好', so they are "
                      r"drawn as boxes; install a CJK font \(Debian/Ubuntu: sudo apt install fonts-noto-cjk\)"):
        assert fonts.label_fonts(["你好"]) == [fonts.DEFAULT_FONT]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fonts.label_fonts(["你好"])  # once per process
