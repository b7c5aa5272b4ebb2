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

from seqmap.nn.attention import (
    MANY_ROWS,
    SHARED_PREFIX_MIN,
    scaled_dot_product_attention,
    shared_prefix_attention,
)
from seqmap.nn.packed import cpu_vendor, linear_rows
from seqmap.nn.positional import PositionalEncoding

# A decoding step over many rows on the CPU reads its cache's whole storage (``KVCache.whole``) or only the
# slots in use, whichever was faster on the CPU kind (docs/benchmarks.md, issue 18): the whole storage on the
# AMD EPYC (1.02x to 1.05x greedy), the slots in use on the Xeon (1.03x greedy with 2 threads, 1.05x with 1).
WHOLE_STORAGE_READS = cpu_vendor() != "GenuineIntel"


class KVCache:
    """Keys and values seen so far by one self-attention layer, for incremental decoding.

    Storage is preallocated and grows by doubling, so appending one step writes
    in place instead of concatenating the whole history. ``reorder`` selects batch
    rows (beam search) and copies only the slots whose content changes: see ``reorder_caches``.
    Attention may read the whole storage (``whole``), the slots past ``length`` then zeroed once per storage.

    ``lineage`` (B, length) names the append that wrote each slot (one id per row and
    slot); reorders carry it along with the keys and values. Two slots with the same id
    hold the same keys and values, bit for bit. Ids are given when the lineage is first
    read (a reorder), not at each append: slots written since the last reorder are each
    their own row's, so fresh ids name them as well, and greedy decoding, which never
    reorders, never writes one.

    Shared prefix: when the rows come in blocks of r (beam search's k beams per sentence,
    ``reorder_caches(..., blocks=r)``), the first ``shared`` slots hold the same keys and
    values in every row of each block (the beams' common history). The cache then also
    keeps those slots once per block (``prefix``), so that attention reads them once per
    sentence with the block's r queries together (``seqmap.nn.attention.shared_prefix_attention``).
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None  # (B, Hkv, capacity, Dh)
        self.v: Tensor | None = None
        self._lineage: Tensor | None = None  # (B, capacity) long; slots [0, _named) hold ids
        self.length = 0
        self._named = 0
        self._next_id = 0
        self.blocks = 1  # r: rows [i r, (i + 1) r) share their first ``shared`` slots
        self.shared = 0
        self._prefix: tuple[Tensor, Tensor] | None = None  # (B / r, Hkv, capacity, Dh) keys and values
        self._tail_zeroed = False  # whether the slots past ``length`` hold zeros (``whole``)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add (B, Hkv, t, Dh) new keys/values; return views of all (B, Hkv, length, Dh)."""
        rows, t = k.size(0), k.size(2)
        new_len = self.length + t
        if self.k is None or new_len > self.k.size(2):
            capacity = max(new_len, 2 * (0 if self.k is None else self.k.size(2)), 16)
            grown_k = k.new_empty(rows, k.size(1), capacity, k.size(3))
            grown_v = v.new_empty(rows, v.size(1), capacity, v.size(3))
            grown_lineage = torch.empty(rows, capacity, dtype=torch.long, device=k.device)
            if self.k is not None:
                grown_k[:, :, : self.length] = self.k[:, :, : self.length]
                grown_v[:, :, : self.length] = self.v[:, :, : self.length]
                grown_lineage[:, : self._named] = self._lineage[:, : self._named]
            self.k, self.v, self._lineage = grown_k, grown_v, grown_lineage
            self._tail_zeroed = False
        self.k[:, :, self.length : new_len] = k
        self.v[:, :, self.length : new_len] = v
        self.length = new_len
        return self.k[:, :, :new_len], self.v[:, :, :new_len]

    @property
    def lineage(self) -> Tensor | None:
        """(B, length) the id of the append that wrote each slot (a view: writing to it writes the cache's)."""
        if self.k is None:
            return None
        if self._named < self.length:
            rows, fresh = self.k.size(0), self.length - self._named
            ids = torch.arange(self._next_id, self._next_id + rows * fresh, device=self.k.device)
            self._lineage[:, self._named : self.length] = ids.view(rows, fresh)
            self._next_id += rows * fresh
            self._named = self.length
        return self._lineage[:, : self.length]

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (B',) in that order (any rows, repeats allowed), e.g. the surviving beams
        (``reorder_caches`` with this cache alone)."""
        reorder_caches([self], index)

    def _select(self, index: Tensor) -> None:
        """Rows ``index`` into new storage (a new batch size, or a cache that records gradients)."""
        lineage = self.lineage
        self.blocks, self.shared, self._prefix = 1, 0, None
        if self.k.requires_grad and torch.is_grad_enabled():  # in-place copies cannot record a gradient
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)
            self._lineage = self._lineage.index_select(0, index)
            return
        stores = (self.k, self.v, self._lineage)
        self.k, self.v, self._lineage = (store.new_empty(index.numel(), *store.shape[1:]) for store in stores)
        self._tail_zeroed = False
        for old, new in zip(stores[:2], (self.k, self.v), strict=True):
            torch.index_select(old.narrow(2, 0, self.length), 0, index, out=new.narrow(2, 0, self.length))
        torch.index_select(lineage, 0, index, out=self._lineage.narrow(1, 0, self.length))

    @property
    def prefix(self) -> tuple[Tensor, Tensor] | None:
        """Keys and values (B / r, Hkv, shared, Dh) of the slots each block of r rows shares, or None."""
        if not self.shared:
            return None
        k, v = self._prefix
        return k[:, :, : self.shared], v[:, :, : self.shared]

    def whole(self) -> tuple[Tensor, Tensor, Tensor]:
        """All the storage, keys and values (B, Hkv, capacity, Dh), and a (1, 1, 1, capacity) score bias that
        is 0 at the slots in use and -inf after them. The slots after them are zeroed the first time a
        storage is read whole (appends write past them and reorders copy slots in use only, so they stay
        zero): a weight of 0 times a zero adds nothing, where uninitialized memory could hold NaN.

        Attention over the whole storage reads each row's keys as one contiguous run, where the slots
        in use are a run with a gap after it; for a decoding step over many rows on the AMD EPYC that
        is the faster read, although up to twice as many slots are read (capacity doubles). On the
        Xeon, reading fewer slots is faster (``WHOLE_STORAGE_READS``).
        """
        if not self._tail_zeroed:
            self.k[:, :, self.length :].zero_()
            self.v[:, :, self.length :].zero_()
            self._tail_zeroed = True
        bias = self.k.new_zeros(1, 1, 1, self.k.size(2))
        bias[..., self.length :] = float("-inf")
        return self.k, self.v, bias

    def _share(self, blocks: int, shared: int) -> None:
        """Rows now come in blocks of ``blocks`` that share their first ``shared`` slots: keep those once per
        block, copying only the slots not kept yet (a block's common history only grows as its beams advance)."""
        if blocks != self.blocks or shared < self.shared:
            self.shared, self._prefix = 0, None
        self.blocks = blocks
        if shared <= self.shared:
            return
        groups = self.k.size(0) // blocks
        if self._prefix is None or shared > self._prefix[0].size(2):
            capacity = self.k.size(2)
            grown = tuple(store.new_empty(groups, store.size(1), capacity, store.size(3)) for store in (self.k, self.v))
            if self._prefix is not None:
                for old, new in zip(self._prefix, grown, strict=True):
                    new[:, :, : self.shared] = old[:, :, : self.shared]
            self._prefix = grown
        for store, kept in zip((self.k, self.v), self._prefix, strict=True):  # rows 0, r, 2r, ...: one per block
            kept[:, :, self.shared : shared] = store[::blocks, :, self.shared : shared]
        self.shared = shared

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


def reorder_caches(caches: Sequence[KVCache], index: Tensor, *, blocks: int = 1) -> None:
    """Keep batch rows ``index`` (B',) of each cache in that order (any rows, repeats allowed).

    With the batch size unchanged (beam search reordering the beams of each sentence) the
    rows are updated in place, and only where they change: row i takes row index[i]'s slots
    from the first slot where the two lineages differ. Beams of one sentence share all but
    their last few tokens, so this is a few slots per row instead of the whole history
    (beam-5 on bench/decode.py: about 2 slots per row on average against 32). All the slots
    of a reorder are one gather and one scatter per keys or values tensor, and caches with
    equal lineages (the layers of one decoder, appended and reordered in step) share one
    plan of what to copy. An identity ``index`` copies nothing.
    A new batch size (rows dropped, or repeated into beams) selects the rows in use into new
    storage of the same capacity. (docs/benchmarks.md, issue 18.)

    ``blocks`` r >= 2: the caller promises that rows stay in blocks of r (beam search's beams
    move only within their sentence's block); each cache then keeps the slots its blocks
    have in common once per block (``KVCache.prefix``).
    """
    plans: list[tuple[Tensor, _SlotCopies | None]] = []  # (lineage before the reorder, its plan)
    todo = []
    for cache in caches:
        if cache.k is None:
            continue
        if index.numel() != cache.k.size(0) or (cache.k.requires_grad and torch.is_grad_enabled()):
            cache._select(index)
            continue
        lineage = cache.lineage
        same = [plan for seen, plan in plans if seen.shape == lineage.shape and torch.equal(seen, lineage)]
        if same:
            plan = same[0]
        else:
            plan = _SlotCopies.plan(lineage, index)
            plans.append((lineage, plan))
        todo.append((cache, plan))
    for cache, plan in todo:  # after planning: the lineages compared above are the ones before the reorder
        if plan is not None:
            plan.apply(cache)
            if blocks > 1:
                cache._share(blocks, plan.common_prefix(blocks))


class _SlotCopies:
    """What a reorder of the same batch size copies: each (row, slot) in ``rows``/``slots`` takes the keys and
    values of (``sources``, slot); then the lineage becomes ``parent``."""

    def __init__(self, rows: Tensor, sources: Tensor, slots: Tensor, parent: Tensor):
        self.rows, self.sources, self.slots, self.parent = rows, sources, slots, parent
        self._flat: dict[tuple[int, int], tuple[Tensor, Tensor]] = {}  # (Hkv, capacity) -> storage rows
        self._common: dict[int, int] = {}  # blocks -> common_prefix

    @classmethod
    def plan(cls, lineage: Tensor, index: Tensor) -> _SlotCopies | None:
        """Row i copies row index[i]'s slots from the first one whose lineage differs; None if none does."""
        parent = lineage.index_select(0, index)
        changed = lineage != parent  # (B, length)
        moves = changed.any(dim=1)
        if not bool(moves.any()):
            return None
        length = lineage.size(1)
        need = torch.where(moves, length - changed.to(torch.uint8).argmax(dim=1), 0)  # (B,) slots to copy
        rows = torch.repeat_interleave(need)  # (N,) the row of each slot to copy, row by row
        run_start = torch.cumsum(need, 0) - need  # (B,) where each row's slots begin among the N
        slots = torch.arange(rows.numel(), device=rows.device) - run_start[rows] + (length - need)[rows]
        return cls(rows, index[rows], slots, parent)

    def common_prefix(self, blocks: int) -> int:
        """The number of leading slots in which every row of each block of ``blocks`` rows has the same lineage."""
        if blocks not in self._common:
            lineage = self.parent.view(-1, blocks, self.parent.size(1))
            differs = (lineage != lineage[:, :1]).any(dim=1).any(dim=0)  # (length,) a slot some block differs at
            self._common[blocks] = int(differs.to(torch.uint8).argmax()) if bool(differs.any()) else differs.numel()
        return self._common[blocks]

    def apply(self, cache: KVCache) -> None:
        heads, capacity = cache.k.size(1), cache.k.size(2)
        if (heads, capacity) not in self._flat:  # (row, head, slot) -> row of the (B Hkv capacity, Dh) storage
            head_start = torch.arange(heads, device=self.rows.device) * capacity

            def storage_rows(rows: Tensor) -> Tensor:
                return (rows[:, None] * (heads * capacity) + head_start + self.slots[:, None]).flatten()

            self._flat[(heads, capacity)] = storage_rows(self.rows), storage_rows(self.sources)
        written, read = self._flat[(heads, capacity)]
        for store in (cache.k, cache.v):
            flat = store.view(-1, store.size(3))
            flat.index_copy_(0, written, flat.index_select(0, read))  # all read before any is written
        cache.lineage.copy_(self.parent)


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
