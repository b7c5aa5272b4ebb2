"""The tokenizer interface every kind implements, and the four reserved ids they all share.

    PAD = 0   padding
    BOS = 1   begin of sequence (added by batching, never by ``encode``)
    EOS = 2   end of sequence   (likewise)
    UNK = 3   a piece the vocabulary does not hold

The kinds (``char``, ``word`` in ``tokenizers.py``; ``bpe``, ``unigram`` in
``sentencepiece_tokenizer.py``) build on this module, and ``tokenizers.py`` is where
callers train, save and load them; it re-exports every name here.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from seqmap.data.normalize import IDENTITY, TextNormalizer

PAD, BOS, EOS, UNK = 0, 1, 2, 3
NEVER_GENERATED = (PAD, BOS, UNK)  # ids that decoding of text never emits (banned in greedy, beam and sampling)
SPECIAL_PIECES = ("<pad>", "<s>", "</s>", "<unk>")  # the pieces of ids 0-3, in order
UNK_SURFACE = "\u2047"  # "⁇": what UNK decodes to (sentencepiece's own marker)
MANIFEST = "tokenizer.json"
FORMAT_VERSION = 1


class TokenizerError(ValueError):
    """A tokenizer cannot be trained, loaded or used as asked; the message says what to change."""


class Tokenizer(ABC):
    """Text <-> token ids. Subclasses set ``kind`` and implement the abstract methods."""

    kind: str
    normalizer: TextNormalizer = IDENTITY  # applied by encode and tokens (set per instance by train_tokenizer)

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, the four specials included (ids are ``0 .. vocab_size - 1``)."""

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (normalized first); no BOS or EOS is added."""
        return self._encode(self.normalizer(text))

    def encode_batch(self, texts: list[str], threads: int = 1) -> list[list[int]]:
        """``encode`` of each text; a tokenizer with a threaded encoder (sentencepiece) uses ``threads``."""
        normalize = self.normalizer
        return [self._encode(normalize(text)) for text in texts]

    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text`` (normalized first), one per id of ``encode(text)``."""
        return self._tokens(self.normalizer(text))

    @abstractmethod
    def _encode(self, text: str) -> list[int]:
        """Token ids of already normalized ``text``."""

    @abstractmethod
    def _tokens(self, text: str) -> list[str]:
        """Pieces of already normalized ``text`` (unknown pieces keep their surface)."""

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; PAD, BOS and EOS are skipped wherever they occur, UNK becomes ``UNK_SURFACE``."""

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
        if not self.normalizer.identity:
            manifest["normalizer"] = self.normalizer.to_dict()
        path = directory / MANIFEST
        path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    def fingerprint(self) -> str:
        """A hex digest that changes whenever any encoding could change (keys the token cache)."""
        norm = b"" if self.normalizer.identity else json.dumps(self.normalizer.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(self.kind.encode() + b"\0" + self._state() + norm).hexdigest()

    def _check_id(self, i: int) -> int:
        if not 0 <= i < self.vocab_size:
            raise TokenizerError(f"token id {i} is outside this {self.kind} tokenizer's vocabulary "
                                 f"(0..{self.vocab_size - 1}); was the model built with a larger vocab_size?")
        return i

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, vocab_size={self.vocab_size})"


def existing_file(path: Path, directory: Path) -> Path:
    if not path.is_file():
        raise TokenizerError(f"tokenizer file not found: {path} (named by {directory / MANIFEST})")
    return path
