"""Dropout (Srivastava et al. 2014) with a cheaper mask on the CPU.

``torch.nn.Dropout`` on the CPU draws one float per element through ``bernoulli_``
and keeps a float mask for the backward pass. Here each element gets 16 random
bits (four to each 64-bit word of the generator), is dropped when they fall below
``p`` (rounded to a multiple of 1/65536), and the backward keeps a one-byte mask.
The kept elements are scaled by the inverse of the *rounded* keep probability, so
the expectation is exactly the input. Other devices use ``torch.nn.functional.dropout``
(fused there). Both draw from torch's default generator, so ``torch.manual_seed``
and checkpointed RNG state reproduce the masks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEVELS = 1 << 16  # the resolution of the drop probability on the CPU path


def keep_mask(shape: tuple[int, ...], p: float, device: torch.device | str = "cpu") -> tuple[Tensor, float]:
    """A bool mask of ``shape``, True (keep) with probability ``q = 1 - round(p * 65536) / 65536``; and ``q``."""
    n = math.prod(shape)
    cut = round(p * LEVELS)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), None)  # all 64 bits random
    draws = words.view(torch.int16)[:n].view(shape)  # uniform over [-32768, 32767]
    return draws >= cut - LEVELS // 2, 1.0 - cut / LEVELS


class _MaskedScale(torch.autograd.Function):
    """x -> x * keep / q with a bool ``keep``; the backward multiplies by the same mask."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:
        keep, q = keep_mask(x.shape, p, x.device)
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / q
        return torch.where(keep, x, 0.0).mul_(ctx.scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (keep,) = ctx.saved_tensors
        return torch.where(keep, grad, 0.0).mul_(ctx.scale), None


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Zero each element of ``x`` with probability ``p`` and scale the rest by 1 / (1 - p); identity unless training."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    # p that rounds to 0 or to 1 on the 1/65536 grid (e.g. 0.99999) goes to torch's dropout: the rounded keep
    # probability would be 0 there and its inverse undefined
    if x.device.type != "cpu" or not x.is_floating_point() or round(p * LEVELS) in (0, LEVELS):
        return F.dropout(x, p, True)
    return _MaskedScale.apply(x, p)


class Dropout(nn.Module):
    """``torch.nn.Dropout``'s interface (``p``, train/eval) over :func:`dropout`."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
