"""The sentencepiece tokenizer: subwords (BPE or unigram) from a sentencepiece model trained in memory.

``SentencePieceTokenizer`` implements the ``Tokenizer`` interface of ``tokenizer_base.py`` (same special
ids and pieces, same ``UNK_SURFACE``); train it through ``train_tokenizer("bpe" | "unigram", ...)``.
This module also turns sentencepiece's training errors into advice on what to change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import sentencepiece as spm

from seqmap.data.tokenizer_base import (
    BOS,
    EOS,
    PAD,
    SPECIAL_PIECES,
    UNK,
    UNK_SURFACE,
    Tokenizer,
    TokenizerError,
    existing_file,
)


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
        split_digits: bool = False,
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
                (adds 256 pieces), so every character round-trips.
            split_digits: every digit its own piece (numbers are spelled digit by digit).
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
            "split_digits": split_digits,
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

    def _encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def encode_batch(self, texts: list[str], threads: int = 1) -> list[list[int]]:
        if not self.normalizer.identity:
            texts = [self.normalizer(text) for text in texts]
        return self._sp.encode(texts, num_threads=threads)

    def decode(self, ids: Iterable[int]) -> str:
        # sentencepiece itself renders PAD/BOS/EOS (control pieces) as nothing and UNK as unk_surface
        return self._sp.decode([self._check_id(int(i)) for i in ids])

    def _tokens(self, text: str) -> list[str]:
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
        path = existing_file(directory / manifest.get("model_file", cls.MODEL_FILE), directory)
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
