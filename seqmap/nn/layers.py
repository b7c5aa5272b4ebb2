"""Transformer building blocks: embeddings, feed-forward, norms, encoder and decoder layers.

A layer shows its residual stream: each sublayer is one read (``self._in``) and
one write (``self._out``), and pre- or post-LayerNorm is the single switch
``pre_norm`` in ``_Residual``:

    pre-LN  (Xiong et al. 2020):  x = x + Dropout(f(Norm(x)))
    post-LN (Vaswani et al. 2017): x = Norm(x + Dropout(f(x)))
"""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from seqmap.nn.dropout import Dropout
from seqmap.nn.kv_cache import KVCache
from seqmap.nn.multihead import MultiHeadAttention
from seqmap.nn.packed import linear_relu
from seqmap.nn.positional import PositionalEncoding


class TokenEmbedding(nn.Module):
    """Token ids (B, T) -> vectors (B, T, D), scaled by sqrt(D) as in Vaswani et al.

    ``std``: of the initial N(0, std) table (default D^-0.5; ConvS2S takes 0.1); the pad row is zero.
    """

    def __init__(self, vocab_size: int, d_model: int, pad_id: int | None = 0, scale: bool = True,
                 std: float | None = None):
        super().__init__()
        self.table = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.table.weight, std=d_model**-0.5 if std is None else std)
        if pad_id is not None:
            self.table.weight.data[pad_id].zero_()
        self.scale = math.sqrt(d_model) if scale else 1.0

    @property
    def weight(self) -> Tensor:
        return self.table.weight

    @property
    def d_model(self) -> int:
        return self.table.embedding_dim

    def forward(self, tokens: Tensor) -> Tensor:
        return self.table(tokens) * self.scale


def make_norm(kind: str, d_model: int, eps: float = 1e-5) -> nn.Module:
    """LayerNorm (Ba et al. 2016) or RMSNorm (Zhang & Sennrich 2019), PyTorch's own modules."""
    if kind == "layernorm":
        return nn.LayerNorm(d_model, eps=eps)
    if kind == "rmsnorm":
        return nn.RMSNorm(d_model, eps=eps)
    raise ValueError(f"unknown norm {kind!r}; choose layernorm or rmsnorm")


# gelu_tanh: GELU's tanh approximation (GPT-2); silu: swish (Marian); swiglu, geglu, geglu_tanh: gated (Shazeer
# 2020) by silu, GELU or its tanh approximation (geglu_tanh: T5 v1.1's and Flan-T5's gated-gelu)
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu", "geglu_tanh")
GATED = ("swiglu", "geglu", "geglu_tanh")  # activations whose w1 holds a gate and an up projection


class FeedForward(nn.Module):
    """Position-wise feed-forward: D -> F -> D.

    relu / gelu: w2(dropout(act(w1 x))).
    swiglu (Shazeer 2020): w2(dropout(silu(x W_gate) * (x W_up))); ``w1`` holds
    W_gate and W_up stacked, so the first product is one matmul. geglu and
    geglu_tanh gate by GELU (exact, or its tanh approximation) instead of silu.
    ``bias=False``: no biases in w1 and w2 (T5).
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose {', '.join(ACTIVATIONS)}")
        self.activation = activation
        self.w1 = nn.Linear(d_model, 2 * d_ff if activation in GATED else d_ff, bias=bias)
        self.w2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        if self.activation == "relu":
            h = linear_relu(self.w1, x)  # one pass when w1 is packed (seqmap.nn.packed)
        elif self.activation in GATED:
            gate, up = self.w1(x).chunk(2, dim=-1)
            if self.activation == "swiglu":
                h = F.silu(gate) * up
            else:
                h = F.gelu(gate, approximate="tanh" if self.activation == "geglu_tanh" else "none") * up
        elif self.activation == "silu":
            h = F.silu(self.w1(x))
        else:
            h = F.gelu(self.w1(x), approximate="tanh" if self.activation == "gelu_tanh" else "none")
        return self.w2(self.dropout(h) if self.training else h)


class _Residual(nn.Module):
    """The pre-/post-norm switch shared by every layer."""

    pre_norm: bool
    dropout: Dropout

    def _in(self, x: Tensor, norm: nn.Module) -> Tensor:
        return norm(x) if self.pre_norm else x

    def _out(self, x: Tensor, h: Tensor, norm: nn.Module) -> Tensor:
        if self.training:  # dropout is the identity otherwise: no module call per layer and decoding step
            h = self.dropout(h)
        return x + h if self.pre_norm else norm(x + h)


class EncoderLayer(_Residual):
    """Self-attention then feed-forward.

    With ``causal=True`` and a cache this is also the block of a decoder-only LM
    (a decoder without cross-attention).
    """

    def __init__(self, self_attn: MultiHeadAttention, ff: FeedForward, norm1: nn.Module, norm2: nn.Module,
                 dropout: float = 0.0, pre_norm: bool = True, causal: bool = False):
        super().__init__()
        self.self_attn, self.ff = self_attn, ff
        self.norm1, self.norm2 = norm1, norm2
        self.dropout = Dropout(dropout)
        self.pre_norm, self.causal = pre_norm, causal

    def forward(self, x: Tensor, mask: Tensor | None = None, *, positional: PositionalEncoding | None = None,
                offset: int = 0, positions: Tensor | None = None, cache: KVCache | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D), mask broadcastable to (B, H, T, S) -> (x (B, T, D), self-attention weights or None).

        ``offset`` and ``positions`` (per-row positions of left-padded rows) as in
        ``MultiHeadAttention.self_attention``.
        """
        h, weights = self.self_attn.self_attention(
            self._in(x, self.norm1), mask, causal=self.causal, positional=positional,
            offset=offset, positions=positions, cache=cache, need_weights=need_weights)
        x = self._out(x, h, self.norm1)
        x = self._out(x, self.ff(self._in(x, self.norm2)), self.norm2)
        return x, weights


class DecoderLayer(_Residual):
    """Causal self-attention, cross-attention to the encoder memory, feed-forward."""

    def __init__(self, self_attn: MultiHeadAttention, cross_attn: MultiHeadAttention, ff: FeedForward,
                 norm1: nn.Module, norm2: nn.Module, norm3: nn.Module, dropout: float = 0.0, pre_norm: bool = True):
        super().__init__()
        self.self_attn, self.cross_attn, self.ff = self_attn, cross_attn, ff
        self.norm1, self.norm2, self.norm3 = norm1, norm2, norm3
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x: Tensor, memory_kv: tuple[Tensor, Tensor], memory_mask: Tensor | None, *,
                positional: PositionalEncoding | None = None, offset: int = 0, cache: KVCache | None = None,
                need_weights: bool = False, which: str = "cross") -> tuple[Tensor, Tensor | None]:
        """x (B, T, D); memory_kv from ``cross_attn.project_memory``; memory_mask (B, 1, 1, S).

        Returns (x (B, T, D), weights or None): with ``need_weights``, the cross-attention
        (B, H, T, S), or with ``which="self"`` the causal self-attention (B, H, T, T + cached).
        """
        if which not in ("cross", "self"):
            raise ValueError(f"which must be 'cross' or 'self', got {which!r}")
        h, self_weights = self.self_attn.self_attention(
            self._in(x, self.norm1), causal=True, positional=positional, offset=offset, cache=cache,
            need_weights=need_weights and which == "self")
        x = self._out(x, h, self.norm1)
        h, cross_weights = self.cross_attn.cross_attention(
            self._in(x, self.norm2), memory_kv, memory_mask, need_weights=need_weights and which == "cross")
        x = self._out(x, h, self.norm2)
        x = self._out(x, self.ff(self._in(x, self.norm3)), self.norm3)
        return x, (self_weights if which == "self" else cross_weights)
