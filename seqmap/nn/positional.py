"""Positional encodings: how a Transformer knows where a token is.

Every scheme implements the same four hooks, so attention and the layer stacks
never ask which scheme they hold:

- ``embed(x, offset)``: absolute schemes add a vector to the token embeddings
  (sinusoidal, learned); ``offset`` is the position of x's first token.
- ``rotate(x, pos)``: rotary (RoPE) rotates queries and keys (B, H, T, Dh).
- ``score_bias(q, q_pos, k_pos)``: relative schemes add a bias to the scaled
  scores, broadcastable to (B, H, T, S) (ALiBi, T5 buckets, Shaw keys).
- ``value_term(weights, q_pos, k_pos)``: Shaw et al.'s relative values,
  added to the attention output (B, H, T, Dh); needs the weights.

Positions are absolute integer positions, (T,) for queries and (S,) for keys.
Hooks are applied in self-attention only; cross-attention has no positions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class PositionalEncoding(nn.Module):
    """Base class: every hook does nothing. Subclasses override what they use."""

    needs_weights: bool = False  # True if value_term needs the attention weights

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        return x

    def rotate(self, x: Tensor, pos: Tensor) -> Tensor:
        return x

    def score_bias(self, q: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        return None

    def value_term(self, weights: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        return None


class NoPositional(PositionalEncoding):
    """No position information at all (a bag of tokens; causal LMs still learn some)."""


def sinusoidal_table(length: int, d_model: int, base: float = 10000.0) -> Tensor:
    """(length, D) table: PE(pos, 2i) = sin(pos / base^(2i/D)), PE(pos, 2i+1) = cos(...)."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)[:, : d_model // 2]
    return table


class SinusoidalPositional(PositionalEncoding):
    """Vaswani et al. (2017): fixed sines and cosines added to the embeddings.

    The table is cached up to ``max_len`` and rebuilt larger on demand, so any
    length works (extrapolation past the training length never errors).
    """

    def __init__(self, d_model: int, max_len: int = 1024, dropout: float = 0.0):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.size(1)
        if end > self.table.size(0):
            self.table = sinusoidal_table(max(end, 2 * self.table.size(0)), self.d_model).to(self.table.device)
        return x + self.table[offset:end].to(x.dtype)


def build_positional(
    kind: str,
    *,
    d_model: int,
    n_heads: int,
    max_len: int,
    causal: bool,
    relative_clip: int = 16,
    relative_values: bool = False,
    t5_buckets: int = 32,
    t5_max_distance: int = 128,
    rope_base: float = 10000.0,
) -> PositionalEncoding:
    """One positional scheme for one layer stack (encoder or decoder).

    ``causal`` tells a directional scheme (T5 buckets) whether it serves a causal
    stack. Valid kinds: see ``POSITIONAL_KINDS``.
    """
    head_dim = d_model // n_heads
    if kind == "none":
        return NoPositional()
    if kind == "sinusoidal":
        return SinusoidalPositional(d_model, max_len)
    raise ValueError(f"unknown positional encoding {kind!r}; choose one of {POSITIONAL_KINDS}")


POSITIONAL_KINDS = ("sinusoidal", "learned", "relative", "t5", "rope", "alibi", "none")
_ = math  # used by the relative schemes
