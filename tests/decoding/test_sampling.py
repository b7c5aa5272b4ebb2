"""Sampling filters and the sampler: top-k=1 is greedy, seeds reproduce, filters keep what they promise."""

import math

import torch

from seqmap.config import ModelConfig
from seqmap.decoding.greedy import greedy
from seqmap.decoding.sampling import sample, top_k_filter, top_p_filter
from seqmap.models.builder import build_model


def test_top_k_keeps_exactly_k_most_likely():
    lp = torch.log_softmax(torch.tensor([[1.0, 3.0, 2.0, 0.0]]), -1)
    kept = torch.isfinite(top_k_filter(lp, 2))
    assert kept.tolist() == [[False, True, True, False]]
    assert torch.equal(top_k_filter(lp, 0), lp)


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    lp = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    assert torch.isfinite(top_p_filter(lp, 0.7)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(top_p_filter(lp, 0.5)).tolist() == [[True, False, False, False]]
    assert torch.isfinite(top_p_filter(lp, 0.81)).tolist() == [[True, True, True, False]]
    assert torch.isfinite(top_p_filter(lp, 0.01)).sum() == 1  # the best token always survives
    # rows are filtered independently, whatever their order
    two = torch.tensor([[0.05, 0.15, 0.3, 0.5], [0.5, 0.3, 0.15, 0.05]]).log()
    assert torch.isfinite(top_p_filter(two, 0.7)).tolist() == [[False, False, True, True], [True, True, False, False]]


def _model():
    torch.manual_seed(0)
    return build_model(ModelConfig(family="transformer", src_vocab=12, tgt_vocab=12, d_model=16, n_heads=2, d_ff=32,
                                   enc_layers=1, dec_layers=1, dropout=0.0)).eval()


def test_top_k_one_equals_greedy_and_seeds_reproduce():
    model = _model()
    src = torch.randint(3, 12, (4, 6))
    mask = torch.ones_like(src, dtype=torch.bool)
    g = greedy(model, src, mask, bos=1, eos=2, max_len=8)
    s = sample(model, src, mask, bos=1, eos=2, max_len=8, top_k=1, generator=torch.Generator().manual_seed(3))
    assert torch.equal(g.tokens, s.tokens)
    a = sample(model, src, mask, bos=1, eos=2, max_len=8, temperature=2.0, generator=torch.Generator().manual_seed(7))
    b = sample(model, src, mask, bos=1, eos=2, max_len=8, temperature=2.0, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a.tokens, b.tokens)
    assert math.isclose(a.scores.sum().item(), b.scores.sum().item())


def test_top_k_keeps_no_more_than_k_when_values_tie():
    lp = torch.log_softmax(torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.0]]), -1)
    kept = torch.isfinite(top_k_filter(lp, 2))
    assert kept.tolist() == [[False, True, True, False, False]]  # ties at the 2nd place: the lower ids
    assert int(torch.isfinite(top_k_filter(torch.zeros(3, 7), 4)).sum()) == 12
