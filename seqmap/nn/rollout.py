"""Reading a class token's attention: attention rollout (Abnar & Zuidema 2020) and the last layer's row.

Each layer's attention, averaged over heads, is mixed half and half with the identity (the residual
connection carries a token's own state past the attention), rows renormalised, and the layers
multiplied first to last. Row 0 of the product (the class token in front) says how much each input
position flowed into the state that was classified. The last layer's class-token row (mean of heads,
or one head) is the direct, one-layer view. Both are used by ``seqmap plot attention`` and the server.
"""

from __future__ import annotations

import torch
from torch import Tensor


def attention_rollout(weights: Tensor, residual: float = 0.5) -> Tensor:
    """(L, H, S, S) attention weights of one input -> (S, S) rollout: row i = how much each token flowed into i.

    Each layer's head mean ``A`` becomes ``residual * I + (1 - residual) * A`` (rows sum to 1), and the
    layers are multiplied first to last.
    """
    if weights.dim() != 4 or weights.size(-1) != weights.size(-2):
        raise ValueError(f"attention_rollout needs (layers, heads, S, S) weights, got {tuple(weights.shape)}")
    s = weights.size(-1)
    eye = torch.eye(s, dtype=torch.float64, device=weights.device)
    rollout = eye
    for layer in weights.to(torch.float64):
        a = residual * eye + (1.0 - residual) * layer.mean(dim=0)
        a = a / a.sum(dim=-1, keepdim=True)
        rollout = a @ rollout
    return rollout


def class_token_attention(weights: Tensor, head: int | None = None) -> tuple[Tensor, Tensor]:
    """(rollout, last layer) weights of the class token (position 0) over the other S - 1 positions, each summing
    to 1 (float64). ``weights``: (L, H, S, S); ``head``: one head of the last layer (default: their mean)."""
    rolled = attention_rollout(weights)[0, 1:]
    last = weights[-1, :, 0, 1:].to(torch.float64)
    last = last.mean(dim=0) if head is None else last[head]
    return rolled / rolled.sum(), last / last.sum().clamp(min=1e-300)
