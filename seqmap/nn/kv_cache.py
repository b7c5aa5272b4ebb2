"""The key/value cache of incremental decoding: what each self-attention layer has seen so far.

``KVCache`` holds one layer's keys and values in storage that grows by doubling; ``reorder_caches``
moves the rows of a decoder's caches together (beam search), copying only the slots that change and
keeping the slots a sentence's beams share once per sentence (``KVCache.prefix``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


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
        in use are a run with a gap after it, at the cost of reading up to twice as many slots (capacity
        doubles); which read is faster depends on the CPU (``seqmap.nn.multihead.WHOLE_STORAGE_READS``).
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
    their last few tokens, so this is a few slots per row instead of the whole history. All the slots
    of a reorder are one gather and one scatter per keys or values tensor, and caches with
    equal lineages (the layers of one decoder, appended and reordered in step) share one
    plan of what to copy. An identity ``index`` copies nothing.
    A new batch size (rows dropped, or repeated into beams) selects the rows in use into new
    storage of the same capacity.

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
