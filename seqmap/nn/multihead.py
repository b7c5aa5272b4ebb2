"""Multi-head attention (self and cross), grouped-query option.

The module owns only parameters and the head split/merge; the maths is
``seqmap.nn.attention.scaled_dot_product_attention``. Self-attention projects
queries, keys and values with one matrix product; cross-attention projects the
queries from the decoder and the keys/values from the encoder memory, once per
source (see ``project_memory``), and lets several decoder rows (the beams of a
sentence) read one copy of them. Incremental decoding keeps each layer's past keys and values in a
``seqmap.nn.kv_cache.KVCache``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqmap.nn.attention import (
    MANY_ROWS,
    SHARED_PREFIX_MIN,
    scaled_dot_product_attention,
    shared_prefix_attention,
)
from seqmap.nn.kv_cache import KVCache
from seqmap.nn.packed import cpu_vendor, linear_rows
from seqmap.nn.positional import PositionalEncoding

# A decoding step over many rows on the CPU reads its cache's whole storage (``KVCache.whole``: one contiguous
# run per row) or only the slots in use (fewer slots), whichever is faster on the CPU vendor (docs/benchmarks.md
# "Decoding"): the whole storage on AMD, the slots in use on Intel.
WHOLE_STORAGE_READS = cpu_vendor() != "GenuineIntel"


class MultiHeadAttention(nn.Module):
    """Multi-head attention, Vaswani et al. (2017), with optional grouped-query heads.

    Args:
        d_model: width D of queries (and of keys/values unless ``kv_dim`` is given).
        n_heads: query heads H.
        n_kv_heads: key/value heads Hkv (H: multi-head; 1: multi-query; a divisor
            of H: grouped-query). Default H.
        dropout: dropout on the attention weights.
        bias: whether the projections have biases.
        scale: the scores' scale; None = 1 / sqrt(Dh). T5 uses 1.0 (its initialisation holds the scale).
        head_dim: Dh, the width of each head; None = d_model / n_heads. Heads of another width
            (T5's d_kv) attend in H Dh dimensions, which out_proj maps back to D.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None,
                 dropout: float = 0.0, bias: bool = True, scale: float | None = None, head_dim: int | None = None):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if head_dim is None and d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads if head_dim is None else head_dim
        self.q_width = n_heads * self.head_dim  # D, unless head_dim says otherwise
        self.kv_width = n_kv_heads * self.head_dim
        self.dropout, self.scale = dropout, scale
        # rows [0, H Dh) project queries, then keys, then values (as nn.MultiheadAttention's in_proj)
        self.in_proj = nn.Linear(d_model, self.q_width + 2 * self.kv_width, bias=bias)
        self.out_proj = nn.Linear(self.q_width, d_model, bias=bias)

    # -- head split / merge ------------------------------------------------
    def _split(self, x: Tensor, heads: int) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, heads, self.head_dim).transpose(1, 2)  # (B, h, T, Dh)

    def _merge(self, x: Tensor) -> Tensor:
        b, _, t, _ = x.shape
        return x.transpose(1, 2).reshape(b, t, self.q_width)  # (B, T, H Dh)

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values (B, Hkv, S, Dh) of an encoder memory (B, S, D) for cross-attention.

        Computed once per source; decoding steps reuse them. Made contiguous (a copy, once) so
        that each step's matrix products read them as they are instead of copying them again.
        """
        k, v = linear_rows(self.in_proj, memory, self.q_width, self.q_width + 2 * self.kv_width).split(
            self.kv_width, dim=-1)
        return self._split(k, self.n_kv_heads).contiguous(), self._split(v, self.n_kv_heads).contiguous()

    # -- the two uses ----------------------------------------------------------
    def self_attention(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        *,
        causal: bool = False,
        positional: PositionalEncoding | None = None,
        offset: int = 0,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D) attends to itself (and to the cached past when ``cache`` is given).

        Args:
            mask: boolean, broadcastable to (B, H, T, S) with S the number of keys
                (cached + new); True = may attend. Usually a (B, 1, 1, S) padding mask.
            causal: forbid attending to later positions.
            positional: scheme supplying rotations / biases (``seqmap.nn.positional``); a scheme that
                also scores the values (``value_score_bias``) adds a second softmax over the same keys.
            offset: absolute position of x's first token (the cache length when decoding).
                With ``positions`` it is the slot of x's first token in the cache instead.
            positions: (B, T) each row's own positions of x's tokens, for rows padded on the
                left (the first slots of a row hold no token; ``mask`` hides them). Rotary
                turns queries and new keys by these; relative biases use slot numbers, whose
                differences within a row equal position differences. None: every row at
                positions offset, offset + 1, ...
            cache: if given, new keys/values are appended and all are attended to.
        Returns:
            (output (B, T, D), weights (B, H, T, S) or None).
        """
        q, k, v = self.in_proj(x).split((self.q_width, self.kv_width, self.kv_width), dim=-1)
        q, k, v = self._split(q, self.n_heads), self._split(k, self.n_kv_heads), self._split(v, self.n_kv_heads)
        bias = value_bias = value_positional = None
        positional = positional if positional is not None and positional.in_attention else None
        if positional is not None:
            q_pos = torch.arange(offset, offset + x.size(1), device=x.device)  # (T,) slots
            turn = q_pos if positions is None else positions
            q, k = positional.rotate(q, turn), positional.rotate(k, turn)
        if cache is not None:
            k, v = cache.append(k, v)
            if self._decoding_step(q, k, mask, positional, need_weights):
                if cache.shared >= SHARED_PREFIX_MIN:
                    prefix_k, prefix_v = cache.prefix
                    out = shared_prefix_attention(q, prefix_k, prefix_v, k[:, :, cache.shared:],
                                                  v[:, :, cache.shared:], scale=self.scale)
                else:
                    keys, values, bias = cache.whole() if WHOLE_STORAGE_READS else (k, v, None)
                    out, _ = scaled_dot_product_attention(q, keys, values, bias=bias, scale=self.scale)
                return self.out_proj(self._merge(out)), None
        if positional is not None:
            k_pos = torch.arange(k.size(2), device=x.device)
            bias = positional.score_bias(q, k, q_pos, k_pos)
            value_bias = positional.value_score_bias(q, v, q_pos, k_pos)
            value_positional = positional if positional.needs_weights else None
        dropout_p = self.dropout if self.training else 0.0
        need_weights = need_weights or value_positional is not None
        out, weights = scaled_dot_product_attention(q, k, v, mask, bias, causal=causal, dropout_p=dropout_p,
                                                    need_weights=need_weights, scale=self.scale)
        if value_bias is not None:  # a second softmax scores the queries against the values: the two are averaged
            out_v, weights_v = scaled_dot_product_attention(q, v, v, mask, value_bias, causal=causal,
                                                            dropout_p=dropout_p, need_weights=need_weights,
                                                            scale=self.scale)
            out = (out + out_v) / 2
            weights = None if weights is None else (weights + weights_v) / 2
        if value_positional is not None:
            out = out + value_positional.value_term(weights, q_pos, k_pos)
        return self.out_proj(self._merge(out)), weights

    def _decoding_step(self, q: Tensor, k: Tensor, mask: Tensor | None, positional: PositionalEncoding | None,
                       need_weights: bool) -> bool:
        """Whether a step over a cache takes the decoding path: one query per row over many rows (batch x heads
        >= MANY_ROWS) at inference on the CPU (where the explicit path serves decoding steps, see
        ``seqmap.nn.attention``), nothing else in the scores (no mask, no position bias, no weights asked for),
        every head its own keys. The rows then read the whole cache storage (``KVCache.whole``), or, when
        their blocks share at least SHARED_PREFIX_MIN slots, the shared prefix once per block
        (``shared_prefix_attention``)."""
        return (q.size(2) == 1 and q.size(0) * q.size(1) >= MANY_ROWS and mask is None and positional is None
                and not need_weights and k.size(1) == q.size(1) and q.device.type == "cpu"
                and not torch.is_grad_enabled() and not self.training)

    def cross_attention(
        self,
        x: Tensor,
        memory_kv: tuple[Tensor, Tensor],
        mask: Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D) attends to encoder keys/values (B_s, Hkv, S, Dh) from ``project_memory``.

        B may be a multiple r of B_s: rows [i r, (i + 1) r) of x then all read source i (the
        beams of one sentence in beam search) and attend as r T queries to the one copy of its
        keys and values, instead of each row reading a copy of its own.

        mask: (B_s, 1, 1, S) source padding mask, True at real tokens.
        Returns (output (B, T, D), weights (B, H, T, S) or None).
        """
        k, v = memory_kv
        rows, t, _ = x.shape
        sources = k.size(0)
        assert rows % sources == 0, f"{rows} query rows cannot share {sources} sources in equal blocks"
        q = linear_rows(self.in_proj, x, 0, self.q_width)  # queries: the first H Dh rows of in_proj
        q = q.view(sources, rows // sources * t, self.q_width)  # (B_s, r T, H Dh)
        out, weights = scaled_dot_product_attention(
            self._split(q, self.n_heads), k, v, mask,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
            scale=self.scale,
        )
        out = self._merge(out).view(rows, t, self.q_width)
        if weights is not None:  # (B_s, H, r T, S) -> (B, H, T, S)
            weights = weights.unflatten(2, (rows // sources, t)).transpose(1, 2).reshape(rows, self.n_heads, t, -1)
        return self.out_proj(out), weights
