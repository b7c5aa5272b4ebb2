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
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import sentencepiece as spm

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIAL_PIECES = ("<pad>", "<s>", "</s>", "<unk>")  # the pieces of ids 0-3, in order
UNK_SURFACE = "\u2047"  # "⁇": what UNK decodes to (sentencepiece's own marker)
MANIFEST = "tokenizer.json"
FORMAT_VERSION = 1
TOKENIZER_KINDS = ("char", "word", "bpe", "unigram")


class TokenizerError(ValueError):
    """A tokenizer cannot be trained, loaded or used as asked; the message says what to change."""


class Tokenizer(ABC):
    """Text <-> token ids. Subclasses set ``kind`` and implement the abstract methods."""

    kind: str

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, the four specials included (ids are ``0 .. vocab_size - 1``)."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; no BOS or EOS is added."""

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; PAD, BOS and EOS are skipped wherever they occur, UNK becomes ``UNK_SURFACE``."""

    @abstractmethod
    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text``, one per id of ``encode(text)`` (unknown pieces keep their surface)."""

    @abstractmethod
    def pieces(self, ids: Iterable[int]) -> list[str]:
        """The vocabulary piece of each id, specials included (labels for attention plots of model output)."""

    @abstractmethod
    def _write_files(self, directory: Path) -> dict[str, Any]:
        """Write the tokenizer's own files into ``directory``; return the manifest fields that find them."""

    @classmethod
    @abstractmethod
    def _from_files(cls, directory: Path, manifest: dict[str, Any]) -> Tokenizer:
        """Rebuild a tokenizer from the files that ``_write_files`` wrote."""

    @abstractmethod
    def _state(self) -> bytes:
        """Bytes that determine every encoding (hashed by ``fingerprint``)."""

    def save(self, directory: str | Path) -> Path:
        """Write the tokenizer's files and ``tokenizer.json`` into ``directory`` (created); return the manifest."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        manifest = {
            "kind": self.kind,
            "format": FORMAT_VERSION,
            "vocab_size": self.vocab_size,
            "specials": dict(zip(SPECIAL_PIECES, (PAD, BOS, EOS, UNK), strict=True)),
            **self._write_files(directory),
        }
        path = directory / MANIFEST
        path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    def fingerprint(self) -> str:
        """A hex digest that changes whenever any encoding could change (keys the token cache)."""
        return hashlib.sha256(self.kind.encode() + b"\0" + self._state()).hexdigest()

    def _check_id(self, i: int) -> int:
        if not 0 <= i < self.vocab_size:
            raise TokenizerError(f"token id {i} is outside this {self.kind} tokenizer's vocabulary "
                                 f"(0..{self.vocab_size - 1}); was the model built with a larger vocab_size?")
        return i

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, vocab_size={self.vocab_size})"


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

    def encode(self, text: str) -> list[int]:
        return [self._index.get(p, UNK) for p in self._split(text)]

    def decode(self, ids: Iterable[int]) -> str:
        out = []
        for i in ids:
            i = self._check_id(int(i))
            if i not in (PAD, BOS, EOS):
                out.append(UNK_SURFACE if i == UNK else self._pieces[i])
        return self._join(out)

    def tokens(self, text: str) -> list[str]:
        return self._split(text)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self._pieces[self._check_id(int(i))] for i in ids]

    def _write_files(self, directory: Path) -> dict[str, Any]:
        text = json.dumps(self._pieces, ensure_ascii=False, indent=0)
        (directory / self.VOCAB_FILE).write_text(text + "\n", encoding="utf-8")
        return {"vocab_file": self.VOCAB_FILE}

    @classmethod
    def _from_files(cls, directory: Path, manifest: dict[str, Any]) -> _VocabTokenizer:
        path = _existing(directory / manifest.get("vocab_file", cls.VOCAB_FILE), directory)
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


class SentencePieceTokenizer(Tokenizer):
    """Subwords from a trained sentencepiece model: ``kind`` is ``bpe`` or ``unigram``."""

    MODEL_FILE: ClassVar[str] = "spm.model"
    VOCAB_FILE: ClassVar[str] = "spm.vocab"  # pieces and scores, for people (never read back)

    def __init__(self, model_proto: bytes, kind: str, options: dict[str, Any] | None = None) -> None:
        if kind not in ("bpe", "unigram"):
            raise TokenizerError(f"a sentencepiece tokenizer is 'bpe' or 'unigram', got {kind!r}")
        self.kind = kind
        self.options = dict(options or {})  # the training options, recorded in the manifest
        self._proto = model_proto
        self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
        specials = [self._sp.id_to_piece(i) for i in (PAD, BOS, EOS, UNK)]
        if tuple(specials) != SPECIAL_PIECES:
            raise TokenizerError(f"sentencepiece model has specials {specials} at ids 0-3, expected "
                                 f"{list(SPECIAL_PIECES)}; train it with seqmap's train_tokenizer")

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        *,
        kind: str,
        character_coverage: float = 1.0,
        byte_fallback: bool = False,
        remove_extra_whitespaces: bool = True,
    ) -> SentencePieceTokenizer:
        """Train a sentencepiece model in memory.

        Args:
            texts: training text, one string per sentence or line.
            vocab_size: the target size, specials included. A soft limit: a small corpus
                may give fewer pieces instead of failing.
            kind: ``bpe`` or ``unigram``.
            character_coverage: share of characters (by frequency) that get their own
                piece; the rest become UNK. 1.0 suits alphabets; 0.9995 suits Chinese/Japanese.
            byte_fallback: spell unknown characters as UTF-8 byte pieces instead of UNK
                (adds 256 pieces).
            remove_extra_whitespaces: strip leading/trailing spaces and collapse runs of
                spaces (sentencepiece's default); False keeps every space.
        """
        if not isinstance(vocab_size, int) or vocab_size <= len(SPECIAL_PIECES):
            raise TokenizerError(f"{kind} tokenizer needs vocab_size > {len(SPECIAL_PIECES)}, got {vocab_size!r}")
        if not 0.0 < character_coverage <= 1.0:
            raise TokenizerError(f"character_coverage must be in (0, 1], got {character_coverage}")
        options = {
            "character_coverage": character_coverage,
            "byte_fallback": byte_fallback,
            "remove_extra_whitespaces": remove_extra_whitespaces,
        }
        model = _BytesSink()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(texts),
                model_writer=model,
                model_type=kind,
                vocab_size=vocab_size,
                hard_vocab_limit=False,  # a small corpus gives a smaller vocabulary instead of an error
                pad_id=PAD, bos_id=BOS, eos_id=EOS, unk_id=UNK,
                pad_piece=SPECIAL_PIECES[PAD], bos_piece=SPECIAL_PIECES[BOS],
                eos_piece=SPECIAL_PIECES[EOS], unk_piece=SPECIAL_PIECES[UNK],
                unk_surface=UNK_SURFACE,
                normalization_rule_name="identity",  # exact detokenization (NFKC would rewrite full-width text)
                max_sentence_length=1 << 16,  # bytes; sentencepiece skips longer lines (default 4192)
                minloglevel=2,
                **options,
            )
        except RuntimeError as err:
            raise TokenizerError(_training_advice(str(err), kind, vocab_size, character_coverage)) from err
        return cls(model.data, kind, options)

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def decode(self, ids: Iterable[int]) -> str:
        # sentencepiece itself renders PAD/BOS/EOS (control pieces) as nothing and UNK as unk_surface
        return self._sp.decode([self._check_id(int(i)) for i in ids])

    def tokens(self, text: str) -> list[str]:
        return self._sp.encode(text, out_type=str)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        return [self._sp.id_to_piece(self._check_id(int(i))) for i in ids]

    def _write_files(self, directory: Path) -> dict[str, Any]:
        (directory / self.MODEL_FILE).write_bytes(self._proto)
        lines = (f"{self._sp.id_to_piece(i)}\t{self._sp.get_score(i)}" for i in range(self.vocab_size))
        (directory / self.VOCAB_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
        return {"model_file": self.MODEL_FILE, "options": self.options}

    @classmethod
    def _from_files(cls, directory: Path, manifest: dict[str, Any]) -> SentencePieceTokenizer:
        path = _existing(directory / manifest.get("model_file", cls.MODEL_FILE), directory)
        try:
            return cls(path.read_bytes(), manifest["kind"], manifest.get("options"))
        except RuntimeError as err:  # sentencepiece could not parse the file
            raise TokenizerError(f"{path}: not a sentencepiece model ({err}); save the tokenizer again") from err

    def _state(self) -> bytes:
        return self._proto


class _BytesSink:
    """The ``model_writer`` sentencepiece writes the trained model to."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


def _training_advice(message: str, kind: str, vocab_size: int, character_coverage: float) -> str:
    """Turn a sentencepiece training error into what to change."""
    head = f"training the {kind} tokenizer (vocab_size={vocab_size}) failed"
    if "smaller than required_chars" in message:
        counts = re.search(r"(\d+) vs (\d+)", message)
        needed = f" (its characters and the specials need {counts[2]})" if counts else ""
        return (f"{head}: the text has more distinct characters than vocab_size allows{needed}. "
                f"Raise vocab_size, or lower character_coverage (now {character_coverage}; 0.9995 suits Chinese)")
    if "sentences_.empty()" in message:
        return f"{head}: the training text is empty; check the training files"
    return f"{head}: {message.strip()}. If the corpus is small, lower vocab_size"


_TRAINERS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "char": (CharTokenizer, ("min_freq",)),
    "word": (WordTokenizer, ("min_freq",)),
    "bpe": (SentencePieceTokenizer, ("character_coverage", "byte_fallback", "remove_extra_whitespaces")),
    "unigram": (SentencePieceTokenizer, ("character_coverage", "byte_fallback", "remove_extra_whitespaces")),
}


def _check_kind(kind: str) -> None:
    if kind not in TOKENIZER_KINDS:
        near = difflib.get_close_matches(str(kind), TOKENIZER_KINDS, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise TokenizerError(f"unknown tokenizer kind {kind!r}{hint} (valid: {', '.join(TOKENIZER_KINDS)})")


def train_tokenizer(kind: str, texts: Iterable[str], vocab_size: int | None = None, **options: Any) -> Tokenizer:
    """Train a tokenizer of ``kind`` on ``texts`` (an iterable of strings, read once).

    Args:
        kind: char | word | bpe | unigram.
        texts: training text, one string per sentence or line.
        vocab_size: bpe/unigram: the target size (required, a soft limit).
            char/word: the most ids to keep (None keeps every piece seen). Specials included.
        options: char/word: ``min_freq``. bpe/unigram: ``character_coverage``,
            ``byte_fallback``, ``remove_extra_whitespaces`` (see ``SentencePieceTokenizer.train``).
            Unknown options are rejected.
    """
    _check_kind(kind)
    cls, valid = _TRAINERS[kind]
    for name in options:
        if name not in valid:
            near = difflib.get_close_matches(name, valid, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise TokenizerError(f"unknown option {name!r} for the {kind} tokenizer{hint} "
                                 f"(valid: {', '.join(valid) or 'none'})")
    if cls is SentencePieceTokenizer:
        if vocab_size is None:
            raise TokenizerError(f"the {kind} tokenizer needs a vocab_size (e.g. 8000; smaller for small corpora)")
        return cls.train(texts, vocab_size, kind=kind, **options)
    return cls.train(texts, vocab_size, **options)


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
        _check_kind(kind)
    except TokenizerError as err:
        raise TokenizerError(f"{manifest_path}: {err}") from None
    cls, _ = _TRAINERS[kind]
    return cls._from_files(manifest_path.parent, manifest)


def _existing(path: Path, directory: Path) -> Path:
    if not path.is_file():
        raise TokenizerError(f"tokenizer file not found: {path} (named by {directory / MANIFEST})")
    return path


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
