"""Which examples go in each batch: token-budget and fixed-size index batches, sharding, LM windows, resumable epochs.

The pipeline for one epoch, the same on every rank of a distributed run::

    batches = token_budget_batches(src_lens, tgt_lens, max_tokens=4096, shuffle=True, seed=1, epoch=e)
    mine = shard(batches, rank, world_size)          # equal counts per rank, DDP stays in lockstep
    for indices in mine:
        batch = collate_pairs([dataset[i] for i in indices]).to(device)   # seqmap.data.batching

A *batch* here is a list of example indices; ``seqmap.data.batching`` pads it into a ``Batch``.
Examples are sorted by length so each batch holds similar lengths (little
padding); shuffling changes the order of the batches, never their contents
(shuffling contents would undo the bucketing). Everything is a pure function of
``(seed, epoch)``: every rank computes the same batches and takes its own share,
and a resumed run sees exactly the batches it would have seen.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from seqmap.data.batching import SPECIALS_PER_SIDE
from seqmap.data.tokenizers import PAD


def _rng(seed: int, epoch: int, purpose: str) -> random.Random:
    """A ``random.Random`` fixed by (seed, epoch, purpose) on every platform (a string seed is hashed by SHA-512)."""
    return random.Random(f"seqmap.batching:{purpose}:{seed}:{epoch}")  # keep the string: it seeds every shuffle


# ---------------------------------------------------------------------------
# index batches


def token_budget_batches(
    src_lengths: Sequence[int],
    tgt_lengths: Sequence[int] | None,
    max_tokens: int,
    *,
    shuffle: bool,
    seed: int = 0,
    epoch: int = 0,
    max_sentences: int | None = None,
    bucket_width: int = 1,
) -> list[np.ndarray]:
    """Cut a dataset into batches of example indices (int64 arrays) whose padded size fits a token budget.

    Examples are sorted by length (target length, then source length), then cut
    greedily so that on each side ``len(batch) * (longest in batch + 1) <= max_tokens``;
    the ``+ 1`` is the BOS/EOS that ``seqmap.data.batching.collate_pairs`` adds (on the source side
    it is one token of slack, for pipelines that append EOS to sources).

    Args:
        src_lengths: length of each source, in tokens (for an LM: of each sequence).
        tgt_lengths: length of each target, or None for a language model (one side only).
        max_tokens: budget of padded tokens per batch, on each side.
        shuffle: training mode. True: ties in the sort (equal lengths, or equal
            buckets of ``bucket_width``) are broken at random and the order of the
            batches is shuffled, both from ``(seed, epoch)``. False: a stable sort
            (ties by index) and batches from shortest to longest, independent of
            ``seed`` and ``epoch`` (evaluation).
        seed: seeds the shuffle.
        epoch: the epoch; another epoch gives another shuffle.
        max_sentences: at most this many examples per batch (None = no limit).
        bucket_width: lengths are compared in buckets of this width for sorting,
            so with ``shuffle=True`` batch contents also vary between epochs; the
            budget always uses the exact lengths. 1 = sort by exact length.

    Returns:
        Batches of indices into the dataset (integer arrays); every index appears exactly once.

    Raises:
        ValueError: when one example alone exceeds ``max_tokens`` (filter long
            examples or raise ``max_tokens``); it is not silently dropped.
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be > 0, got {max_tokens}")
    if max_sentences is not None and max_sentences <= 0:
        raise ValueError(f"max_sentences must be > 0 or None, got {max_sentences}")
    if bucket_width <= 0:
        raise ValueError(f"bucket_width must be >= 1, got {bucket_width}")
    src = _lengths(src_lengths)
    tgt = src if tgt_lengths is None else _lengths(tgt_lengths)
    if tgt.shape != src.shape:
        raise ValueError(f"src_lengths has {len(src)} entries but tgt_lengths has {len(tgt)}; they must be parallel")
    if len(src) and min(int(src.min()), int(tgt.min())) < 0:
        raise ValueError("lengths must be >= 0")

    order = _length_order(src, tgt, shuffle=shuffle, seed=seed, epoch=epoch, bucket_width=bucket_width)
    batches = _cut(order, src, tgt, max_tokens, max_sentences)
    if shuffle:
        _rng(seed, epoch, "batch-order").shuffle(batches)
    return batches


def fixed_size_batches(n: int, batch_size: int, *, shuffle: bool, seed: int = 0, epoch: int = 0) -> list[list[int]]:
    """Indices 0..n-1 in batches of ``batch_size`` (the last one smaller), a new order per (seed, epoch) if shuffled.

    For inputs of one size (images), where a token budget has nothing to balance.
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    if shuffle:
        generator = torch.Generator().manual_seed(_rng(seed, epoch, "example-order").getrandbits(63))
        order = torch.randperm(n, generator=generator).tolist()
    else:
        order = list(range(n))
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def _lengths(lengths: Sequence[int] | Tensor | np.ndarray) -> np.ndarray:
    """Lengths as a signed integer array (an integer array keeps its width: planning copies stay small)."""
    if isinstance(lengths, Tensor):
        return lengths.detach().to("cpu", torch.long).reshape(-1).numpy()
    array = np.asarray(lengths).reshape(-1)
    if array.dtype.kind == "u":
        return array.astype(np.int32 if array.dtype.itemsize < 4 else np.int64)
    return array if array.dtype.kind == "i" else array.astype(np.int64)


def _length_order(src: np.ndarray, tgt: np.ndarray, *, shuffle: bool, seed: int, epoch: int,
                  bucket_width: int) -> np.ndarray:
    """Indices sorted by (target bucket, source bucket, tie-break): successive stable sorts, last key first."""
    n = len(src)
    index = np.int32 if n < 2**31 else np.int64
    if shuffle:
        generator = torch.Generator().manual_seed(_rng(seed, epoch, "tie-break").getrandbits(63))
        order = torch.randperm(n, generator=generator).numpy().astype(index)  # random tie-break
    else:
        order = np.arange(n, dtype=index)  # ties by index
    if not n:
        return order
    src_key, tgt_key = src // bucket_width, tgt // bucket_width
    key = tgt_key.astype(np.int64) * (int(src_key.max()) + 1) + src_key  # one sort by (target, source) bucket
    key = key.astype(np.min_scalar_type(int(key.max())))  # 16-bit keys sort by radix
    return order[np.argsort(key[order], kind="stable")]


def _cut(order: np.ndarray, src: np.ndarray, tgt: np.ndarray, max_tokens: int,
         max_sentences: int | None) -> list[np.ndarray]:
    """Greedy cut of sorted indices: each batch takes as many of the next examples as fit, i.e. while
    ``len(batch) * (longest in batch + 1) <= max_tokens`` on both sides (planned on the lengths, no per-example
    Python objects)."""
    extra = SPECIALS_PER_SIDE
    width = np.maximum(src, tgt)[order] + extra  # the padded width an example needs, in batch order
    over = np.flatnonzero(width > max_tokens)
    if over.size:
        i = int(order[over[0]])
        raise ValueError(
            f"example {i} needs {int(width[over[0]])} tokens (source {int(src[i])}, target {int(tgt[i])}, +{extra} "
            f"for BOS/EOS), more than max_tokens={max_tokens}; raise max_tokens or filter out examples longer than "
            f"{max_tokens - extra} tokens"
        )
    most = max_tokens if max_sentences is None else min(max_tokens, max_sentences)  # width >= 1: never more
    counts = np.arange(1, most + 1)
    bounds, start, n = [], 0, len(order)
    while start < n:
        window = width[start:start + min(most, max_tokens // int(width[start]))]  # its first bounds its size
        fits = np.maximum.accumulate(window) * counts[:len(window)] <= max_tokens  # a prefix of True
        start += int(fits.argmin()) if not fits[-1] else len(window)
        bounds.append(start)
    return np.split(order, bounds[:-1]) if n else []


def shard(batches: Sequence[list[int]], rank: int, world_size: int, *, drop_remainder: bool = False) -> list[list[int]]:
    """This rank's share of the batches: ``batches[rank::world_size]``, equal counts on every rank.

    All ranks must pass the same ``batches`` (same seed and epoch). When the count
    is not a multiple of ``world_size``, the default pads the list by repeating
    batches from its start (as ``torch.utils.data.DistributedSampler`` does), so
    every example is seen at least once and a few twice; ``drop_remainder=True``
    drops the last ``len(batches) % world_size`` batches instead (with shuffling,
    different ones each epoch). Either way every rank gets the same number of
    batches and distributed steps stay in lockstep.
    """
    if world_size <= 0 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
    batches = list(batches)
    if drop_remainder:
        batches = batches[: len(batches) - len(batches) % world_size]
    elif batches and len(batches) % world_size:
        missing = world_size - len(batches) % world_size
        batches = batches + [batches[k % len(batches)] for k in range(missing)]
    return batches[rank::world_size]

# ---------------------------------------------------------------------------
# contiguous LM windows over one long stream of ids


def _stream(token_ids: Sequence[int] | Tensor, context: int) -> Tensor:
    stream = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1)
    if context <= 0:
        raise ValueError(f"context must be > 0, got {context}")
    if len(stream) < 2:
        raise ValueError(f"the token stream has {len(stream)} tokens; an LM window needs at least 2")
    return stream


def lm_chunks(token_ids: Sequence[int] | Tensor, context: int, pad_id: int = PAD) -> tuple[Tensor, Tensor]:
    """Consecutive, non-overlapping windows for evaluation: every token after the first is a target once.

    Window ``i`` has inputs ``stream[i*context : (i+1)*context]`` and targets
    shifted by one. The last window may be short: it is right-padded with
    ``pad_id`` in both tensors (the loss ignores PAD targets), so perplexity
    covers the whole stream.

    Returns:
        inputs, targets: (N, context) each, N = ceil((len(stream) - 1) / context).
    """
    stream = _stream(token_ids, context)
    n_targets = len(stream) - 1
    n = -(-n_targets // context)
    inputs = torch.full((n * context,), pad_id, dtype=torch.long)
    targets = torch.full((n * context,), pad_id, dtype=torch.long)
    inputs[:n_targets] = stream[:-1]
    targets[:n_targets] = stream[1:]
    return inputs.view(n, context), targets.view(n, context)


def lm_random_chunks(
    token_ids: Sequence[int] | Tensor | np.ndarray, context: int, batch_size: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """``batch_size`` windows at random offsets, drawn from ``generator`` (nanoGPT-style training batches). A numpy
    stream (a memory-mapped one) is read only at the windows drawn.

    Returns:
        inputs, targets: (B, context) each; ``targets[b, j] == inputs[b, j + 1]``.
    """
    length = _stream_length(token_ids, context)
    if length <= context:
        raise ValueError(f"the token stream has {length} tokens; random windows need more than context={context}")
    starts = torch.randint(length - context, (batch_size,), generator=generator)
    offsets = starts[:, None] + torch.arange(context)[None, :]  # (B, context)
    if isinstance(token_ids, np.ndarray):
        index = offsets.numpy()
        return _ids(token_ids[index]), _ids(token_ids[index + 1])
    stream = _stream(token_ids, context)
    return stream[offsets], stream[offsets + 1]


def _stream_length(token_ids, context: int) -> int:
    if context <= 0:
        raise ValueError(f"context must be > 0, got {context}")
    length = len(token_ids)
    if length < 2:
        raise ValueError(f"the token stream has {length} tokens; an LM window needs at least 2")
    return length


def _ids(array: np.ndarray) -> Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))


def lm_stream_rows(token_ids: Sequence[int] | Tensor | np.ndarray, rows: int) -> Tensor | np.ndarray:
    """The stream cut into ``rows`` contiguous rows (B, N), N = len // rows; the tail that does not fit is dropped.
    A numpy stream gives a numpy view (nothing is read until a window is).

    Row b continues where row b - 1 ends in the text. Consecutive windows of one
    row (:func:`lm_stream_window`) read on through the text, so a recurrent model
    can carry its state from one batch to the next (truncated back-propagation
    through time, as in Zaremba et al. 2014).
    """
    stream = token_ids.reshape(-1) if isinstance(token_ids, np.ndarray) else \
        torch.as_tensor(token_ids, dtype=torch.long).reshape(-1)
    n = len(stream) // rows
    if n < 2:
        raise ValueError(f"the token stream has {len(stream)} tokens: too few for {rows} rows of at least 2")
    return stream[: n * rows].reshape(rows, n)


def lm_stream_window(rows: Tensor | np.ndarray, context: int, index: int) -> tuple[Tensor, Tensor]:
    """Window ``index`` of every row: inputs (B, context) and targets shifted by one.

    There are ``(N - 1) // context`` whole windows per row (an epoch); ``index`` must be below that.
    """
    start = index * context
    if index < 0 or start + context + 1 > rows.shape[1]:
        raise IndexError(f"window {index} of {context} tokens does not fit rows of {rows.shape[1]} tokens")
    inputs, targets = rows[:, start: start + context], rows[:, start + 1: start + context + 1]
    return (_ids(inputs), _ids(targets)) if isinstance(rows, np.ndarray) else (inputs, targets)


# ---------------------------------------------------------------------------
# resumable epochs


class EpochIterator:
    """Iterate over epochs of batches and resume exactly at the next batch.

    ``batches_fn(epoch)`` returns that epoch's batches (for this rank); it must be
    a pure function of the epoch, e.g. ``token_budget_batches(..., epoch=epoch)``
    followed by :func:`shard`. Iterating yields ``(epoch, index, batch)``; after
    each yield :meth:`state_dict` names the *next* batch, so save it with the
    checkpoint after the optimiser step and resume with
    ``EpochIterator(batches_fn, **state)``.

    Args:
        batches_fn: epoch -> list of batches.
        epoch: the epoch to start in (0 = the first).
        batch: the index of the first batch to yield in that epoch.
        max_epochs: stop before this epoch (None = run forever).
    """

    def __init__(
        self, batches_fn: Callable[[int], Sequence], epoch: int = 0, batch: int = 0, max_epochs: int | None = None
    ) -> None:
        if epoch < 0 or batch < 0:
            raise ValueError(f"epoch and batch must be >= 0, got epoch={epoch}, batch={batch}")
        self.batches_fn = batches_fn
        self.epoch = epoch
        self.batch = batch
        self.max_epochs = max_epochs

    def state_dict(self) -> dict[str, int]:
        """Where to resume: ``{"epoch": e, "batch": i}``, the next batch to yield."""
        return {"epoch": self.epoch, "batch": self.batch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.batch = int(state["epoch"]), int(state["batch"])

    def __iter__(self) -> Iterator[tuple[int, int, object]]:
        while self.max_epochs is None or self.epoch < self.max_epochs:
            epoch, start = self.epoch, self.batch
            batches = self.batches_fn(epoch)
            if not batches:
                raise ValueError(f"batches_fn({epoch}) returned no batches; an epoch needs at least one")
            if start >= len(batches):  # resumed at the very end of an epoch
                self.epoch, self.batch = epoch + 1, 0
                continue
            for index in range(start, len(batches)):
                # the state names the batch after this one, before the caller trains on this one
                self.epoch, self.batch = (epoch, index + 1) if index + 1 < len(batches) else (epoch + 1, 0)
                yield epoch, index, batches[index]
