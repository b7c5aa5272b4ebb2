"""``seqmap.decoding.select``: chunked argmax / top-k give exactly ``Tensor.max`` / ``topk``'s answers."""

from __future__ import annotations

import pytest
import torch

from seqmap.decoding.select import chunk_width, row_max, top_candidates


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _reference(scores, log_probs, want):
    g, n = scores.shape
    return (scores[:, :, None] + log_probs.view(g, n, -1)).view(g, -1).topk(want, dim=1)


def test_chunk_width_divides_the_row_or_is_zero():
    assert chunk_width(8000) == 64 and chunk_width(32000) == 64 and chunk_width(58101) == 107
    assert chunk_width(97) == 0 and chunk_width(10) == 0 and chunk_width(64) == 32


@pytest.mark.parametrize("width", [8000, 58101, 97, 10])
def test_row_max_equals_tensor_max_with_ties_taking_the_first_position(width):
    x = torch.log_softmax(torch.randn(33, width) * 3, dim=-1)
    x[0, -1] = x[0, 1] = 5.0  # a tie in two chunks: the first one wins
    x[1, 3] = x[1, 2] = 5.0  # a tie within one chunk
    x[2] = float("-inf")  # every token banned
    values, indices = row_max(x)
    ref_values, ref_indices = x.max(dim=-1)
    assert torch.equal(values, ref_values) and torch.equal(indices, ref_indices)
    assert indices[0] == 1 and indices[1] == 2 and indices[2] == 0


def test_row_max_of_a_non_contiguous_view_falls_back():
    x = torch.randn(8000, 6).t()
    assert torch.equal(row_max(x)[1], x.max(dim=-1).indices)


@pytest.mark.parametrize("width", [8000, 4096, 97])
@pytest.mark.parametrize("beams", [1, 5])
def test_top_candidates_equal_topk_over_the_expanded_scores(width, beams):
    g, want = 7, 10
    log_probs = torch.log_softmax(torch.randn(g * beams, width) * 3, dim=-1)
    log_probs[:, 5] = float("-inf")  # a banned token
    scores = torch.randn(g, beams) * 4
    if beams > 1:
        scores[3, 1:] = float("-inf")  # a sentence with one live beam
    values, indices = top_candidates(scores, log_probs, want)
    ref_values, ref_indices = _reference(scores, log_probs, want)
    assert torch.equal(values, ref_values) and torch.equal(indices, ref_indices)


def test_top_candidates_with_more_wanted_than_chunks_fall_back():
    scores, log_probs = torch.zeros(2, 1), torch.log_softmax(torch.randn(2, 128), dim=-1)  # two chunks of 64
    values, indices = top_candidates(scores, log_probs, 10)
    ref_values, ref_indices = _reference(scores, log_probs, 10)
    assert torch.equal(values, ref_values) and torch.equal(indices, ref_indices)
