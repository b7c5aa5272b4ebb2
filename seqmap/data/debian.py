"""Debian package descriptions: the archive's index files -> one TSV -> (text, section) rows per split.

The dataset ``debian-descriptions`` (see ``dataset_registry.py``) is one file, ``descriptions.tsv``
(UTF-8, header row, no quoting, rows sorted by package name), with the columns ``COLUMNS``. It is
built from two index files of Debian 12 "bookworm" ``main`` by :func:`build_descriptions`:

* ``Translation-en``: one deb822 stanza per (Package, Description-md5) with ``Description-en``;
* ``binary-amd64/Packages``: ``Section`` and ``Source`` of each (Package, Description-md5).

The recipe (the same as ``/work/shared/data/README.md`` section 9 states):

1. join the two on (Package, Description-md5); unmatched translations are dropped;
2. ``source_package`` is ``Source`` without its ``(version)``, or the package name without ``Source``;
3. ``synopsis`` is the first line of ``Description-en``; the long description is every following
   line stripped, inner whitespace runs collapsed to one space, lines joined by one space; a
   paragraph-separator line `` .`` becomes the marker `` <p> `` and empty paragraphs are dropped;
4. descriptions of fewer than ``MIN_WORDS`` words (markers not counted) are dropped, then one row
   is kept per (synopsis, description), the first by package name;
5. ``split`` is :func:`split_of` the source package (sha256 -> 96 / 2 / 2 per cent), so every
   binary package of one source package is in one split.

For classification (:func:`classification_rows`) a row's text is its synopsis and its long
description, paragraph markers replaced by a space (see :func:`classification_text`), and its label
the section. For summarization (:func:`summary_rows`) a row is the long description (its `` <p> ``
markers kept: the lead baseline reads the first paragraph) and the synopsis. The package name is left
out of both on purpose: Debian's naming rules (``python3-*``,
``lib*-dev``, ``golang-*``, ``librust-*``) give the section away for most packages, and the
task is to read the description.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections.abc import Iterator
from pathlib import Path

from seqmap.data.dataset_files import DatasetError, write_lines

COLUMNS = ("package", "source_package", "section", "synopsis", "description", "split")
PARAGRAPH = " <p> "  # the paragraph marker inside ``description``
MIN_WORDS = 10  # shorter long descriptions (markers not counted) are dropped
SPLITS = ("train", "valid", "test")

_FIELD = re.compile(r"^([!-9;-~][!-9;-~]*):[ \t]?(.*)$")  # deb822 "Name: value" (the name has no colon or space)


def parse_deb822(text: str, where: str) -> Iterator[dict[str, str]]:
    """The stanzas of a deb822 file (Packages, Translation-*): {field: value}, continuation lines joined by \\n.

    A continuation line (starting with a space or tab) is kept as it is, its leading space included.
    """
    stanza: dict[str, str] = {}
    name = None
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            if stanza:
                yield stanza
            stanza, name = {}, None
        elif line[0] in " \t":
            if name is None:
                raise DatasetError(f"{where} line {number}: a continuation line with no field before it")
            stanza[name] += "\n" + line
        else:
            match = _FIELD.match(line)
            if match is None:
                raise DatasetError(f"{where} line {number}: not a 'Field: value' line of a deb822 file: {line[:60]!r}")
            name = match.group(1)
            stanza[name] = match.group(2).strip()
    if stanza:
        yield stanza


def _one_line(text: str) -> str:
    return " ".join(text.split())


def split_description(value: str) -> tuple[str, str]:
    """``Description-en``'s value -> (synopsis, long description with `` <p> `` between paragraphs)."""
    first, *rest = value.split("\n")
    paragraphs, current = [], []
    for line in rest:
        if line.strip() == ".":
            paragraphs.append(" ".join(current))
            current = []
        elif line.strip():
            current.append(_one_line(line))
    paragraphs.append(" ".join(current))
    return _one_line(first), PARAGRAPH.join(p for p in paragraphs if p)


def word_count(description: str) -> int:
    """Whitespace words of a long description, paragraph markers not counted."""
    return sum(1 for word in description.split() if word != PARAGRAPH.strip())


def split_of(source_package: str) -> str:
    """train / valid / test by the first 8 hex digits of sha256(source package) mod 100: < 96, 96-97, 98-99."""
    h = int(hashlib.sha256(source_package.encode("utf-8")).hexdigest()[:8], 16) % 100
    return "train" if h < 96 else "valid" if h < 98 else "test"


def build_descriptions(translation_en: str, packages: str) -> list[tuple[str, ...]]:
    """Rows of ``COLUMNS`` from the text of ``Translation-en`` and ``Packages`` (the module docstring's recipe)."""
    index: dict[tuple[str, str], dict[str, str]] = {}
    for stanza in parse_deb822(packages, "Packages"):
        key = (stanza.get("Package", ""), stanza.get("Description-md5", ""))
        index.setdefault(key, stanza)  # one suite and architecture: one stanza per key
    rows = []
    for record in parse_deb822(translation_en, "Translation-en"):
        package = record.get("Package", "")
        binary = index.get((package, record.get("Description-md5", "")))
        if binary is None or "Description-en" not in record:
            continue
        synopsis, description = split_description(record["Description-en"])
        if word_count(description) < MIN_WORDS:
            continue
        source = binary.get("Source", "").split(" ", 1)[0] or package
        rows.append((package, source, binary.get("Section", ""), synopsis, description, split_of(source)))
    rows.sort(key=lambda row: row[0])
    seen, unique = set(), []
    for row in rows:
        if (row[3], row[4]) not in seen:
            seen.add((row[3], row[4]))
            unique.append(row)
    return unique


def descriptions_tsv(rows: list[tuple[str, ...]]) -> bytes:
    """The TSV file's bytes: a header, then one line per row (fields hold no tab or newline by construction)."""
    lines = ["\t".join(COLUMNS), *("\t".join(row) for row in rows)]
    return "".join(line + "\n" for line in lines).encode("utf-8")


def read_descriptions(text: str, where: str = "descriptions.tsv") -> list[dict[str, str]]:
    """The rows of a descriptions TSV as {column: value}; a missing column or a short line is one clear error."""
    reader = csv.reader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE)
    header = next(reader, None)
    if header is None:
        raise DatasetError(f"{where} is empty; expected a header row with the columns {', '.join(COLUMNS)}")
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise DatasetError(f"{where}: the header lacks the column(s) {', '.join(missing)} (it has "
                           f"{', '.join(header)}); is this the Debian descriptions TSV?")
    rows = []
    for number, fields in enumerate(reader, start=2):
        if len(fields) != len(header):
            raise DatasetError(f"{where} line {number} has {len(fields)} tab-separated fields, expected "
                               f"{len(header)}")
        rows.append(dict(zip(header, fields)))
    return rows


def classification_text(synopsis: str, description: str) -> str:
    """The text a section classifier reads: ``synopsis. paragraph paragraph ...``.

    The synopsis is the densest clue (median 7 words) and the long description adds the rest (median
    45); both are kept. Paragraph markers become a plain space: where a paragraph ends says little
    about the section, and ``<p>`` would otherwise be split into pieces by the tokenizer and read as a
    word ``p`` by TF-IDF.
    """
    body = " ".join(description.split(PARAGRAPH))
    return f"{synopsis.rstrip('.')}. {body}" if body else synopsis


def classification_rows(rows: list[dict[str, str]]) -> dict[str, list[tuple[str, str, str]]]:
    """(text, section, package) per split, in file order; a split name outside train/valid/test is an error."""
    out: dict[str, list[tuple[str, str, str]]] = {split: [] for split in SPLITS}
    for row in rows:
        if row["split"] not in out:
            raise DatasetError(f"package {row['package']}: split {row['split']!r} is not one of {', '.join(SPLITS)}")
        out[row["split"]].append((classification_text(row["synopsis"], row["description"]), row["section"],
                                  row["package"]))
    return out


def write_classification_splits(tsv: bytes, dest: Path) -> list[str]:
    """``dest/{train,valid,test}.tsv``: text<TAB>section<TAB>package lines (no header), from the descriptions TSV."""
    splits = classification_rows(read_descriptions(tsv.decode("utf-8")))
    written = []
    for split, rows in splits.items():
        write_lines(dest / f"{split}.tsv", ["\t".join(row) for row in rows])
        written.append(f"{split}.tsv")
    return written


def summary_rows(rows: list[dict[str, str]]) -> dict[str, list[tuple[str, str, str]]]:
    """(description, synopsis, package) per split, in file order: the summarization pairs (about 45 words -> 7).

    The description keeps its `` <p> `` paragraph markers; every row is kept, however long (a run says
    what it does with long sources: ``data.max_src_len``).
    """
    out: dict[str, list[tuple[str, str, str]]] = {split: [] for split in SPLITS}
    for row in rows:
        if row["split"] not in out:
            raise DatasetError(f"package {row['package']}: split {row['split']!r} is not one of {', '.join(SPLITS)}")
        out[row["split"]].append((row["description"], row["synopsis"], row["package"]))
    return out


def write_summary_splits(tsv: bytes, dest: Path) -> list[str]:
    """``dest/summary_{train,valid,test}.tsv``: description<TAB>synopsis<TAB>package lines (no header)."""
    written = []
    for split, rows in summary_rows(read_descriptions(tsv.decode("utf-8"))).items():
        write_lines(dest / f"summary_{split}.tsv", ["\t".join(row) for row in rows])
        written.append(f"summary_{split}.tsv")
    return written
