"""Token-budget and fixed-size index batches, sharding, LM windows and resumable epochs."""

import numpy as np
import pytest
import torch

from seqmap.data.batching import Batch
from seqmap.data.samplers import (
    EpochIterator,
    lm_chunks,
    lm_random_chunks,
    lm_stream_rows,
    lm_stream_window,
    shard,
    token_budget_batches,
)
from seqmap.data.tokenizers import PAD

MAX_TOKENS = 1024


def skewed_lengths(n: int = 2000, seed: int = 0) -> tuple[list[int], list[int]]:
    """Log-normal source lengths (median ~20, tail to 200), targets 0.8-1.2x the source: like real MT data."""
    g = torch.Generator().manual_seed(seed)
    src = (torch.randn(n, generator=g) * 0.7 + 3).exp().long().clamp(1, 200)
    tgt = (src.float() * (0.8 + 0.4 * torch.rand(n, generator=g))).long().clamp(1, 200)
    return src.tolist(), tgt.tolist()


def padding_fraction(batches, src, tgt) -> float:
    """Share of padded positions (both sides, BOS/EOS counted as real) that are padding."""
    real = padded = 0
    for batch in batches:
        for lengths in (src, tgt):
            real += sum(lengths[i] + 1 for i in batch)
            padded += len(batch) * (max(lengths[i] for i in batch) + 1)
    return 1 - real / padded


@pytest.mark.parametrize("bucket_width", [1, 8])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_index_once_and_within_budget(shuffle, bucket_width):
    src, tgt = skewed_lengths()
    batches = token_budget_batches(src, tgt, MAX_TOKENS, shuffle=shuffle, seed=3, epoch=1, bucket_width=bucket_width)
    assert sorted(i for b in batches for i in b) == list(range(len(src)))
    for b in batches:
        assert len(b) * (max(src[i] for i in b) + 1) <= MAX_TOKENS
        assert len(b) * (max(tgt[i] for i in b) + 1) <= MAX_TOKENS
    # the greedy cut fills batches: on average at least 80% of the budget on the longer side
    fill = sum(len(b) * (max(max(src[i], tgt[i]) for i in b) + 1) for b in batches) / (len(batches) * MAX_TOKENS)
    assert fill > 0.8


def test_batches_are_length_homogeneous():
    src, tgt = skewed_lengths()
    batches = token_budget_batches(src, tgt, MAX_TOKENS, shuffle=True, seed=0, epoch=0)
    # the same batch sizes filled at random, for comparison
    perm = torch.randperm(len(src), generator=torch.Generator().manual_seed(1)).tolist()
    random_batches, start = [], 0
    for b in batches:
        random_batches.append(perm[start : start + len(b)])
        start += len(b)
    bucketed, unsorted = padding_fraction(batches, src, tgt), padding_fraction(random_batches, src, tgt)
    assert bucketed < 0.15, bucketed  # ~0.10 measured (the source side is sorted second)
    assert unsorted > 0.5, unsorted  # ~0.75 measured
    assert bucketed < unsorted / 4


def _lists(batches) -> list[list[int]]:
    return [b.tolist() for b in batches]


def test_deterministic_for_seed_and_epoch():
    src, tgt = skewed_lengths()
    a = _lists(token_budget_batches(src, tgt, MAX_TOKENS, shuffle=True, seed=5, epoch=2))
    assert a == _lists(token_budget_batches(src, tgt, MAX_TOKENS, shuffle=True, seed=5, epoch=2))
    assert a != _lists(token_budget_batches(src, tgt, MAX_TOKENS, shuffle=True, seed=5, epoch=3))
    assert a != _lists(token_budget_batches(src, tgt, MAX_TOKENS, shuffle=True, seed=6, epoch=2))
    # evaluation order does not depend on seed or epoch, and runs shortest first
    ev = token_budget_batches(src, tgt, MAX_TOKENS, shuffle=False, seed=5, epoch=2)
    assert _lists(ev) == _lists(token_budget_batches(src, tgt, MAX_TOKENS, shuffle=False, seed=0, epoch=0))
    longest = [max(tgt[i] for i in b) for b in ev]
    assert longest == sorted(longest)


def test_shuffle_changes_batch_order_not_contents():
    # distinct lengths: no ties, so shuffling can only reorder the batches
    lengths = torch.randperm(300, generator=torch.Generator().manual_seed(0)).add(1).tolist()
    ordered = _lists(token_budget_batches(lengths, lengths, 600, shuffle=False))
    shuffled = _lists(token_budget_batches(lengths, lengths, 600, shuffle=True, seed=0, epoch=0))
    assert shuffled != ordered
    assert sorted(map(sorted, shuffled)) == sorted(map(sorted, ordered))


def test_ties_are_broken_at_random_but_batch_shapes_stay():
    lengths = [1 + i % 7 for i in range(500)]  # many ties; a language model (one side)
    ordered = token_budget_batches(lengths, None, 64, shuffle=False)
    profile = sorted(tuple(sorted(lengths[i] for i in b)) for b in ordered)
    epochs = [token_budget_batches(lengths, None, 64, shuffle=True, seed=0, epoch=e) for e in range(2)]
    for batches in epochs:
        assert sorted(tuple(sorted(lengths[i] for i in b)) for b in batches) == profile
    contents = [sorted(sorted(b.tolist()) for b in batches) for batches in epochs]
    assert contents[0] != contents[1]  # different contents per epoch


def test_max_sentences_and_errors():
    lengths = [3] * 100
    batches = token_budget_batches(lengths, lengths, 10_000, shuffle=False, max_sentences=16)
    assert [len(b) for b in batches] == [16] * 6 + [4]
    with pytest.raises(ValueError, match="max_tokens=50"):
        token_budget_batches([10, 60, 3], [10, 5, 3], 50, shuffle=False)
    with pytest.raises(ValueError, match="parallel"):
        token_budget_batches([1, 2], [1], 50, shuffle=False)
    assert token_budget_batches([], None, 50, shuffle=True) == []


def test_the_plan_is_the_per_example_greedy_cut():
    """The vectorized cut equals the greedy rule written per example, on random lengths and budgets."""
    rng = np.random.default_rng(0)
    for trial in range(30):
        n, high = int(rng.integers(1, 400)), int(rng.choice([5, 60, 300]))
        src, tgt = rng.integers(0, high, n), rng.integers(0, high, n)
        budget, most = int(rng.choice([320, 700, 4096])), rng.choice([None, 3, 16])
        for batches in (token_budget_batches(src, tgt, budget, shuffle=False, max_sentences=most),
                        token_budget_batches(src, tgt, budget, shuffle=False, max_sentences=most, bucket_width=4)):
            order = np.concatenate(batches)  # unshuffled: the batches in the order they were cut
            expected, batch = [], []
            for i in order:  # grow while the padded size fits, else start the next batch
                longest = max([max(src[j], tgt[j]) + 1 for j in batch + [i]])
                if batch and ((len(batch) + 1) * longest > budget or (most and len(batch) >= most)):
                    expected.append(batch)
                    batch = []
                batch.append(int(i))
            expected.append(batch)
            assert _lists(batches) == expected, trial


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5, 13])
@pytest.mark.parametrize("drop_remainder", [False, True])
def test_shards_disjoint_equal_and_covering(world_size, drop_remainder):
    batches = [[2 * k, 2 * k + 1] for k in range(11)]
    shards = [shard(batches, r, world_size, drop_remainder=drop_remainder) for r in range(world_size)]
    assert len({len(s) for s in shards}) == 1  # lockstep: same count on every rank
    positions = [k for r in range(world_size) for k in range(r, len(shards[r]) * world_size, world_size)]
    assert len(positions) == len(set(positions))  # each position of the (padded) list goes to one rank
    seen = [tuple(b) for s in shards for b in s]
    remainder = len(batches) % world_size
    if drop_remainder:
        assert sorted(seen) == sorted(map(tuple, batches[: len(batches) - remainder]))
    else:
        assert {tuple(b) for b in batches} == set(seen)  # everything is covered
        pad = (world_size - remainder) % world_size
        assert len(seen) == len(batches) + pad
        assert sorted(seen) == sorted(map(tuple, batches + [batches[k % len(batches)] for k in range(pad)]))


def test_shard_errors():
    with pytest.raises(ValueError, match="rank"):
        shard([[0]], 2, 2)
    assert shard([], 0, 4) == []


def test_lm_chunks_cover_the_stream_once():
    stream = list(range(3, 3 + 23))  # 23 tokens, 22 targets
    inputs, targets = lm_chunks(stream, context=5)
    assert inputs.shape == targets.shape == (5, 5)
    flat_in, flat_out = inputs.flatten(), targets.flatten()
    real = flat_in[1:] != PAD
    assert torch.equal(flat_out[:-1][real], flat_in[1:][real])  # targets are the inputs shifted by one
    assert targets[targets != PAD].tolist() == stream[1:]  # every target exactly once, in order
    assert inputs[inputs != PAD].tolist() == stream[:-1]
    batch = Batch.from_lm_windows(inputs, targets)
    assert batch.n_tokens == 22 and batch.src is None


def test_lm_random_chunks_are_shifted_windows():
    stream = torch.arange(3, 103)
    inputs, targets = lm_random_chunks(stream, context=8, batch_size=16, generator=torch.Generator().manual_seed(0))
    assert inputs.shape == targets.shape == (16, 8)
    assert torch.equal(targets[:, :-1], inputs[:, 1:])
    assert torch.equal(targets - inputs, torch.ones_like(inputs))  # consecutive in the stream
    again = lm_random_chunks(stream, context=8, batch_size=16, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again[0], inputs)
    with pytest.raises(ValueError, match="context=100"):
        lm_random_chunks(stream, context=100, batch_size=1, generator=torch.Generator())


def test_epoch_iterator_resumes_at_the_next_batch():
    def batches_fn(epoch):  # a different number of batches each epoch
        return [[epoch, k] for k in range(3 + epoch)]

    full = list(EpochIterator(batches_fn, max_epochs=3))
    assert [(e, i) for e, i, _ in full] == [(e, i) for e in range(3) for i in range(3 + e)]
    assert all(batch == [e, i] for e, i, batch in full)
    for stop in range(1, len(full)):
        first = EpochIterator(batches_fn, max_epochs=3)
        seen = []
        for item in first:
            seen.append(item)
            if len(seen) == stop:
                break
        state = first.state_dict()
        resumed = EpochIterator(batches_fn, **state, max_epochs=3)
        assert seen + list(resumed) == full, stop


def test_epoch_iterator_resumed_past_the_end_of_an_epoch_starts_the_next():
    """A saved position at or past the end of its epoch (the data gives fewer batches than when it was saved) goes
    on with the next epoch's first batch rather than yielding nothing or failing; ``load_state_dict`` resumes too."""
    def batches_fn(epoch):
        return [f"{epoch}.{k}" for k in range(2)]

    assert [b for _, _, b in EpochIterator(batches_fn, epoch=0, batch=5, max_epochs=2)] == ["1.0", "1.1"]
    assert [b for _, _, b in EpochIterator(batches_fn, epoch=1, batch=2, max_epochs=2)] == []
    it = EpochIterator(batches_fn, max_epochs=3)
    it.load_state_dict({"epoch": 1, "batch": 1})
    assert [(e, i, b) for e, i, b in it] == [(1, 1, "1.1"), (2, 0, "2.0"), (2, 1, "2.1")]
    assert it.state_dict() == {"epoch": 3, "batch": 0}
    with pytest.raises(ValueError, match="epoch and batch must be >= 0, got epoch=0, batch=-1"):
        EpochIterator(batches_fn, batch=-1)


def test_epoch_iterator_rejects_empty_epochs():
    with pytest.raises(ValueError, match="no batches"):
        next(iter(EpochIterator(lambda epoch: [])))


def test_stream_rows_and_windows_read_on_through_the_text():
    stream = list(range(103))
    rows = lm_stream_rows(stream, 4)  # 4 rows of 25; the last 3 tokens do not fit
    assert rows.shape == (4, 25) and rows[1, 0].item() == 25 and rows[3, -1].item() == 99
    inputs0, targets0 = lm_stream_window(rows, 6, 0)
    inputs1, _ = lm_stream_window(rows, 6, 1)
    assert torch.equal(targets0, inputs0 + 1)
    assert torch.equal(inputs1[:, 0], inputs0[:, -1] + 1)  # the next window continues each row
    lm_stream_window(rows, 6, 3)  # (25 - 1) // 6 = 4 whole windows
    with pytest.raises(IndexError, match="window 4 of 6 tokens"):
        lm_stream_window(rows, 6, 4)
    with pytest.raises(ValueError, match="too few for 60 rows"):
        lm_stream_rows(stream, 60)


def test_a_numpy_stream_gives_the_windows_of_a_list():
    """A memory-mapped (numpy, read-only, uint16) stream is windowed exactly as the same ids in a list."""
    ids = [int(i) for i in np.random.default_rng(0).integers(0, 500, 1000)]
    stream = np.array(ids, dtype=np.uint16)
    stream.flags.writeable = False
    for seed in (0, 1):
        ours = lm_random_chunks(stream, 16, 4, torch.Generator().manual_seed(seed))
        theirs = lm_random_chunks(ids, 16, 4, torch.Generator().manual_seed(seed))
        assert all(torch.equal(a, b) and a.dtype == torch.long for a, b in zip(ours, theirs, strict=True))
    rows, list_rows = lm_stream_rows(stream, 3), lm_stream_rows(ids, 3)
    assert isinstance(rows, np.ndarray) and rows.shape == tuple(list_rows.shape)
    for index in range(2):
        assert all(torch.equal(a, b) for a, b in zip(lm_stream_window(rows, 16, index),
                                                      lm_stream_window(list_rows, 16, index), strict=True))
