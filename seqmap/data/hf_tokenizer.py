"""A pretrained model's own tokenizer behind seqmap's one ``Tokenizer`` interface (kind ``hf``), from either

* a Hugging Face ``tokenizers`` file (``tokenizer.json``: GPT-2's byte-level BPE, BERT's WordPiece, ...), or
* Marian's files (OPUS-MT): a sentencepiece model that cuts text into pieces and a ``vocab.json`` that
  numbers the pieces (``source.spm`` for the source side, ``target.spm`` for the target side).

seqmap reserves ids 0-3 for PAD, BOS, EOS and UNK; a pretrained vocabulary puts its own special tokens
anywhere (GPT-2: ``<|endoftext|>`` = 50256). The mapping is fixed and invertible: each special token the
model uses for one of seqmap's roles takes that reserved id, and every other id keeps its order after
them:

    seqmap id = ROLE[hf id]                       for the hf ids in ``roles``
              = 4 + hf id - (roles below hf id)   otherwise

so the importer (``seqmap.hub``) moves embedding rows with the same function. Reserved ids with no hf
token (GPT-2 has no PAD) have no row in the pretrained table; decoding never emits PAD, BOS or UNK.
The ``tokenizers`` package comes with the ``hf`` extra (``pip install -e ".[hf]"``).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from seqmap.data.tokenizer_base import BOS, EOS, PAD, UNK, UNK_SURFACE, Tokenizer, TokenizerError, existing_file

HF_FILE = "hf_tokenizer.json"
ROLES = {"pad": PAD, "bos": BOS, "eos": EOS, "unk": UNK}
N_RESERVED = 4


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise TokenizerError("this run's tokenizer is a Hugging Face tokenizer, which needs the tokenizers "
                             "package: pip install -e \".[hf]\"") from None
    return tokenizers


class TokenizersBackend:
    """A ``tokenizers.Tokenizer`` (``tokenizer.json``)."""

    name = "tokenizers"

    def __init__(self, tok):
        self.tok = tok

    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        enc = self.tok.encode(text, add_special_tokens=False)
        return list(enc.ids), list(enc.tokens)

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False)

    def id_to_token(self, i: int) -> str:
        return self.tok.id_to_token(i)

    def save(self, directory: Path) -> dict[str, Any]:
        self.tok.save(str(directory / HF_FILE))
        return {"file": HF_FILE}

    def state(self) -> str:
        return self.tok.to_str()

    @classmethod
    def load(cls, directory: Path, manifest: dict[str, Any]) -> TokenizersBackend:
        path = existing_file(directory / manifest.get("file", HF_FILE), directory)
        return cls(_tokenizers().Tokenizer.from_file(str(path)))


class MarianBackend:
    """Marian's tokenization: sentencepiece pieces, numbered by ``vocab.json`` (a piece not in it is ``unk``)."""

    name = "marian"

    def __init__(self, spm_bytes: bytes, vocab: dict[str, int], unk: str):
        import sentencepiece as spm

        self.spm_bytes, self.vocab, self.unk = spm_bytes, vocab, unk
        self.sp = spm.SentencePieceProcessor(model_proto=spm_bytes)
        self.inverse = {i: p for p, i in vocab.items()}
        if len(self.inverse) != len(vocab) or sorted(self.inverse) != list(range(len(vocab))):
            raise TokenizerError("vocab.json must number its pieces 0..N-1, each id once")

    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        pieces = self.sp.encode(text, out_type=str)
        return [self.vocab.get(p, self.vocab[self.unk]) for p in pieces], pieces

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode_pieces([self.inverse[i] for i in ids])

    def id_to_token(self, i: int) -> str:
        return self.inverse[i]

    def save(self, directory: Path) -> dict[str, Any]:
        (directory / "marian.spm").write_bytes(self.spm_bytes)
        (directory / "vocab.json").write_text(json.dumps(self.vocab, ensure_ascii=False), encoding="utf-8")
        return {"spm": "marian.spm", "vocab": "vocab.json", "unk": self.unk}

    def state(self) -> str:
        return self.spm_bytes.hex() + json.dumps(self.vocab, sort_keys=True)

    @classmethod
    def load(cls, directory: Path, manifest: dict[str, Any]) -> MarianBackend:
        spm_path = existing_file(directory / manifest.get("spm", "marian.spm"), directory)
        vocab_path = existing_file(directory / manifest.get("vocab", "vocab.json"), directory)
        return cls(spm_path.read_bytes(), json.loads(vocab_path.read_text(encoding="utf-8")), manifest["unk"])

    @classmethod
    def from_files(cls, spm_path: Path, vocab_path: Path, unk: str) -> MarianBackend:
        for path in (spm_path, vocab_path):
            if not path.is_file():
                raise TokenizerError(f"tokenizer file not found: {path}")
        try:
            vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TokenizerError(f"{vocab_path} is not a JSON vocabulary ({e})") from None
        if not isinstance(vocab, dict) or unk not in vocab:
            raise TokenizerError(f"{vocab_path} must map pieces to ids and hold the unknown piece {unk!r}")
        try:
            return cls(spm_path.read_bytes(), vocab, unk)
        except RuntimeError as e:  # sentencepiece cannot parse the model
            raise TokenizerError(f"{spm_path} is not a sentencepiece model ({' '.join(str(e).split())})") from None


BACKENDS = {b.name: b for b in (TokenizersBackend, MarianBackend)}


class HFTokenizer(Tokenizer):
    """A pretrained tokenizer (a backend above) with its special tokens mapped onto seqmap's reserved ids.

    Args:
        backend: a ``TokenizersBackend`` or a ``MarianBackend`` (or a ``tokenizers.Tokenizer``).
        roles: {"eos": hf id, "pad": hf id, ...}: which hf token plays which of seqmap's roles.
        prompt: how a prompt starts for a language model: "text" (the text's ids alone, GPT-2's convention;
            an empty prompt is EOS) or "eos" (EOS, then the text).
        append_eos: every encoded text ends with EOS (Marian's source side: its encoder read ``</s>`` last).
    """

    kind = "hf"

    def __init__(self, backend, roles: dict[str, int], prompt: str = "text", append_eos: bool = False):
        if not hasattr(backend, "encode") or not hasattr(backend, "state"):
            backend = TokenizersBackend(backend)
        unknown = set(roles) - set(ROLES)
        if unknown:
            raise TokenizerError(f"unknown special role(s) {sorted(unknown)}; roles are {', '.join(ROLES)}")
        by_hf: dict[int, int] = {}
        for role, hf_id in roles.items():
            by_hf.setdefault(int(hf_id), ROLES[role])  # one hf token in several roles (GPT-2): the first listed
        self.backend = backend
        self.roles = {role: int(i) for role, i in roles.items()}
        self.prompt, self.append_eos = prompt, append_eos
        self._to_seqmap = by_hf
        self._from_seqmap = {v: k for k, v in by_hf.items()}
        self._special_hf = sorted(by_hf)
        self.hf_vocab = backend.vocab_size()
        if any(not 0 <= i < self.hf_vocab for i in by_hf):
            raise TokenizerError(f"special token ids {sorted(by_hf)} are outside the vocabulary "
                                 f"(0..{self.hf_vocab - 1})")

    # -- the id mapping ---------------------------------------------------------------------------
    def to_seqmap(self, hf_id: int) -> int:
        if hf_id in self._to_seqmap:
            return self._to_seqmap[hf_id]
        return N_RESERVED + hf_id - bisect.bisect_left(self._special_hf, hf_id)

    def to_hf(self, i: int) -> int | None:
        """The hf id of seqmap id ``i`` (None for a reserved id no hf token plays)."""
        if i < N_RESERVED:
            return self._from_seqmap.get(i)
        k = i - N_RESERVED  # the k-th (from 0) non-special hf id: the smallest h with k + 1 non-special ids in 0..h
        lo, hi = k, k + len(self._special_hf)
        while lo < hi:
            mid = (lo + hi) // 2
            if mid + 1 - bisect.bisect_right(self._special_hf, mid) < k + 1:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def hf_ids(self) -> list[int | None]:
        """For every seqmap id in order, its hf id (None where none): the row order of the imported tables."""
        return [self.to_hf(i) for i in range(self.vocab_size)]

    @property
    def vocab_size(self) -> int:
        return N_RESERVED + self.hf_vocab - len(self._special_hf)

    # -- the Tokenizer interface ------------------------------------------------------------------
    @property
    def tok(self):
        """The ``tokenizers.Tokenizer`` of a tokenizers backend."""
        return self.backend.tok

    def _encode(self, text: str) -> list[int]:
        ids = [self.to_seqmap(i) for i in self.backend.encode(text)[0]]
        return [*ids, EOS] if self.append_eos else ids

    def _tokens(self, text: str) -> list[str]:
        pieces = self.backend.encode(text)[1]
        return [*pieces, self.pieces([EOS])[0]] if self.append_eos else pieces

    def decode(self, ids: Iterable[int]) -> str:
        parts: list[str] = []
        run: list[int] = []
        for i in ids:
            i = self._check_id(int(i))
            if i in (PAD, BOS, EOS):
                continue
            hf = self.to_hf(i)
            if hf is None:  # UNK with no hf token of its own
                if run:
                    parts.append(self.backend.decode(run))
                    run = []
                parts.append(UNK_SURFACE)
            else:
                run.append(hf)
        if run:
            parts.append(self.backend.decode(run))
        return "".join(parts)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        names = {PAD: "<pad>", BOS: "<s>", EOS: "</s>", UNK: "<unk>"}
        out = []
        for i in ids:
            i = self._check_id(int(i))
            hf = self.to_hf(i)
            out.append(names[i] if hf is None else self.backend.id_to_token(hf))
        return out

    def lm_prompt_ids(self, text: str) -> list[int]:
        """A language model's prompt (see ``prompt``)."""
        ids = self.encode(text)
        return ([EOS, *ids] if self.prompt == "eos" else ids) or [EOS]

    # -- files --------------------------------------------------------------------------------------
    def _write_files(self, directory: Path) -> dict[str, Any]:
        return {"backend": self.backend.name, **self.backend.save(directory), "roles": self.roles,
                "prompt": self.prompt, "append_eos": self.append_eos}

    @classmethod
    def _from_files(cls, directory: Path, manifest: dict[str, Any]) -> HFTokenizer:
        backend = BACKENDS.get(manifest.get("backend", "tokenizers"))
        if backend is None:
            raise TokenizerError(f"{directory}: unknown backend {manifest.get('backend')!r} "
                                 f"(known: {', '.join(BACKENDS)})")
        return cls(backend.load(directory, manifest), manifest.get("roles", {}), manifest.get("prompt", "text"),
                   bool(manifest.get("append_eos", False)))

    @classmethod
    def from_file(cls, path: str | Path, roles: dict[str, int], prompt: str = "text") -> HFTokenizer:
        """Load a ``tokenizer.json`` written by ``tokenizers`` / ``transformers``."""
        path = Path(path)
        if not path.is_file():
            raise TokenizerError(f"tokenizer file not found: {path}")
        try:
            tok = _tokenizers().Tokenizer.from_file(str(path))
        except Exception as e:  # the tokenizers package raises its own Exception type on a malformed file
            raise TokenizerError(f"{path} is not a tokenizers tokenizer.json ({' '.join(str(e).split())})") from None
        return cls(TokenizersBackend(tok), roles, prompt)

    def _state(self) -> bytes:
        return (self.backend.name + self.backend.state() + json.dumps(self.roles, sort_keys=True) + self.prompt
                + str(self.append_eos)).encode()
