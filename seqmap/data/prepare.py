"""A training split prepared once: its tokenizer fitted on a sample, its text encoded with every core into a
memory-mapped token store (``token_store.py``), reused by every later run with the same text and tokenizer.

    DIR/translation-<key>/   (DIR: data.prepared_dir, or RUN_DIR/prepared)
        store.json, src.ids, src.offsets, tgt.ids, tgt.offsets   the encoded training pairs, every row kept
        tokenizer/                                                the tokenizer they were encoded with

(``lm-<key>`` holds one ``text`` column; ``classification-<key>`` a ``text`` column and a ``label`` column.)

The key names the options that shape the ids (task, tokenizer options, normalization, columns, hold-out,
lexicon) and the training files by path and size, plus either the tokenizer's fingerprint (a run that has
one: resumed, or ``--init``) or "fit" (a run that fits its own). ``store.json`` records each file's size,
modification time and SHA-256 as it was read: a later run reuses the store when the size and time still
match, or, when only the time moved, when the content hashes the same; otherwise it prepares again.
Filtering (``data.max_len``, empty pairs) and source truncation happen when a run opens the store, on the
lengths arrays, so those options never force a new preparation.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import random
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from seqmap.data.corpus import FilterReport
from seqmap.data.token_store import StoreWriter, TokenStore
from seqmap.data.tokenizers import Tokenizer, load_pair, save_pair

DataConfig = Any  # seqmap.config.DataConfig, which sits above the data layer (it checks names defined here)

CHUNK = 20_000  # sentences encoded per call of the tokenizer's threaded batch encoder
SAMPLE_SEED = "seqmap.tokenizer-sample"  # the reservoir sample of a large training text is the same every time
NOT_TEXT = 2**31 - 1  # the vocabulary of a column whose ids are no tokenizer's: int32


def prepared_root(cfg: DataConfig, run_dir: Path) -> Path:
    return Path(cfg.prepared_dir) if cfg.prepared_dir else run_dir / "prepared"


def file_identity(path: Path, content: bool) -> dict:
    """A file as ``store.json`` records it: resolved path, size, modification time (and SHA-256 when asked)."""
    stat = path.stat()
    identity = {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    if content:
        with open(path, "rb") as f:
            identity["sha256"] = hashlib.file_digest(f, "sha256").hexdigest()
    return identity


def _unchanged(recorded: dict) -> bool:
    """Whether a recorded file still holds what was prepared: same size and time, or same content."""
    path = Path(recorded["path"])
    if not path.is_file():
        return False
    now = file_identity(path, content=False)
    if now["size"] != recorded["size"]:
        return False
    if now["mtime_ns"] == recorded["mtime_ns"] or recorded.get("sha256") is None:
        return now["mtime_ns"] == recorded["mtime_ns"]
    return file_identity(path, content=True)["sha256"] == recorded["sha256"]


@dataclass
class Source:
    """What a training split is read from: ``pairs()`` streams its (normalized) examples; ``files`` are what the
    stream reads (their identity decides reuse); ``digest`` stands in for files (a bundled corpus)."""

    pairs: Callable[[], Iterator[tuple[str, str]]]
    files: list[Path]
    options: dict
    digest: str | None = None


class HeldOut:
    """Streams all but the last ``n`` examples of an iterator; ``tail`` holds those ``n`` once it is exhausted.
    ``check(total)`` sees the number of examples read (it raises when too few remain to train on)."""

    def __init__(self, examples: Iterable, n: int, check: Callable[[int], object]):
        self.examples, self.n, self.check = examples, n, check
        self.tail: list = []

    def __iter__(self):
        window: collections.deque = collections.deque()
        total = 0
        for example in self.examples:
            total += 1
            window.append(example)
            if len(window) > self.n:
                yield window.popleft()
        self.check(total)
        self.tail = list(window)


def _key(kind: str, source: Source, tokenizer: str) -> str:
    parts = {"options": source.options, "tokenizer": tokenizer, "digest": source.digest,
             "files": [(str(p.resolve()), p.stat().st_size) for p in source.files]}
    return f"{kind}-{hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]}"


def _mismatch(store: TokenStore, tokenizer: str | None) -> str | None:
    """Why ``store`` cannot serve a run with this tokenizer fingerprint (None: any), or None when it can."""
    identity = store.meta.get("identity", {})
    if tokenizer is not None and identity.get("tokenizer") != tokenizer:
        return "another tokenizer"
    changed = [f["path"] for f in identity.get("files", []) if not _unchanged(f)]
    return f"{changed[0]} changed since" if changed else None


def _fingerprint(src: Tokenizer, tgt: Tokenizer) -> str:
    return src.fingerprint() if src is tgt else f"{src.fingerprint()}/{tgt.fingerprint()}"


def _progress(total: int | None, what: str):
    return tqdm(total=total, unit=" " + what, unit_scale=True, desc="encoding", leave=False,
                disable=not sys.stderr.isatty(), file=sys.stderr)


@dataclass
class Prepared:
    """A prepared training split: its store, its tokenizer(s), the held-out validation examples (if any)."""

    store: TokenStore
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    held_out: list


# column name -> (which text of an example it encodes, which tokenizer of the pair, how a chunk is encoded);
# a side of None gives the encoder whole examples, a tokenizer of None ids that are not a tokenizer's (int32,
# the encoder gets None for the tokenizer: a classifier's label indices)
Columns = dict[str, tuple[int | None, int | None, Callable[[Tokenizer | None, list, int], list[list[int]]]]]


def prepare(cfg: DataConfig, source: Source, run_dir: Path, kind: str, columns: Columns,
            fit: Callable[..., tuple[Tokenizer, Tokenizer]], log: Callable[[str], None], *, valid_size: int = 0,
            noun: str = "pairs", check_total: Callable[[int], object] = lambda total: None,
            record: Callable[[], None] = lambda: None, extra: Callable[[], dict] = dict) -> Prepared:
    """The training examples of ``source`` as a store of ``columns``, found or made.

    ``fit(*texts)`` (one list of texts per text of an example) trains and saves the run's tokenizer pair when
    RUN_DIR/tokenizer does not exist and no prepared store brings one (``record()`` is called before a store's
    tokenizer is copied into the run). ``valid_size`` > 0 holds out the last examples (returned as text);
    ``check_total(n)`` refuses a split too small for it. ``extra()``, asked once every example is encoded, gives
    further entries of ``store.json`` (what the encoders learnt on the way: a classifier's label names)."""
    next(iter(source.pairs()), None)  # a missing or unreadable file: the reader's one-line error, before its key
    tokenizer_dir = run_dir / "tokenizer"
    own = load_pair(tokenizer_dir) if has_tokenizer(tokenizer_dir) else None
    root = prepared_root(cfg, run_dir)
    rebuild = "seqmap train CONFIG (it prepares the corpus again)"
    names = ([_key(kind, source, _fingerprint(*own))] if own else []) + [_key(kind, source, "fit")]
    for name in names:
        path = root / name
        if not (path / "store.json").is_file():
            continue
        store = TokenStore.open(path, rebuild)
        why = _mismatch(store, None if own is None else _fingerprint(*own))
        if why is not None:
            if why != "another tokenizer":  # a store of another tokenizer is another run's, not stale
                log(f"prepared corpus {path}: {why}; preparing it again")
            continue
        if own is None:
            record()
            shutil.copytree(path / "tokenizer", tokenizer_dir)
            own = load_pair(tokenizer_dir)
        log(f"prepared corpus: {path} ({store.rows} {noun}, read from memory-mapped files)")
        return Prepared(store, *own, [tuple(x) for x in store.meta.get("held_out", [])])

    def examples():
        return HeldOut(source.pairs(), valid_size, check_total) if valid_size else source.pairs()

    if own is None:  # fit on a sample: one pass over the text, each text of an example sampled alone
        k = cfg.tokenizer_sample if cfg.tokenizer in ("bpe", "unigram") else 0
        samples = _samples(examples(), k)
        if k and len(samples[0]) == k:
            log(f"tokenizer: trained on a random sample of {k} sentences per side (data.tokenizer_sample)")
        own = fit(*samples)
        del samples
    identity = {"options": source.options, "tokenizer": _fingerprint(*own), "digest": source.digest,
                "files": [file_identity(p, content=True) for p in source.files]}
    final = root / names[0]
    threads = os.cpu_count() or 1
    stream = examples()
    vocab = {name: NOT_TEXT if tok is None else own[tok].vocab_size for name, (_, tok, _) in columns.items()}
    with StoreWriter(final, vocab, identity) as writer, _progress(None, noun) as bar:
        for chunk in _chunks(stream, CHUNK):
            for name, (side, tok, encode) in columns.items():
                texts = chunk if side is None else [example[side] for example in chunk]
                writer.add(name, encode(None if tok is None else own[tok], texts, threads))
            bar.update(len(chunk))
        held = stream.tail if valid_size else []
        writer.extra["held_out"] = [list(x) for x in held]
        writer.extra.update(extra())
        save_pair(*own, writer.tmp / "tokenizer")
        path = writer.commit()
    log(f"prepared corpus: {path} ({writer.rows[next(iter(columns))]} {noun} encoded with {threads} threads; "
        f"reused by runs with the same training text and tokenizer)")
    return Prepared(TokenStore.open(path, rebuild), *own, held)


def has_tokenizer(directory: Path) -> bool:
    """Whether a run's tokenizer directory holds a saved tokenizer (one, or a src/tgt pair)."""
    return (directory / "tokenizer.json").exists() or (directory / "src" / "tokenizer.json").exists()


def _samples(examples: Iterable[tuple], k: int) -> list[list[str]]:
    """Per text of an example, every text when there are at most ``k`` (in order), else a seeded reservoir
    sample of ``k`` in file order; one pass over the examples."""
    kept: list[list] = []
    rngs: list[random.Random] = []
    for n, example in enumerate(examples):
        if not kept:
            kept = [[] for _ in example]
            rngs = [random.Random(f"{SAMPLE_SEED}:{side}") for side in range(len(example))]
        for side, text in enumerate(example):
            if k <= 0 or n < k:
                kept[side].append((n, text))
            else:
                j = rngs[side].randrange(n + 1)
                if j < k:
                    kept[side][j] = (n, text)
    return [[text for _, text in sorted(side, key=lambda item: item[0])] for side in kept]


def _chunks(iterable: Iterable, size: int) -> Iterator[list]:
    chunk = []
    for item in iterable:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def encode_blank_empty(tok: Tokenizer, texts: list[str], threads: int) -> list[list[int]]:
    """Token ids of each text; a blank text (only whitespace) is no tokens, so the filter counts it empty."""
    ids = tok.encode_batch(texts, threads)
    return [row if text.strip() else [] for row, text in zip(ids, texts, strict=True)]


# -- a run's view of a prepared store ------------------------------------------------------------------

def filter_store(store: TokenStore, cfg: DataConfig, name: str = "train") -> tuple[np.ndarray, FilterReport]:
    """The rows a run trains on (``data.max_len``; empty pairs dropped), as indices, and the report that counts
    what was dropped, computed on the lengths arrays. With ``data.max_src_len`` > 0 only the target counts."""
    src, tgt = store.columns["src"].lengths(), store.columns["tgt"].lengths()
    empty = (src == 0) | (tgt == 0)
    too_long = ~empty & (tgt > cfg.max_len)
    if cfg.max_src_len <= 0:  # sources count too (else they are truncated, not dropped)
        too_long |= ~empty & (src > cfg.max_len)
    report = FilterReport(total=len(src), empty=int(empty.sum()), too_long=int(too_long.sum()), max_len=cfg.max_len,
                          empty_lines=(np.flatnonzero(empty)[:FilterReport.SHOWN] + 1).tolist(),
                          too_long_lines=(np.flatnonzero(too_long)[:FilterReport.SHOWN] + 1).tolist())
    kept = np.flatnonzero(~(empty | too_long)).astype(np.int32 if len(src) < 2**31 else np.int64)
    report.kept = len(kept)
    return kept, report


class PairRows:
    """The kept training pairs of a store, by position: ``rows[k]`` is (source ids, target ids), int64 arrays,
    the source cut to ``data.max_src_len`` (0: whole), read from the memory map when asked for."""

    def __init__(self, store: TokenStore, kept: np.ndarray, max_src_len: int = 0):
        self.src, self.tgt = store.columns["src"], store.columns["tgt"]
        self.kept, self.max_src_len = kept, max_src_len

    def __len__(self) -> int:
        return len(self.kept)

    def __getitem__(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        i = int(self.kept[k])
        src = self.src.row(i)
        return (src[:self.max_src_len] if self.max_src_len > 0 else src), self.tgt.row(i)

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def src_lengths(self) -> np.ndarray:
        lengths = self.src.lengths()[self.kept]
        return np.minimum(lengths, self.max_src_len) if self.max_src_len > 0 else lengths

    def tgt_lengths(self) -> np.ndarray:
        return self.tgt.lengths()[self.kept]
