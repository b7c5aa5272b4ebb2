"""Token ids on disk, read a batch at a time: a corpus larger than RAM trains with flat memory.

A *store* is one directory holding named columns of token rows (``src`` and ``tgt`` of a parallel corpus,
``text`` of a language model's stream). Each column is flat binary files, never loaded whole: every run and
every rank of a distributed run reads them through the operating system's page cache::

    COLUMN.ids      all rows' ids back to back (uint16 when the vocabulary fits, else int32)
    COLUMN.offsets  int64, rows + 1: row i is ids[offsets[i]:offsets[i + 1]]
    COLUMN.lengths  each row's token count (uint16, or int32 for longer rows): what batches are planned from,
                    read without touching the offsets
    store.json      the format, the row count, each column's dtype and token count, and what the
                    store was made from (``identity``: options, tokenizer fingerprint, source files)

A store is written into a temporary directory beside its final name and renamed into place when complete,
so a crash or a full disk never leaves a half-written store under the final name. Opening checks every
file's size against ``store.json``: a truncated or damaged file is named, with the command that rebuilds it.
"""

from __future__ import annotations

import functools
import itertools
import json
import mmap
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seqmap.data.corpus import DataError

FORMAT = 1
META = "store.json"


def ids_dtype(vocab_size: int) -> np.dtype:
    """The narrowest dtype that holds every id of a vocabulary."""
    return np.dtype(np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32)


class Column:
    """One column of token rows on disk: ``len``, ``lengths()`` and ``row(i)`` read only what they return.

    Rows are read with positioned reads (``os.pread``) rather than through a memory map, so the process holds
    only the rows of the batch in hand: the corpus stays in the operating system's page cache, shared by every
    rank and run, and the process's resident memory does not grow as an epoch touches more of the file. A
    language model's stream (``stream()``) is a read-only memory map, advised for random access."""

    def __init__(self, ids_file: Path, dtype: np.dtype, tokens: int, offsets_file: Path, rows: int,
                 lengths_file: Path, lengths_dtype: np.dtype):
        self.ids_file, self.dtype, self.tokens = ids_file, dtype, tokens
        self.rows, self.lengths_file, self.lengths_dtype = rows, lengths_file, lengths_dtype
        self._ids = os.open(ids_file, os.O_RDONLY)
        self._offsets = os.open(offsets_file, os.O_RDONLY)

    def __del__(self) -> None:
        for fd in (getattr(self, "_ids", None), getattr(self, "_offsets", None)):
            if fd is not None:
                os.close(fd)

    def __len__(self) -> int:
        return self.rows

    @functools.cached_property
    def _lengths(self) -> np.ndarray:
        array = np.fromfile(self.lengths_file, dtype=self.lengths_dtype)
        array.flags.writeable = False  # shared by every caller
        return array

    def lengths(self) -> np.ndarray:
        """(rows,) token counts, read into memory once (uint16 or int32: 2 or 4 bytes a row)."""
        return self._lengths

    def offset_span(self, i: int) -> tuple[int, int]:
        """Where row ``i`` starts and ends in the ids, in tokens."""
        return tuple(int(x) for x in np.frombuffer(os.pread(self._offsets, 16, 8 * i), dtype=np.int64))

    def row(self, i: int) -> np.ndarray:
        """Row ``i``'s ids as int64 (only that row is read)."""
        start, end = self.offset_span(i)
        size = self.dtype.itemsize
        return np.frombuffer(os.pread(self._ids, (end - start) * size, start * size), dtype=self.dtype).astype(
            np.int64)

    def stream(self) -> np.ndarray:
        """Every id of the column, in order, as one read-only memory-mapped array (a language model's stream)."""
        if not self.tokens:
            return np.zeros(0, dtype=self.dtype)
        with open(self.ids_file, "rb") as f:
            view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if hasattr(view, "madvise"):
            view.madvise(mmap.MADV_RANDOM)  # windows are drawn at random: no read-ahead around each
        return np.frombuffer(view, dtype=self.dtype)


class TokenStore:
    """An opened store: ``columns[name]`` and the ``meta`` it was written with."""

    def __init__(self, path: Path, meta: dict, columns: dict[str, Column]):
        self.path, self.meta, self.columns = path, meta, columns

    @property
    def rows(self) -> int:
        return int(self.meta["rows"])

    @classmethod
    def open(cls, path: str | Path, rebuild: str) -> TokenStore:
        """Open the store at ``path``; ``rebuild`` is the command that writes it again (named in errors)."""
        path = Path(path)
        try:
            meta = json.loads((path / META).read_text(encoding="utf-8"))
            if meta.get("format") != FORMAT:
                raise DataError(f"{path / META}: format {meta.get('format')!r}, this seqmap reads format {FORMAT}; "
                                f"delete {path} and rebuild it: {rebuild}")
            rows, columns = int(meta["rows"]), {}
            for name, spec in meta["columns"].items():
                dtype, tokens = np.dtype(spec["dtype"]), int(spec["tokens"])
                lengths_dtype = np.dtype(spec["lengths_dtype"])
                ids_file, offsets_file = path / f"{name}.ids", path / f"{name}.offsets"
                lengths_file = path / f"{name}.lengths"
                for file, size in ((ids_file, tokens * dtype.itemsize), (offsets_file, (rows + 1) * 8),
                                   (lengths_file, rows * lengths_dtype.itemsize)):
                    found = file.stat().st_size if file.is_file() else None
                    if found != size:
                        what = "is missing" if found is None else f"has {found} bytes, {size} expected"
                        raise DataError(f"{file} {what} (a truncated or damaged prepared corpus); delete {path} "
                                        f"and rebuild it: {rebuild}")
                column = Column(ids_file, dtype, tokens, offsets_file, rows, lengths_file, lengths_dtype)
                if rows and (column.offset_span(0)[0] != 0 or column.offset_span(rows - 1)[1] != tokens):
                    raise DataError(f"{offsets_file} does not match {name}.ids (a damaged prepared corpus); delete "
                                    f"{path} and rebuild it: {rebuild}")
                columns[name] = column
        except (OSError, ValueError, KeyError, TypeError) as err:
            if isinstance(err, DataError):
                raise
            raise DataError(f"{path / META} cannot be read ({type(err).__name__}: {err}); delete {path} and rebuild "
                            f"it: {rebuild}") from None
        return cls(path, meta, columns)


class StoreWriter:
    """Writes a store column by column in chunks, into a temporary directory renamed into place by ``commit``.

    Use as a context manager: leaving the block with an error removes the temporary directory."""

    def __init__(self, final: Path, columns: dict[str, int], identity: dict):
        """``columns``: name -> vocabulary size (which sets the dtype); ``identity``: what the store is made from."""
        self.final = Path(final)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(dir=self.final.parent, prefix=f".{self.final.name}-", suffix=".tmp"))
        self.identity = identity
        self.dtypes = {name: ids_dtype(vocab) for name, vocab in columns.items()}
        self.files = {name: (open(self.tmp / f"{name}.ids", "wb"), open(self.tmp / f"{name}.lengths", "wb"))
                      for name in columns}
        self.rows = dict.fromkeys(columns, 0)
        self.tokens = dict.fromkeys(columns, 0)
        self.extra: dict = {}

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self._close()
        if self.tmp.exists():  # not committed: an error (a full disk, Ctrl-C) left it half-written
            shutil.rmtree(self.tmp, ignore_errors=True)

    def add(self, column: str, rows: Sequence[Sequence[int]]) -> None:
        """Append ``rows`` (lists of ids) to ``column``."""
        if not rows:
            return
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=self.dtypes[column], count=int(lengths.sum()))
        ids_file, lengths_file = self.files[column]
        flat.tofile(ids_file)
        lengths.tofile(lengths_file)
        self.rows[column] += len(rows)
        self.tokens[column] += len(flat)

    def _close(self) -> None:
        for ids_file, lengths_file in self.files.values():
            ids_file.close()
            lengths_file.close()

    def commit(self) -> Path:
        """Finish the offsets and the metadata, then rename the store into its final place."""
        self._close()
        counts = set(self.rows.values())
        if len(counts) > 1:
            raise AssertionError(f"columns of unequal length: {self.rows}")
        rows = counts.pop() if counts else 0
        lengths_dtypes = {}
        for name in self.files:
            lengths = np.fromfile(self.tmp / f"{name}.lengths", dtype=np.int64)
            offsets = np.zeros(rows + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            offsets.tofile(self.tmp / f"{name}.offsets")
            narrow = np.uint16 if lengths.max(initial=0) <= np.iinfo(np.uint16).max else np.int32
            lengths.astype(narrow).tofile(self.tmp / f"{name}.lengths")
            lengths_dtypes[name] = np.dtype(narrow).name
        meta = {"format": FORMAT, "rows": rows, "identity": self.identity, **self.extra,
                "columns": {name: {"dtype": self.dtypes[name].name, "tokens": self.tokens[name],
                                   "lengths_dtype": lengths_dtypes[name]} for name in self.files}}
        (self.tmp / META).write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        if self.final.exists():  # a damaged or stale store of the same name is replaced
            shutil.rmtree(self.final)
        os.replace(self.tmp, self.final)
        return self.final
