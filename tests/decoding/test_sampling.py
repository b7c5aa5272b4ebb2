"""Sampling filters and the sampler: top-k=1 is greedy, seeds reproduce, filters keep what they promise."""

import math

import pytest
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


def test_top_k_keeps_what_a_stable_sort_keeps_among_many_ties():
    g = torch.Generator().manual_seed(0)
    lp = torch.randint(0, 6, (50, 300), generator=g).float()  # every value tied many times
    for k in (1, 7, 60, 299):
        reference = lp.sort(dim=-1, descending=True, stable=True).indices[:, :k]  # ties: the lower ids
        kept = torch.zeros_like(lp, dtype=torch.bool).scatter(-1, reference, True)
        assert torch.equal(torch.isfinite(top_k_filter(lp, k)), kept), k


def test_top_p_ranks_a_few_candidates_or_every_token_of_a_wide_row():
    from seqmap.decoding.sampling import TOP_P_CANDIDATES

    vocab = 4 * TOP_P_CANDIDATES
    peaked = torch.full((vocab,), -60.0)
    peaked[[5, 900, 17, 300]] = torch.tensor([0.5, 0.25, 0.125, 0.125]).log()  # the rest: about 1e-26 each
    flat = torch.zeros(vocab)  # every token 1 / vocab: the candidates hold a quarter of the mass
    out = top_p_filter(torch.stack([peaked, flat]), 0.8)
    assert torch.isfinite(out[0]).nonzero().squeeze(1).tolist() == [5, 17, 900]  # 0.5 + 0.25 + 0.125 >= 0.8
    assert torch.equal(out[0][torch.isfinite(out[0])], peaked[[5, 17, 900]])
    assert int(torch.isfinite(out[1]).sum()) == 820  # all ranked: 820 / 1024 is the first share >= 0.8
    assert int(torch.isfinite(top_p_filter(flat[None], 0.75)).sum()) == 768  # exactly 0.75


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


def test_row_samplers_let_finished_rows_leave_and_each_row_samples_as_alone():
    """``RowSampler`` draws each row from its own generator, so ``decode_loop`` drops finished rows (as for
    greedy) and every row's text is the one it gets alone with its seed; one shared generator keeps the batch."""
    from seqmap.decoding.greedy import decode_loop
    from seqmap.decoding.sampling import RowSampler, sampling_choice
    from seqmap.models.builder import build_model

    torch.manual_seed(0)
    model = build_model(ModelConfig(family="lm", tgt_vocab=24, d_model=32, n_heads=2, d_ff=64, dec_layers=2,
                                    dropout=0.0)).eval()
    limits = torch.tensor([2, 7, 3, 9, 1, 6, 4, 8])  # rows end at different steps
    prompts = torch.randint(4, 24, (8, 3))
    calls = []
    step = model.decode_step
    model.decode_step = lambda tokens, *a, **k: calls.append(tokens.size(0)) or step(tokens, *a, **k)
    seeds = [11, 12, 13, 14, 15, 16, 17, 18]

    def sampler(rows):
        return RowSampler(1.5, 0, 1.0, [torch.Generator().manual_seed(seeds[b]) for b in rows])

    kw = dict(bos=1, eos=2, pad=0, banned=[0, 1, 2])  # EOS banned: each row runs to its own limit
    out = decode_loop(model, None, None, max_len=limits, prompt=prompts, choose=sampler(range(8)), **kw)
    assert out.lengths.tolist() == limits.tolist()
    assert calls[1] == 8 and calls[-1] < 8 and len(set(calls)) > 2  # rows left the batch, more than once
    for b in range(8):
        alone = decode_loop(model, None, None, max_len=int(limits[b]), prompt=prompts[b:b + 1], choose=sampler([b]),
                            **kw)
        assert out.tokens[b, :int(limits[b])].tolist() == alone.tokens[0].tolist(), b
        torch.testing.assert_close(out.scores[b], alone.scores[0], rtol=0, atol=1e-5)
    calls.clear()
    shared = sampling_choice(1.5, 0, 1.0, torch.Generator().manual_seed(0))
    decode_loop(model, None, None, max_len=limits, prompt=prompts, choose=shared, **kw)
    assert set(calls) == {8}  # one generator for all rows: every row stays, so its draws stay as they were


def test_inverse_cdf_draws_the_distribution_and_never_a_token_of_probability_zero():
    from seqmap.decoding.sampling import inverse_cdf

    probs = torch.tensor([[0.125, 0.0, 0.5, 0.375, 0.0], [0.0, 0.0, 0.0, 1.0, 0.0]])  # exact in binary
    uniform = torch.tensor([0.0, 0.0])  # the first token of positive probability
    assert inverse_cdf(probs, uniform).tolist() == [0, 3]
    uniform = torch.tensor([1 - 2.0 ** -53, 1 - 2.0 ** -53])  # the largest draw: the last of positive probability
    assert inverse_cdf(probs, uniform).tolist() == [3, 3]
    edges = torch.tensor([0.125, 0.625 - 1e-9, 0.625], dtype=torch.float64)  # at and below the cumulative sums
    assert inverse_cdf(probs[:1].expand(3, 5), edges).tolist() == [2, 2, 3]
    g = torch.Generator().manual_seed(0)
    draws = inverse_cdf(probs[:1].expand(60_000, 5), torch.rand(60_000, dtype=torch.float64, generator=g))
    freq = torch.bincount(draws, minlength=5).double() / 60_000
    torch.testing.assert_close(freq, torch.tensor([0.125, 0.0, 0.5, 0.375, 0.0], dtype=torch.float64), rtol=0,
                               atol=0.01)


def test_filters_that_leave_nothing_to_draw_are_refused_and_a_fully_banned_row_draws_id_0():
    """top_p 0 (or NaN, or a NaN temperature) kept no token, and a row whose every token no_repeat_ngram bans
    had nothing to draw: both failed on an index V deep in torch. Greedy takes id 0 at -inf there; so does sampling."""
    from seqmap.decoding.sampling import inverse_cdf

    model = _model()
    src, mask = torch.randint(3, 12, (2, 4)), torch.ones(2, 4, dtype=torch.bool)
    for bad in (dict(top_p=0.0), dict(top_p=float("nan")), dict(temperature=float("nan"))):
        with pytest.raises(ValueError, match="top_p must be > 0" if "top_p" in bad else "temperature must be > 0"):
            sample(model, src, mask, bos=1, eos=2, max_len=3, **bad)
    probs = torch.softmax(torch.tensor([[0.0, 1.0, 2.0], [float("-inf")] * 3]), -1)  # row 1: nan, nothing to draw
    assert inverse_cdf(probs, torch.tensor([0.5, 0.5], dtype=torch.float64)).tolist()[1] == 0
    # 12 ids, EOS banned: with no_repeat_ngram=1 every id is used up by the 11th token or so, BOS and prompt included
    out = sample(model, src, mask, bos=1, eos=2, max_len=14, banned=[2], no_repeat_ngram=1,
                 generator=torch.Generator().manual_seed(0))
    ref = greedy(model, src, mask, bos=1, eos=2, max_len=14, banned=[2], no_repeat_ngram=1)
    assert out.tokens[:, -1].tolist() == ref.tokens[:, -1].tolist() == [0, 0]
    assert out.scores.tolist() == ref.scores.tolist() == [float("-inf")] * 2
