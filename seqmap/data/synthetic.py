"""Synthetic sequence-to-sequence tasks: copy, reverse and sort.

The classic toy tasks for checking that a sequence model learns anything at all.
A source is a random string of symbols; the target is the same string (copy),
backwards (reverse) or in ascending order (sort). The data is a pure function of
the seed, so a held-out set is simply another seed.

Token ids: ``PAD = 0``, ``BOS = 1``, ``EOS = 2`` are reserved; symbols are
``3 .. vocab - 1``. Batches are the ``Batch`` of ``batching.py`` that real data
gives, right-padded with ``PAD``; masks follow the package convention (True = a real token).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seqmap.data.batching import Batch
from seqmap.data.tokenizers import BOS, EOS, PAD  # the one definition of the reserved ids

N_SPECIALS = 3  # ids below this are specials; symbols start here
TASKS = ("copy", "reverse", "sort")


@dataclass(frozen=True)
class SyntheticTask:
    """A toy task: which transformation, how many symbols, how long the strings.

    Args:
        task: copy | reverse | sort.
        vocab: vocabulary size V, specials included (symbols are ``3 .. V - 1``).
        min_len: shortest source, in symbols.
        max_len: longest source, in symbols.
    """

    task: str = "reverse"
    vocab: int = 20
    min_len: int = 5
    max_len: int = 12

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; choose one of {list(TASKS)}")
        if self.vocab <= N_SPECIALS:
            raise ValueError(f"vocab={self.vocab} leaves no symbols; it must be > {N_SPECIALS} (ids 0-2 are specials)")
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(f"need 1 <= min_len <= max_len, got min_len={self.min_len}, max_len={self.max_len}")

    def sources(self, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Random sources: (B, S) symbols padded with PAD, and (B,) lengths."""
        lengths = torch.randint(self.min_len, self.max_len + 1, (batch_size,), generator=generator)
        width = int(lengths.max())
        symbols = torch.randint(N_SPECIALS, self.vocab, (batch_size, width), generator=generator)
        mask = torch.arange(width)[None, :] < lengths[:, None]  # (B, S)
        return symbols.masked_fill(~mask, PAD), lengths

    def targets(self, src: Tensor, lengths: Tensor) -> Tensor:
        """(B, S) targets for padded sources (all three tasks keep the length)."""
        width = src.size(1)
        mask = torch.arange(width)[None, :] < lengths[:, None]  # (B, S)
        if self.task == "copy":
            return src.clone()
        if self.task == "reverse":
            # position i of the target is position (len - 1 - i) of the source
            index = (lengths[:, None] - 1 - torch.arange(width)[None, :]).clamp(min=0)
            return src.gather(1, index).masked_fill(~mask, PAD)
        # sort: push padding past every symbol, sort, then restore PAD
        big = torch.full_like(src, self.vocab)
        return torch.where(mask, src, big).sort(dim=1).values.masked_fill(~mask, PAD)

    def batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        """One random batch, drawn from ``generator``."""
        src, lengths = self.sources(batch_size, generator)
        tgt = self.targets(src, lengths)
        width = src.size(1)
        rows = torch.arange(batch_size)
        tgt_in = torch.full((batch_size, width + 1), PAD, dtype=torch.long)
        tgt_in[:, 0] = BOS
        tgt_in[:, 1:] = tgt
        tgt_out = torch.full((batch_size, width + 1), PAD, dtype=torch.long)
        tgt_out[:, :width] = tgt
        tgt_out[rows, lengths] = EOS
        tgt_mask = tgt_out != PAD  # (B, T): target + EOS
        return Batch(src, src != PAD, tgt_in, tgt_out, tgt_mask, int(tgt_mask.sum()))

    def batches(self, n_batches: int, batch_size: int, seed: int) -> list[Batch]:
        """``n_batches`` batches, a pure function of ``seed`` (use another seed for held-out data)."""
        generator = torch.Generator().manual_seed(seed)
        return [self.batch(batch_size, generator) for _ in range(n_batches)]


def strip(ids: Tensor | list[int], eos: int = EOS, pad: int = PAD) -> list[int]:
    """Token ids up to (not including) the first EOS, with PAD removed."""
    out = []
    for i in (ids.tolist() if isinstance(ids, Tensor) else ids):
        if i == eos:
            break
        if i != pad:
            out.append(i)
    return out


def render(ids: Tensor | list[int], extra: dict[int, str] | None = None) -> str:
    """Ids as a readable string: symbols as letters (3 -> a, 4 -> b, ...), specials in brackets.

    ``extra`` names further special ids (e.g. ``{20: "<sep>"}``). Ids past ``z``
    print as numbers.
    """
    names = {PAD: "<pad>", BOS: "<bos>", EOS: "<eos>", **(extra or {})}
    out = []
    for i in (ids.tolist() if isinstance(ids, Tensor) else ids):
        if i in names:
            out.append(names[i])
        elif 0 <= i - N_SPECIALS < 26:
            out.append(chr(ord("a") + i - N_SPECIALS))
        else:
            out.append(str(i))
    return " ".join(out)
