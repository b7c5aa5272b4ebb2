"""Multi-head attention (self and cross), grouped-query option, and the key/value cache.

The module owns only parameters and the head split/merge; the maths is
``seqmap.nn.attention.scaled_dot_product_attention``. Self-attention projects
queries, keys and values with one matrix product; cross-attention projects the
queries from the decoder and the keys/values from the encoder memory, once per
source (see ``project_memory``), and lets several decoder rows (the beams of a
sentence) read one copy of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqmap.nn.attention import scaled_dot_product_attention
from seqmap.nn.packed import linear_rows
from seqmap.nn.positional import PositionalEncoding


class KVCache:
    """Keys and values seen so far by one self-attention layer, for incremental decoding.

    Storage is preallocated and grows by doubling, so appending one step writes
    in place instead of concatenating the whole history. ``reorder`` selects batch
    rows (beam search) without copying the whole cache: see ``reorder``.
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None  # (B, Hkv, capacity, Dh)
        self.v: Tensor | None = None
        self.length = 0
        self.spare: tuple[Tensor, Tensor] | None = None  # reorder's second storage, swapped with k, v

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add (B, Hkv, t, Dh) new keys/values; return views of all (B, Hkv, length, Dh)."""
        new_len = self.length + k.size(2)
        if self.k is None or new_len > self.k.size(2):
            capacity = max(new_len, 2 * (0 if self.k is None else self.k.size(2)), 16)
            grown_k = k.new_empty(k.size(0), k.size(1), capacity, k.size(3))
            grown_v = v.new_empty(v.size(0), v.size(1), capacity, v.size(3))
            if self.k is not None:
                grown_k[:, :, : self.length] = self.k[:, :, : self.length]
                grown_v[:, :, : self.length] = self.v[:, :, : self.length]
            self.k, self.v = grown_k, grown_v
        self.k[:, :, self.length : new_len] = k
        self.v[:, :, self.length : new_len] = v
        self.length = new_len
        return self.k[:, :, :new_len], self.v[:, :, :new_len]

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (B',) in that order (any rows, repeats allowed), e.g. the surviving beams.

        Only the ``length`` slots in use are copied, not the whole capacity. With the
        batch size unchanged (beams reordered) they are gathered with one
        ``index_select`` into a second storage of the same shape, which then swaps
        places with the first (nothing is allocated after the first reorder; an
        identity ``index`` copies nothing). The earlier gather-then-``index_copy_`` of
        only the moved rows made two strided passes and took longer, and gathering the
        whole capacity took up to 2x longer still (docs/benchmarks.md, issue 18). A new
        batch size (rows dropped, or repeated into beams) selects the rows into new
        storage of the same capacity.
        """
        if self.k is None:
            return
        same_size = index.numel() == self.k.size(0)
        if same_size and bool((index == torch.arange(index.numel(), device=index.device)).all()):
            return
        if self.k.requires_grad and torch.is_grad_enabled():  # out= cannot record a gradient
            self.k, self.v, self.spare = self.k.index_select(0, index), self.v.index_select(0, index), None
            return
        if same_size:
            if self.spare is None or self.spare[0].shape != self.k.shape:
                self.spare = (torch.empty_like(self.k), torch.empty_like(self.v))
            target = self.spare
            self.spare = (self.k, self.v)
        else:
            target = (self.k.new_empty(index.numel(), *self.k.shape[1:]),
                      self.v.new_empty(index.numel(), *self.v.shape[1:]))
            self.spare = None
        for old, new in zip((self.k, self.v), target, strict=True):
            torch.index_select(old.narrow(2, 0, self.length), 0, index, out=new.narrow(2, 0, self.length))
        self.k, self.v = target

    @classmethod
    def stack(cls, caches: Sequence[KVCache]) -> KVCache:
        """The rows of ``caches`` (in order) in one cache, right-aligned to the longest.

        A cache of n < N entries gets N - n zero slots on the left of each of its rows:
        slots that hold no key, which attention must mask (``key_mask``).
        """
        assert all(c.k is not None for c in caches), "stack caches that hold keys"
        length = max(c.length for c in caches)

        def aligned(store: Tensor, n: int) -> Tensor:  # (b, Hkv, n, Dh) -> (b, Hkv, length, Dh)
            return F.pad(store[:, :, :n], (0, 0, length - n, 0))

        stacked = cls()
        stacked.append(torch.cat([aligned(c.k, c.length) for c in caches]),
                       torch.cat([aligned(c.v, c.length) for c in caches]))
        return stacked


class MultiHeadAttention(nn.Module):
    """Multi-head attention, Vaswani et al. (2017), with optional grouped-query heads.

    Args:
        d_model: width D of queries (and of keys/values unless ``kv_dim`` is given).
        n_heads: query heads H.
        n_kv_heads: key/value heads Hkv (H: multi-head; 1: multi-query; a divisor
            of H: grouped-query). Default H.
        dropout: dropout on the attention weights.
        bias: whether the projections have biases.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None,
                 dropout: float = 0.0, bias: bool = True):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        self.kv_width = n_kv_heads * self.head_dim
        self.dropout = dropout
        # rows [0, D) project queries, then keys, then values (as nn.MultiheadAttention's in_proj)
        self.in_proj = nn.Linear(d_model, d_model + 2 * self.kv_width, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    # -- head split / merge ------------------------------------------------
    def _split(self, x: Tensor, heads: int) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, heads, self.head_dim).transpose(1, 2)  # (B, h, T, Dh)

    def _merge(self, x: Tensor) -> Tensor:
        b, _, t, _ = x.shape
        return x.transpose(1, 2).reshape(b, t, self.d_model)  # (B, T, D)

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values (B, Hkv, S, Dh) of an encoder memory (B, S, D) for cross-attention.

        Computed once per source; decoding steps reuse them. Made contiguous (a copy, once) so
        that each step's matrix products read them as they are instead of copying them again.
        """
        k, v = linear_rows(self.in_proj, memory, self.d_model, self.d_model + 2 * self.kv_width).split(
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
            positional: scheme supplying rotations / biases (``seqmap.nn.positional``).
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
        q, k, v = self.in_proj(x).split((self.d_model, self.kv_width, self.kv_width), dim=-1)
        q, k, v = self._split(q, self.n_heads), self._split(k, self.n_kv_heads), self._split(v, self.n_kv_heads)
        bias = value_positional = None
        positional = positional if positional is not None and positional.in_attention else None
        if positional is not None:
            q_pos = torch.arange(offset, offset + x.size(1), device=x.device)  # (T,) slots
            turn = q_pos if positions is None else positions
            q, k = positional.rotate(q, turn), positional.rotate(k, turn)
        if cache is not None:
            k, v = cache.append(k, v)
        if positional is not None:
            k_pos = torch.arange(k.size(2), device=x.device)
            bias = positional.score_bias(q, q_pos, k_pos)
            value_positional = positional if positional.needs_weights else None
        out, weights = scaled_dot_product_attention(
            q, k, v, mask, bias,
            causal=causal,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights or value_positional is not None,
        )
        if value_positional is not None:
            out = out + value_positional.value_term(weights, q_pos, k_pos)
        return self.out_proj(self._merge(out)), weights

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
        q = linear_rows(self.in_proj, x, 0, self.d_model)  # queries: the first D rows of in_proj
        q = q.view(sources, rows // sources * t, self.d_model)  # (B_s, r T, D)
        out, weights = scaled_dot_product_attention(
            self._split(q, self.n_heads), k, v, mask,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
        )
        out = self._merge(out).view(rows, t, self.d_model)
        if weights is not None:  # (B_s, H, r T, S) -> (B, H, T, S)
            weights = weights.unflatten(2, (rows // sources, t)).transpose(1, 2).reshape(rows, self.n_heads, t, -1)
        return self.out_proj(out), weights
