"""Reading a user's text: clear errors, counted filters, and a cache of token ids.

Nothing is dropped silently. A file that cannot be read raises ``DataError`` naming
the config key, the path and what to change; ``filter_pairs`` drops empty and
over-long pairs and returns a ``FilterReport`` that counts them for the log.

A typical translation pipeline::

    pairs = read_parallel(cfg.train_src, cfg.train_tgt, "data.train_src", "data.train_tgt")
    pairs, report = filter_pairs(pairs, cfg.max_len, pair_lengths(src_tok, tgt_tok))
    log(report.summary("train"))
    ids = cached_encode(pairs, (src_tok, tgt_tok), run_dir / "cache", name="train")

Text files are UTF-8, optionally gzip-compressed (by the ``.gz`` suffix). Lines keep
everything but their line ending (``\\n`` or ``\\r\\n``); a UTF-8 byte-order mark at
the start of a file is removed.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import os
import re
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from seqmap.data.tokenizers import Tokenizer


class DataError(ValueError):
    """A data file or setting cannot be used; the message names the problem and the fix."""


def _where(config_key: str | None, path: Path) -> str:
    return f"{config_key}: {path}" if config_key else str(path)


def read_lines(path: str | Path, config_key: str | None = None) -> list[str]:
    """All lines of a UTF-8 text file (``.gz``: gzip), without their line endings.

    Args:
        path: the file.
        config_key: the option that named it (e.g. ``"data.train_src"``), used in errors.

    Raises:
        DataError: the file is missing, not gzip despite ``.gz``, empty, or not UTF-8
            (the message gives the 1-based line number).
    """
    return list(iter_lines(path, config_key))


def iter_lines(path: str | Path, config_key: str | None = None) -> Iterator[str]:
    """The lines of ``read_lines``, one at a time (a file larger than memory is never held whole)."""
    path = Path(path)
    prefix = f"{config_key}: " if config_key else ""
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "file not found"
        raise DataError(f"{prefix}{what}: {path} (check the path; relative paths start at {Path.cwd()})")
    opener = gzip.open if path.suffix == ".gz" else open
    number = 0
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                yield _decode_line(raw, number, path, config_key)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DataError(f"{_where(config_key, path)}: not a complete gzip file ({err}); "
                        f"decompress it and drop the .gz suffix, or re-compress it") from err
    if not number:
        raise DataError(f"{_where(config_key, path)}: the file is empty; point {config_key or 'the option'} "
                        f"at a file with one sentence per line")


def read_stdin() -> list[str]:
    """stdin's lines as ``read_lines`` reads a file's: UTF-8 (else one error naming the line), LF or CRLF endings,
    a leading byte-order mark dropped; no lines is no error (nothing in, nothing out)."""
    return [_decode_line(raw, number, Path("stdin"), None) for number, raw in enumerate(sys.stdin.buffer, start=1)]


def _decode_line(raw: bytes, number: int, path: Path, config_key: str | None) -> str:
    if raw.endswith(b"\n"):
        raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # UTF-8 byte-order mark
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{_where(config_key, path)}: line {number} is not valid UTF-8 (byte {err.start + 1} "
                        f"of the line: {raw[err.start:err.start + 4]!r}); convert the file to UTF-8, "
                        f"e.g. iconv -f latin1 -t utf-8") from None


def read_parallel(
    src_path: str | Path, tgt_path: str | Path, src_key: str | None = None, tgt_key: str | None = None
) -> list[tuple[str, str]]:
    """(source, target) pairs from two line-aligned files; line i of one translates line i of the other.

    Raises:
        DataError: as ``read_lines``, or the files have different numbers of lines.
    """
    return list(iter_parallel(src_path, tgt_path, src_key, tgt_key))


def iter_parallel(
    src_path: str | Path, tgt_path: str | Path, src_key: str | None = None, tgt_key: str | None = None
) -> Iterator[tuple[str, str]]:
    """The pairs of ``read_parallel``, one at a time."""
    src, tgt = iter_lines(src_path, src_key), iter_lines(tgt_path, tgt_key)
    count = 0
    for count, pair in enumerate(itertools.zip_longest(src, tgt), start=1):
        if pair[0] is None or pair[1] is None:
            rest = sum(1 for _ in (tgt if pair[0] is None else src))  # the longer file's remaining lines
            n_src, n_tgt = (count - 1, count + rest) if pair[0] is None else (count + rest, count - 1)
            raise DataError(f"parallel files differ in length: {_where(src_key, Path(src_path))} has {n_src} lines, "
                            f"{_where(tgt_key, Path(tgt_path))} has {n_tgt}; line i of one must translate line i "
                            f"of the other, so fix the files (a missing or extra line, or a stray newline in a "
                            f"sentence)")
        yield pair


def read_tsv(
    path: str | Path, config_key: str | None = None, src_column: int = 0, tgt_column: int = 1
) -> list[tuple[str, str]]:
    """(source, target) pairs from the tab-separated columns of a file (no quoting; other columns ignored).

    An empty line gives the pair ``("", "")``, which ``filter_pairs`` drops and counts.

    Raises:
        DataError: as ``read_lines``, or a non-empty line has too few columns.
    """
    return list(iter_tsv(path, config_key, src_column, tgt_column))


def iter_tsv(
    path: str | Path, config_key: str | None = None, src_column: int = 0, tgt_column: int = 1
) -> Iterator[tuple[str, str]]:
    """The pairs of ``read_tsv``, one at a time."""
    path = Path(path)
    if src_column < 0 or tgt_column < 0:
        raise DataError(f"{config_key or 'read_tsv'}: columns count from 0; got src_column={src_column}, "
                        f"tgt_column={tgt_column}")
    need = max(src_column, tgt_column) + 1
    for number, line in enumerate(iter_lines(path, config_key), start=1):
        if not line:
            yield "", ""
            continue
        columns = line.split("\t")
        if len(columns) < need:
            raise DataError(f"{_where(config_key, path)}: line {number} has {len(columns)} tab-separated "
                            f"column(s), need {need} (src_column={src_column}, tgt_column={tgt_column}); "
                            f"fix the line or choose other columns")
        yield columns[src_column], columns[tgt_column]


@dataclass
class FilterReport:
    """What ``filter_pairs`` dropped, and where (1-based positions, the first few of each)."""

    total: int = 0  # pairs looked at
    kept: int = 0  # pairs kept
    empty: int = 0  # dropped: a side empty or only whitespace
    too_long: int = 0  # dropped: a side longer than max_len tokens
    max_len: int | None = None  # the limit applied (None: no length filter)
    empty_lines: list[int] = field(default_factory=list)  # first few positions of empty pairs
    too_long_lines: list[int] = field(default_factory=list)  # first few positions of over-long pairs

    SHOWN = 5  # positions remembered per reason

    def summary(self, name: str = "data") -> str:
        """One line for the log, e.g. ``train: kept 990 of 1000 pairs; dropped 3 empty (lines 4, 9, 12), ...``."""
        dropped = []
        for count, lines, what in ((self.empty, self.empty_lines, "empty"),
                                   (self.too_long, self.too_long_lines, f"longer than {self.max_len} tokens")):
            if count:
                more = ", ..." if count > len(lines) else ""
                dropped.append(f"{count} {what} (lines {', '.join(map(str, lines))}{more})")
        tail = "; dropped " + ", ".join(dropped) if dropped else "; dropped none"
        return f"{name}: kept {self.kept} of {self.total} pairs{tail}"


def pair_lengths(src: Tokenizer, tgt: Tokenizer | None = None) -> Callable[[str, str], tuple[int, int]]:
    """A ``lengths`` function for ``filter_pairs``: token counts by ``src`` and ``tgt`` (default: ``src``)."""
    tgt = tgt or src
    return lambda s, t: (len(src.encode(s)), len(tgt.encode(t)))


def filter_pairs(
    pairs: Iterable[tuple[str, str]],
    max_len: int | None = None,
    lengths: Callable[[str, str], tuple[int, int]] | None = None,
) -> tuple[list[tuple[str, str]], FilterReport]:
    """Drop empty pairs and pairs longer than ``max_len`` tokens, counting both.

    Args:
        pairs: (source, target) texts.
        max_len: the most tokens either side may have (None: no length filter).
        lengths: ``(src, tgt) -> (src_tokens, tgt_tokens)``, needed with ``max_len``
            since only the tokenizer knows the length; use ``pair_lengths(src_tok, tgt_tok)``.

    Returns:
        The kept pairs in their order, and a ``FilterReport``.
    """
    if max_len is not None and lengths is None:
        raise ValueError(f"filter_pairs: max_len={max_len} counts tokens, so pass lengths=, "
                         f"e.g. pair_lengths(src_tokenizer, tgt_tokenizer)")
    report = FilterReport(max_len=max_len)
    kept = []
    for number, (src, tgt) in enumerate(pairs, start=1):
        report.total += 1
        if not src.strip() or not tgt.strip():
            report.empty += 1
            if len(report.empty_lines) < FilterReport.SHOWN:
                report.empty_lines.append(number)
        elif max_len is not None and max(lengths(src, tgt)) > max_len:
            report.too_long += 1
            if len(report.too_long_lines) < FilterReport.SHOWN:
                report.too_long_lines.append(number)
        else:
            kept.append((src, tgt))
    report.kept = len(kept)
    return kept, report


# ---------------------------------------------------------------------------------------------
# Token cache

_KEY_CHARS = 20  # hex digits of the key in the cache file name


def cached_encode(
    data: Sequence[str] | Sequence[tuple[str, str]],
    tokenizer: Tokenizer | tuple[Tokenizer, Tokenizer],
    cache_dir: str | Path,
    key_parts: Iterable[Any] = (),
    *,
    name: str = "tokens",
) -> list[list[int]] | list[tuple[list[int], list[int]]]:
    """Token ids of ``data``, loaded from ``cache_dir`` when the same data was encoded before.

    The cache file ``{cache_dir}/{name}-{key}.npz`` holds, per column, the ids as one
    flat int32 array plus offsets (no pickle). The key hashes the text of ``data``
    itself, each tokenizer's ``fingerprint()`` and ``key_parts``, so changed files,
    filters or tokenizers all re-encode; a new file replaces the older ``{name}-*.npz``.

    Args:
        data: lines (``list[str]``) or (source, target) pairs.
        tokenizer: one tokenizer, or for pairs a ``(src, tgt)`` tuple of tokenizers.
        cache_dir: where the cache lives (e.g. the run directory's ``cache/``), created if needed.
        key_parts: further values that should change the key (e.g. a format version);
            a ``Path`` counts by its file content.
        name: the file prefix, one per dataset (``"train"``, ``"valid"``).

    Returns:
        A list of id lists for lines, or of ``(src_ids, tgt_ids)`` for pairs; no BOS/EOS.
    """
    data = list(data)
    if not data:
        return []
    is_pairs = not isinstance(data[0], str)
    columns = [[p[0] for p in data], [p[1] for p in data]] if is_pairs else [data]
    if isinstance(tokenizer, tuple):
        if not is_pairs:
            raise ValueError("cached_encode: a (src, tgt) tokenizer pair needs (source, target) pairs as data")
        tokenizers = list(tokenizer)
    else:
        tokenizers = [tokenizer] * len(columns)
    key = _cache_key(columns, tokenizers, key_parts)
    cache_dir = Path(cache_dir)
    path = cache_dir / f"{name}-{key[:_KEY_CHARS]}.npz"
    encoded = _load(path, len(columns), len(data))
    if encoded is None:
        encoded = [[tok.encode(text) for text in column] for column, tok in zip(columns, tokenizers, strict=True)]
        _store(path, encoded, name)
    return list(zip(*encoded, strict=True)) if is_pairs else encoded[0]


def _cache_key(columns: list[list[str]], tokenizers: list[Tokenizer], key_parts: Iterable[Any]) -> str:
    h = hashlib.sha256(b"seqmap-token-cache-v1")
    for column, tok in zip(columns, tokenizers, strict=True):
        h.update(tok.fingerprint().encode())
        h.update(len(column).to_bytes(8, "little"))
        for text in column:
            b = text.encode("utf-8", "surrogatepass")
            h.update(len(b).to_bytes(8, "little") + b)
    for part in key_parts:
        if isinstance(part, Path):
            h.update(hashlib.sha256(part.read_bytes()).digest())
        else:
            h.update(repr(part).encode() + b"\0")
    return h.hexdigest()


def _load(path: Path, n_columns: int, n_rows: int) -> list[list[list[int]]] | None:
    """The cached columns, or None if the file is absent or does not match (then it is rebuilt)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            columns = []
            for c in range(n_columns):
                ids, offsets = z[f"ids_{c}"].tolist(), z[f"offsets_{c}"].tolist()
                if len(offsets) != n_rows + 1:
                    return None
                columns.append([ids[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
            return columns
    except (OSError, ValueError, KeyError):  # a truncated or foreign file: encode again
        return None


def _store(path: Path, columns: list[list[list[int]]], name: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for c, rows in enumerate(columns):
        arrays[f"ids_{c}"] = np.fromiter((i for row in rows for i in row), dtype=np.int32)
        arrays[f"offsets_{c}"] = np.cumsum([0] + [len(row) for row in rows], dtype=np.int64)
    # write then rename, so a crash never leaves a half-written cache under the final name
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    stale = re.compile(rf"{re.escape(name)}-[0-9a-f]{{{_KEY_CHARS}}}\.npz")
    for old in path.parent.iterdir():
        if old != path and stale.fullmatch(old.name):
            old.unlink(missing_ok=True)
