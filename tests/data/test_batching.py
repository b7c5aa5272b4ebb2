"""Collation: (source, target) pairs and LM sequences padded into teacher-forcing batches."""

import pytest
import torch

from seqmap.data.batching import (
    BOS,
    EOS,
    PAD,
    Batch,
    collate_lm,
    collate_pairs,
)


def test_collate_pairs():
    batch = collate_pairs([([5, 6, 7], [8, 9]), ([5], [8, 9, 10, 11])])
    assert batch.src.shape == batch.src_mask.shape == (2, 3)
    assert batch.tgt_in.shape == batch.tgt_out.shape == batch.tgt_mask.shape == (2, 5)
    assert batch.src.dtype == batch.tgt_in.dtype == torch.int64 and batch.src_mask.dtype == torch.bool
    assert batch.src.tolist() == [[5, 6, 7], [5, PAD, PAD]]
    assert batch.src_mask.tolist() == [[True] * 3, [True, False, False]]
    assert batch.tgt_in.tolist() == [[BOS, 8, 9, PAD, PAD], [BOS, 8, 9, 10, 11]]
    assert batch.tgt_out.tolist() == [[8, 9, EOS, PAD, PAD], [8, 9, 10, 11, EOS]]
    assert batch.tgt_mask.tolist() == [[True] * 3 + [False] * 2, [True] * 5]
    assert batch.n_tokens == 8 == int(batch.tgt_mask.sum())
    moved = batch.to("cpu")
    assert isinstance(moved, Batch) and torch.equal(moved.tgt_out, batch.tgt_out)
    # an empty target still predicts EOS
    empty = collate_pairs([([4], [])], pad_id=0, bos_id=1, eos_id=2)
    assert empty.tgt_in.tolist() == [[BOS]] and empty.tgt_out.tolist() == [[EOS]] and empty.n_tokens == 1


def test_collate_lm():
    batch = collate_lm([[5, 6, 7], [8]])
    assert batch.src is None and batch.src_mask is None
    assert batch.tgt_in.tolist() == [[BOS, 5, 6, 7], [BOS, 8, PAD, PAD]]
    assert batch.tgt_out.tolist() == [[5, 6, 7, EOS], [8, EOS, PAD, PAD]]
    assert batch.n_tokens == 6
    raw = collate_lm([[5, 6, 7], [8, 9]], bos_id=None, eos_id=None)  # chunks of context + 1 tokens
    assert raw.tgt_in.tolist() == [[5, 6], [8, PAD]]
    assert raw.tgt_out.tolist() == [[6, 7], [9, PAD]]
    assert raw.tgt_mask.tolist() == [[True, True], [True, False]]
    with pytest.raises(ValueError, match="nothing to predict"):
        collate_lm([[5]], bos_id=None, eos_id=None)
