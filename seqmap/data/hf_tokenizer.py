"""A Hugging Face ``tokenizers`` tokenizer (``tokenizer.json``: GPT-2's byte-level BPE, BERT's WordPiece, ...)
behind seqmap's one ``Tokenizer`` interface (kind ``hf``).

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


class HFTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` with its special tokens mapped onto seqmap's reserved ids (see the module doc).

    Args:
        tokenizer: the ``tokenizers.Tokenizer``.
        roles: {"eos": hf id, "pad": hf id, ...}: which hf token plays which of seqmap's roles (each at most once).
        prompt: how a prompt starts for a language model: "text" (the text's ids alone, GPT-2's convention;
            an empty prompt is EOS) or "eos" (EOS, then the text).
    """

    kind = "hf"

    def __init__(self, tokenizer, roles: dict[str, int], prompt: str = "text"):
        unknown = set(roles) - set(ROLES)
        if unknown:
            raise TokenizerError(f"unknown special role(s) {sorted(unknown)}; roles are {', '.join(ROLES)}")
        by_hf: dict[int, int] = {}
        for role, hf_id in roles.items():
            by_hf.setdefault(int(hf_id), ROLES[role])  # one hf token in several roles (GPT-2): the first listed
        self.tok = tokenizer
        self.roles = {role: int(i) for role, i in roles.items()}
        self.prompt = prompt
        self._to_seqmap = by_hf
        self._from_seqmap = {v: k for k, v in by_hf.items()}
        self._special_hf = sorted(by_hf)
        self.hf_vocab = tokenizer.get_vocab_size(with_added_tokens=True)
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
    def _encode(self, text: str) -> list[int]:
        return [self.to_seqmap(i) for i in self.tok.encode(text, add_special_tokens=False).ids]

    def _tokens(self, text: str) -> list[str]:
        return list(self.tok.encode(text, add_special_tokens=False).tokens)

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
                    parts.append(self.tok.decode(run, skip_special_tokens=False))
                    run = []
                parts.append(UNK_SURFACE)
            else:
                run.append(hf)
        if run:
            parts.append(self.tok.decode(run, skip_special_tokens=False))
        return "".join(parts)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        names = {PAD: "<pad>", BOS: "<s>", EOS: "</s>", UNK: "<unk>"}
        out = []
        for i in ids:
            i = self._check_id(int(i))
            hf = self.to_hf(i)
            out.append(names[i] if hf is None else self.tok.id_to_token(hf))
        return out

    def lm_prompt_ids(self, text: str) -> list[int]:
        """A language model's prompt (see ``prompt``)."""
        ids = self.encode(text)
        return ([EOS, *ids] if self.prompt == "eos" else ids) or [EOS]

    # -- files --------------------------------------------------------------------------------------
    def _write_files(self, directory: Path) -> dict[str, Any]:
        self.tok.save(str(directory / HF_FILE))
        return {"file": HF_FILE, "roles": self.roles, "prompt": self.prompt}

    @classmethod
    def _from_files(cls, directory: Path, manifest: dict[str, Any]) -> HFTokenizer:
        path = existing_file(directory / manifest.get("file", HF_FILE), directory)
        return cls(_tokenizers().Tokenizer.from_file(str(path)), manifest.get("roles", {}),
                   manifest.get("prompt", "text"))

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
        return cls(tok, roles, prompt)

    def _state(self) -> bytes:
        return (self.tok.to_str() + json.dumps(self.roles, sort_keys=True) + self.prompt).encode()
