"""Collation for real data: chosen examples padded into a teacher-forcing ``Batch`` or a classifier's ``LabelBatch``.

Which examples go in each batch (token budgets, sharding, LM windows, resumable epochs) is
``seqmap.data.samplers``; this module turns them into padded tensors.

Token ids: ``PAD = 0``, ``BOS = 1``, ``EOS = 2`` by default. Masks follow the
package convention: True = a real token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from seqmap.data.tokenizers import BOS, EOS, PAD  # the one definition of the reserved ids

SPECIALS_PER_SIDE = 1  # collation adds one token per side of a pair: BOS to tgt_in, EOS to tgt_out


@dataclass(frozen=True)
class Batch:
    """One padded batch for teacher forcing; right-padded with PAD.

    Attributes:
        src: (B, S) source ids, or None for a language model.
        src_mask: (B, S) True at real source tokens, or None.
        tgt_in: (B, T) decoder input (``BOS`` + target for pairs).
        tgt_out: (B, T) what to predict at each position (target + ``EOS``); PAD where ``tgt_mask`` is False.
        tgt_mask: (B, T) True at real target positions (the same positions in ``tgt_in`` and ``tgt_out``).
        n_tokens: number of real target tokens (``tgt_mask.sum()``, EOS included): divide summed losses by this.
    """

    src: Tensor | None
    src_mask: Tensor | None
    tgt_in: Tensor
    tgt_out: Tensor
    tgt_mask: Tensor
    n_tokens: int

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A copy with every tensor on ``device``."""
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device, non_blocking=non_blocking)
        return replace(self, src=move(self.src), src_mask=move(self.src_mask), tgt_in=move(self.tgt_in),
                       tgt_out=move(self.tgt_out), tgt_mask=move(self.tgt_mask))

    @classmethod
    def from_lm_windows(cls, inputs: Tensor, targets: Tensor, pad_id: int = PAD) -> Batch:
        """Wrap ``(inputs, targets)`` from ``lm_chunks`` or ``lm_random_chunks`` (``seqmap.data.samplers``); PAD
        targets are masked."""
        mask = targets != pad_id
        return cls(None, None, inputs, targets, mask, int(mask.sum()))


NOT_SCORED = -1  # a LabelBatch label that takes no part in the loss (e.g. a graph node outside the training split)


@dataclass(frozen=True)
class LabelBatch:
    """One batch for a classifier: inputs, and one class id per example to predict.

    Attributes:
        src: (B, S) token ids right-padded with PAD (or any input the model's ``forward(src, src_mask)`` reads).
        src_mask: (B, S) True at real tokens, or None when nothing is padded.
        labels: (B,) class ids in 0..C-1, or ``NOT_SCORED``.
        n_tokens: the number of scored labels: the trainer divides summed losses by it, as by a
            :class:`Batch`'s target tokens.
    """

    src: Tensor
    src_mask: Tensor | None
    labels: Tensor
    n_tokens: int

    def to(self, device: torch.device | str, non_blocking: bool = False) -> LabelBatch:
        """A copy with every tensor on ``device``."""
        mask = None if self.src_mask is None else self.src_mask.to(device, non_blocking=non_blocking)
        return replace(self, src=self.src.to(device, non_blocking=non_blocking), src_mask=mask,
                       labels=self.labels.to(device, non_blocking=non_blocking))


def collate_labels(examples: Sequence[tuple[Sequence[int], int]], pad_id: int = PAD) -> LabelBatch:
    """Pad (token ids, label) examples into a :class:`LabelBatch` (an empty text gets one PAD, mask False)."""
    if not examples:
        raise ValueError("collate_labels got no examples")
    src, src_mask = _pad([torch.as_tensor(s, dtype=torch.long).reshape(-1) for s, _ in examples], pad_id)
    labels = torch.tensor([label for _, label in examples], dtype=torch.long)
    return LabelBatch(src, src_mask, labels, int((labels != NOT_SCORED).sum()))


def collate_images(images: Tensor, labels: Tensor | Sequence[int]) -> LabelBatch:
    """Images (B, C, H, W) and their class ids as a :class:`LabelBatch` (no padding: the mask is None)."""
    labels = torch.as_tensor(labels, dtype=torch.long).reshape(-1)
    if images.dim() != 4 or images.size(0) != labels.numel():
        raise ValueError(f"collate_images needs (B, C, H, W) images and B labels, got {tuple(images.shape)} and "
                         f"{labels.numel()}")
    return LabelBatch(images, None, labels, int((labels != NOT_SCORED).sum()))


def _pad(rows: list[Tensor], pad_id: int) -> tuple[Tensor, Tensor]:
    """(B, L) right-padded ids and their (B, L) mask (True = real); L is at least 1."""
    width = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = row
        mask[b, : len(row)] = True
    return ids, mask


def _shifted(
    seqs: Sequence[Sequence[int]], pad_id: int, bos_id: int | None, eos_id: int | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Teacher-forcing pair of each ``[bos] + seq + [eos]``: input drops its last token, output its first."""
    rows = []
    for seq in seqs:
        row = torch.as_tensor(seq, dtype=torch.long).reshape(-1)
        parts = ([torch.tensor([bos_id])] if bos_id is not None else []) + [row]
        parts += [torch.tensor([eos_id])] if eos_id is not None else []
        rows.append(torch.cat(parts))
    if any(len(r) < 2 for r in rows):
        raise ValueError("a sequence has nothing to predict: with bos_id/eos_id None it needs at least 2 tokens")
    tgt_in, mask = _pad([r[:-1] for r in rows], pad_id)
    tgt_out, _ = _pad([r[1:] for r in rows], pad_id)
    return tgt_in, tgt_out, mask


def collate_pairs(
    examples: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int = PAD, bos_id: int = BOS, eos_id: int = EOS
) -> Batch:
    """Pad (source, target) pairs of ids into a :class:`Batch`.

    The source is used as given (add EOS in the tokenizer if the model wants it);
    the target becomes ``tgt_in = BOS + target`` and ``tgt_out = target + EOS``.
    A batch whose sources are all empty gets one column of padding, mask all False.
    """
    if not examples:
        raise ValueError("collate_pairs got no examples")
    src, src_mask = _pad([torch.as_tensor(s, dtype=torch.long).reshape(-1) for s, _ in examples], pad_id)
    tgt_in, tgt_out, tgt_mask = _shifted([t for _, t in examples], pad_id, bos_id, eos_id)
    return Batch(src, src_mask, tgt_in, tgt_out, tgt_mask, int(tgt_mask.sum()))


def pad_waves(waves: Sequence[np.ndarray | Tensor]) -> tuple[Tensor, Tensor]:
    """(B, N) float32 waveforms right-padded with zeros and their (B, N) sample mask (True = real)."""
    width = max(1, max(len(w) for w in waves))
    out = torch.zeros((len(waves), width), dtype=torch.float32)
    mask = torch.zeros((len(waves), width), dtype=torch.bool)
    for b, wave in enumerate(waves):
        out[b, : len(wave)] = torch.as_tensor(wave, dtype=torch.float32)
        mask[b, : len(wave)] = True
    return out, mask


def collate_speech(waves: Sequence[np.ndarray | Tensor], targets: Sequence[Sequence[int]], pad_id: int = PAD,
                   bos_id: int = BOS, eos_id: int = EOS) -> Batch:
    """Waveforms and their transcripts' ids as a :class:`Batch`: ``src`` (B, N) samples, ``src_mask`` (B, N)."""
    if not waves or len(waves) != len(targets):
        raise ValueError(f"collate_speech needs as many waveforms as targets (> 0), got {len(waves)} and "
                         f"{len(targets)}")
    src, src_mask = pad_waves(waves)
    tgt_in, tgt_out, tgt_mask = _shifted(targets, pad_id, bos_id, eos_id)
    return Batch(src, src_mask, tgt_in, tgt_out, tgt_mask, int(tgt_mask.sum()))


def collate_lm(
    sequences: Sequence[Sequence[int]], pad_id: int = PAD, bos_id: int | None = BOS, eos_id: int | None = EOS
) -> Batch:
    """Pad sequences for a decoder-only LM (``src`` is None): ``tgt_out`` is ``tgt_in`` shifted left by one.

    With the defaults each sequence is a sentence: ``tgt_in = BOS + seq``,
    ``tgt_out = seq + EOS``. With ``bos_id=None, eos_id=None`` each sequence is a
    raw chunk of ``context + 1`` tokens: ``tgt_in = seq[:-1]``, ``tgt_out = seq[1:]``.
    """
    if not sequences:
        raise ValueError("collate_lm got no sequences")
    tgt_in, tgt_out, tgt_mask = _shifted(sequences, pad_id, bos_id, eos_id)
    return Batch(None, None, tgt_in, tgt_out, tgt_mask, int(tgt_mask.sum()))
