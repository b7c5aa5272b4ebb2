"""Tokenizers behind one interface: characters, words, and sentencepiece BPE / unigram.

Every tokenizer maps text to ids and back with the same four reserved ids, so the
models, batching and decoding never ask which kind they hold::

    PAD = 0   padding
    BOS = 1   begin of sequence (added by batching, never by ``encode``)
    EOS = 2   end of sequence   (likewise)
    UNK = 3   a piece the vocabulary does not hold

``train_tokenizer(kind, texts, vocab_size, **options)`` is the one entry point;
``Tokenizer.save(directory)`` writes the tokenizer's files plus a ``tokenizer.json``
manifest, and ``load_tokenizer(directory)`` reads any kind back. For translation,
``train_pair`` gives one joint tokenizer (trained on source and target text, the same
object twice) or two separate ones; ``save_pair`` / ``load_pair`` store either layout.

Round trips (``decode(encode(text)) == text``):

* ``char``: exact for every text made of characters seen in training.
* ``word``: splits on any whitespace and ``decode`` joins with single spaces, so runs
  of spaces, tabs and leading/trailing space are not kept.
* ``bpe`` / ``unigram``: text is not normalised (``normalization_rule_name="identity"``:
  no NFKC, so Chinese full-width punctuation stays full-width and BLEU is computed on
  the text as written). With the default ``remove_extra_whitespaces=True``,
  sentencepiece strips leading/trailing spaces and collapses runs of spaces to one;
  tabs are kept. Train with ``remove_extra_whitespaces=False`` to keep every space.
  Single-spaced text, Chinese included, round-trips exactly in both modes.

Unknown pieces decode to ``UNK_SURFACE`` ("⁇") in every kind; ``decode`` skips PAD,
BOS and EOS wherever they occur (it does not stop at EOS).

A tokenizer may carry a ``TextNormalizer`` (``normalize.py``: lowercasing, OpenCC script
conversion), saved in its manifest: ``encode`` and ``tokens`` apply it first, so every
caller (training, translate, serve, plots) reads text the same way.

The interface and the reserved ids live in ``tokenizer_base.py`` (re-exported here), the ``bpe`` /
``unigram`` tokenizer (``SentencePieceTokenizer``) in ``sentencepiece_tokenizer.py``; both build on the
base, and this module, which chooses between the kinds, imports both.
"""

from __future__ import annotations

import difflib
import json
from abc import abstractmethod
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

from seqmap.data.normalize import IDENTITY, TextNormalizer
from seqmap.data.sentencepiece_tokenizer import SentencePieceTokenizer
from seqmap.data.tokenizer_base import (
    BOS,
    EOS,
    FORMAT_VERSION,
    MANIFEST,
    NEVER_GENERATED,
    PAD,
    SPECIAL_PIECES,
    UNK,
    UNK_SURFACE,
    Tokenizer,
    TokenizerError,
    existing_file,
)

__all__ = [
    "BOS", "EOS", "FORMAT_VERSION", "MANIFEST", "NEVER_GENERATED", "PAD", "SPECIAL_PIECES", "TOKENIZER_KINDS", "UNK",
    "UNK_SURFACE", "CharTokenizer", "SentencePieceTokenizer", "Tokenizer", "TokenizerError", "WordTokenizer",
    "existing_file", "load_pair", "load_tokenizer", "save_pair", "train_pair", "train_tokenizer",
]

TOKENIZER_KINDS = ("char", "word", "bpe", "unigram")
LOADED_ONLY = "hf"  # a pretrained Hugging Face tokenizer (seqmap.data.hf_tokenizer): imported, never trained here


class _VocabTokenizer(Tokenizer):
    """A fixed list of pieces learned by counting: the shared body of ``char`` and ``word``."""

    VOCAB_FILE: ClassVar[str] = "vocab.json"

    def __init__(self, pieces: list[str]) -> None:
        if tuple(pieces[:4]) != SPECIAL_PIECES:
            raise TokenizerError(f"a {self.kind} vocabulary must start with {list(SPECIAL_PIECES)}, "
                                 f"got {pieces[:4]}; was the vocab file edited?")
        self._pieces = list(pieces)
        # PAD/BOS/EOS cannot be produced from text; the literal piece "<unk>" maps to UNK
        self._index = {p: i for i, p in enumerate(self._pieces) if i not in (PAD, BOS, EOS)}

    @staticmethod
    @abstractmethod
    def _split(text: str) -> list[str]: ...

    @staticmethod
    @abstractmethod
    def _join(pieces: list[str]) -> str: ...

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int | None = None, *, min_freq: int = 1) -> _VocabTokenizer:
        """Learn the vocabulary from ``texts``.

        Args:
            texts: training text, one string per sentence or line.
            vocab_size: the most ids to keep, specials included (None: every piece seen
                ``min_freq`` times). The most frequent pieces are kept; ties by piece order.
            min_freq: pieces seen fewer times become UNK.
        """
        if vocab_size is not None and vocab_size <= len(SPECIAL_PIECES):
            raise TokenizerError(f"vocab_size={vocab_size} leaves no room for pieces after the "
                                 f"{len(SPECIAL_PIECES)} specials; set vocab_size > {len(SPECIAL_PIECES)}")
        if min_freq < 1:
            raise TokenizerError(f"min_freq must be >= 1, got {min_freq}")
        counts = Counter(piece for text in texts for piece in cls._split(text))
        for special in SPECIAL_PIECES:
            counts.pop(special, None)
        kept = sorted((p for p, n in counts.items() if n >= min_freq), key=lambda p: (-counts[p], p))
        if not kept:
            raise TokenizerError(f"no {cls.kind} pieces to learn: the training text is empty"
                                 + (f" or no piece occurs min_freq={min_freq} times" if counts else ""))
        if vocab_size is not None:
            kept = kept[: vocab_size - len(SPECIAL_PIECES)]
        return cls(list(SPECIAL_PIECES) + kept)

    @property
    def vocab_size(self) -> int:
        return len(self._pieces)

    def _encode(self, text: str) -> list[int]:
        return [self._index.get(p, UNK) for p in self._split(text)]

    def decode(self, ids: Iterable[int]) -> str:
        out = []
        for i in ids:
            i = self._check_id(int(i))
            if i not in (PAD, BOS, EOS):
                out.append(UNK_SURFACE if i == UNK else self._pieces[i])
        return self._join(out)

    def _tokens(self, text: str) -> list[str]:
        return self._split(text)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self._pieces[self._check_id(int(i))] for i in ids]

    def _write_files(self, directory: Path) -> dict[str, Any]:
        text = json.dumps(self._pieces, ensure_ascii=False, indent=0)
        (directory / self.VOCAB_FILE).write_text(text + "\n", encoding="utf-8")
        return {"vocab_file": self.VOCAB_FILE}

    @classmethod
    def _from_files(cls, directory: Path, manifest: dict[str, Any]) -> _VocabTokenizer:
        path = existing_file(directory / manifest.get("vocab_file", cls.VOCAB_FILE), directory)
        try:
            pieces = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise TokenizerError(f"{path}: not a JSON list of pieces ({err}); save the tokenizer again") from err
        return cls(pieces)

    def _state(self) -> bytes:
        return json.dumps(self._pieces, ensure_ascii=False).encode("utf-8")


class CharTokenizer(_VocabTokenizer):
    """One id per character (spaces and tabs included): exact round trip for seen characters."""

    kind = "char"

    @staticmethod
    def _split(text: str) -> list[str]:
        return list(text)

    @staticmethod
    def _join(pieces: list[str]) -> str:
        return "".join(pieces)


class WordTokenizer(_VocabTokenizer):
    """One id per whitespace-separated word; ``decode`` joins words with single spaces.

    Runs of whitespace, tabs and leading/trailing spaces are therefore not restored.
    A literal ``<unk>`` word in the text (as in PTB) maps to UNK.
    """

    kind = "word"

    @staticmethod
    def _split(text: str) -> list[str]:
        return text.split()

    @staticmethod
    def _join(pieces: list[str]) -> str:
        return " ".join(pieces)


_SENTENCEPIECE_OPTIONS = ("character_coverage", "byte_fallback", "split_digits", "remove_extra_whitespaces")
_OPTIONS: dict[str, tuple[str, ...]] = {  # the training options each kind accepts
    "char": ("min_freq",),
    "word": ("min_freq",),
    "bpe": _SENTENCEPIECE_OPTIONS,
    "unigram": _SENTENCEPIECE_OPTIONS,
}


def _tokenizer_class(kind: str) -> Any:
    """The class that trains and loads tokenizers of ``kind`` (one of ``TOKENIZER_KINDS``)."""
    if kind == "char":
        return CharTokenizer
    if kind == "word":
        return WordTokenizer
    if kind == LOADED_ONLY:
        from seqmap.data.hf_tokenizer import HFTokenizer

        return HFTokenizer
    return SentencePieceTokenizer


def _check_kind(kind: str) -> None:
    if kind not in TOKENIZER_KINDS:
        near = difflib.get_close_matches(str(kind), TOKENIZER_KINDS, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise TokenizerError(f"unknown tokenizer kind {kind!r}{hint} (valid: {', '.join(TOKENIZER_KINDS)})")


def train_tokenizer(kind: str, texts: Iterable[str], vocab_size: int | None = None, *,
                    normalizer: TextNormalizer = IDENTITY, **options: Any) -> Tokenizer:
    """Train a tokenizer of ``kind`` on ``texts`` (an iterable of strings, read once).

    Args:
        kind: char | word | bpe | unigram.
        texts: training text, one string per sentence or line.
        vocab_size: bpe/unigram: the target size (required, a soft limit).
            char/word: the most ids to keep (None keeps every piece seen). Specials included.
        options: char/word: ``min_freq``. bpe/unigram: ``character_coverage``,
            ``byte_fallback``, ``remove_extra_whitespaces`` (see ``SentencePieceTokenizer.train``).
            Unknown options are rejected.
        normalizer: applied to ``texts`` before training and kept by the tokenizer, whose
            ``encode`` applies it to every text (saved in the manifest).
    """
    _check_kind(kind)
    cls, valid = _tokenizer_class(kind), _OPTIONS[kind]
    for name in options:
        if name not in valid:
            near = difflib.get_close_matches(name, valid, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise TokenizerError(f"unknown option {name!r} for the {kind} tokenizer{hint} "
                                 f"(valid: {', '.join(valid) or 'none'})")
    if not normalizer.identity:
        texts = map(normalizer, texts)
    if kind in ("bpe", "unigram"):
        if vocab_size is None:
            raise TokenizerError(f"the {kind} tokenizer needs a vocab_size (e.g. 8000; smaller for small corpora)")
        tokenizer = cls.train(texts, vocab_size, kind=kind, **options)
    else:
        tokenizer = cls.train(texts, vocab_size, **options)
    tokenizer.normalizer = normalizer
    return tokenizer


def train_pair(
    kind: str,
    src_texts: Iterable[str],
    tgt_texts: Iterable[str],
    vocab_size: int | None = None,
    *,
    joint: bool = True,
    **options: Any,
) -> tuple[Tokenizer, Tokenizer]:
    """Source and target tokenizers for translation.

    ``joint=True`` trains one tokenizer on source then target text and returns it
    twice (``src is tgt``), so the two sides share one vocabulary. ``joint=False``
    trains one per side, each with ``vocab_size``.
    """
    if joint:
        tokenizer = train_tokenizer(kind, _chain(src_texts, tgt_texts), vocab_size, **options)
        return tokenizer, tokenizer
    return (train_tokenizer(kind, src_texts, vocab_size, **options),
            train_tokenizer(kind, tgt_texts, vocab_size, **options))


def _chain(*iterables: Iterable[str]) -> Iterable[str]:
    for iterable in iterables:
        yield from iterable


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a tokenizer saved by ``Tokenizer.save``: ``path`` is its directory or its manifest (a ``.json`` file)."""
    path = Path(path)
    manifest_path = path if path.suffix == ".json" else path / MANIFEST
    if not manifest_path.is_file():
        raise TokenizerError(f"tokenizer manifest not found: {manifest_path} "
                             f"(expected the {MANIFEST} that Tokenizer.save writes; check the run directory)")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise TokenizerError(f"{manifest_path}: not a valid tokenizer manifest ({err})") from err
    if not isinstance(manifest, dict) or "kind" not in manifest:
        raise TokenizerError(f"{manifest_path}: the manifest has no 'kind' (valid: {', '.join(TOKENIZER_KINDS)})")
    version = manifest.get("format", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise TokenizerError(f"{manifest_path}: format {version!r} is newer than this seqmap "
                             f"reads ({FORMAT_VERSION}); upgrade seqmap")
    kind = manifest["kind"]
    try:
        if kind != LOADED_ONLY:
            _check_kind(kind)
    except TokenizerError as err:
        raise TokenizerError(f"{manifest_path}: {err}") from None
    tokenizer = _tokenizer_class(kind)._from_files(manifest_path.parent, manifest)
    try:
        tokenizer.normalizer = TextNormalizer.from_dict(manifest.get("normalizer"))
    except ValueError as err:
        raise TokenizerError(f"{manifest_path}: {err}") from None
    return tokenizer


def save_pair(src: Tokenizer, tgt: Tokenizer, directory: str | Path) -> None:
    """Save translation tokenizers: a joint one (``src is tgt``) in ``directory``, else in ``src/`` and ``tgt/``."""
    directory = Path(directory)
    if src is tgt:
        src.save(directory)
    else:
        src.save(directory / "src")
        tgt.save(directory / "tgt")


def load_pair(directory: str | Path) -> tuple[Tokenizer, Tokenizer]:
    """Load what ``save_pair`` wrote: ``(tokenizer, tokenizer)`` when joint, else ``(src, tgt)``."""
    directory = Path(directory)
    if (directory / MANIFEST).is_file():
        tokenizer = load_tokenizer(directory)
        return tokenizer, tokenizer
    if not (directory / "src" / MANIFEST).is_file():
        raise TokenizerError(f"no tokenizers in {directory}: expected {MANIFEST} (joint) "
                             f"or src/{MANIFEST} and tgt/{MANIFEST} (separate)")
    return load_tokenizer(directory / "src"), load_tokenizer(directory / "tgt")
