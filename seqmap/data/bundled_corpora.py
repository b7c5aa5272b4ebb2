"""The corpora that ship inside the package (``seqmap/data/bundled/``), read with no download at all.

* ``tatoeba-en-zh``: 23,610 English-Chinese sentence pairs (Tatoeba via manythings.org, CC-BY 2.0 FR),
  read with :func:`tatoeba_en_zh_splits`;
* ``tinyshakespeare``: 1,115,394 characters (public domain), read with :func:`tinyshakespeare_splits`.

Both are split deterministically: Tatoeba by the SHA-1 of each English sentence
(:func:`split_by_key`, so all translations of a sentence land in one split), tiny Shakespeare by
character position (:func:`split_text`, as nanoGPT).
"""

from __future__ import annotations

import gzip
import hashlib
import unicodedata
from collections import Counter
from importlib import resources
from typing import NamedTuple

from seqmap.data.dataset_files import GZIP_MAGIC, DatasetError

TATOEBA_VALID_SIZE = 500  # pairs, at least (whole English-sentence groups are kept together)
TATOEBA_TEST_SIZE = 1000  # pairs, at least
TINYSHAKESPEARE_TRAIN_FRACTION = 0.9


class Splits(NamedTuple):
    """Train, validation and test lists of one corpus."""

    train: list
    valid: list
    test: list


class TextSplits(NamedTuple):
    """Train and validation parts of one text."""

    train: str
    valid: str


def bundled_bytes(filename: str) -> bytes:
    """Content of a file shipped in ``seqmap/data/bundled/`` (gunzipped when it is gzip)."""
    raw = resources.files("seqmap.data").joinpath("bundled").joinpath(filename).read_bytes()
    return gzip.decompress(raw) if raw[:2] == GZIP_MAGIC else raw


def parse_tatoeba(text: str) -> list[tuple[str, str, str]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line:
            fields = line.split("\t")
            if len(fields) != 3:
                raise DatasetError(f"Tatoeba line {number} has {len(fields)} tab-separated fields, expected 3")
            rows.append((fields[0], fields[1], fields[2]))
    return rows


def tatoeba_en_zh_rows() -> list[tuple[str, str, str]]:
    """All 23,610 bundled Tatoeba rows as ``(english, chinese, attribution)``, in file order.

    The attribution names the two Tatoeba sentences and their authors (CC-BY 2.0 FR); keep it with
    any copy you make. No row is dropped: the file holds no exact duplicate pairs, while one English
    sentence may have several Chinese translations (22,773 distinct English sentences).
    """
    return parse_tatoeba(bundled_bytes("tatoeba_cmn_eng.tsv.gz").decode("utf-8"))


def tatoeba_en_zh_about() -> str:
    """The ``_about.txt`` shipped with the Tatoeba file (date, source, terms of use)."""
    return bundled_bytes("tatoeba_cmn_eng.about.txt").decode("utf-8")


def english_key(sentence: str) -> str:
    """The form of an English sentence that decides its split: NFC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFC", sentence).casefold().split())


def split_by_key(rows: list, keys: list[str], valid_size: int, test_size: int) -> Splits:
    """Split ``rows`` so that rows with equal keys land in the same split, deterministically.

    Distinct keys are ordered by the SHA-1 of their UTF-8 bytes (ties by the key itself, so nothing
    depends on Python's hash randomisation). Walking that order, whole key groups go to test until it
    holds at least ``test_size`` rows, then to valid until it holds at least ``valid_size``; the rest is
    train. Each split keeps the rows' original order.
    """
    if len(keys) != len(rows):
        raise ValueError(f"got {len(rows)} rows but {len(keys)} keys")
    for arg, value in (("valid_size", valid_size), ("test_size", test_size)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{arg} must be a non-negative int, got {value!r}")
    if valid_size + test_size >= len(rows):
        raise ValueError(f"valid_size + test_size = {valid_size + test_size} leaves no training data of {len(rows)}")
    counts = Counter(keys)
    order = sorted(counts, key=lambda k: (hashlib.sha1(k.encode("utf-8")).hexdigest(), k))
    split_of: dict[str, int] = {}
    filled = [0, 0]  # rows given to test, valid
    for key in order:
        slot = 0 if filled[0] < test_size else 1 if filled[1] < valid_size else None
        if slot is None:
            break
        split_of[key] = slot
        filled[slot] += counts[key]
    splits = Splits([], [], [])
    for row, key in zip(rows, keys, strict=True):
        {0: splits.test, 1: splits.valid}.get(split_of.get(key, 2), splits.train).append(row)
    return splits


def tatoeba_row_splits(rows: list[tuple[str, str, str]], valid_size: int, test_size: int) -> Splits:
    return split_by_key(rows, [english_key(en) for en, _, _ in rows], valid_size, test_size)


def tatoeba_en_zh_splits(valid_size: int = TATOEBA_VALID_SIZE, test_size: int = TATOEBA_TEST_SIZE) -> Splits:
    """Deterministic train/valid/test lists of ``(english, chinese)`` pairs from the bundled Tatoeba file.

    All translations of one English sentence (compared by :func:`english_key`) land in the same split,
    so no test sentence is seen in training. With the defaults the sizes are
    train 22,110 / valid 500 / test 1,000 pairs (23,610 in all). See :func:`split_by_key`.
    """
    splits = tatoeba_row_splits(tatoeba_en_zh_rows(), valid_size, test_size)
    return Splits(*([(en, zh) for en, zh, _ in part] for part in splits))


def split_text(text: str, train_fraction: float = TINYSHAKESPEARE_TRAIN_FRACTION) -> TextSplits:
    """The first ``int(len(text) * train_fraction)`` characters for train, the rest for valid (as nanoGPT)."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be strictly between 0 and 1, got {train_fraction}")
    cut = int(len(text) * train_fraction)
    return TextSplits(text[:cut], text[cut:])


def tinyshakespeare_text() -> str:
    """The bundled tiny Shakespeare text: 1,115,394 characters, 65 distinct."""
    return bundled_bytes("tinyshakespeare.txt.gz").decode("utf-8")


def tinyshakespeare_splits(train_fraction: float = TINYSHAKESPEARE_TRAIN_FRACTION) -> TextSplits:
    """nanoGPT's character split of the bundled text: 1,003,854 train / 111,540 valid characters."""
    return split_text(tinyshakespeare_text(), train_fraction)
