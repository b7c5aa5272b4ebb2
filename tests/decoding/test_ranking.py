"""``seqmap.decoding.ranking``: the two ranking schemes of beam search, each on its own.

Beam search with each scheme is tested in test_beam.py (and against ``transformers``' generate in
tests/hub/test_beam_parity.py); here each rule of a scheme is checked by itself.
"""

import math

import pytest
import torch

from seqmap.decoding.ranking import GnmtRanking, HfRanking, Hypothesis, gnmt_penalty, length_norm, make_ranking

INF = float("-inf")


def finished(*normalized: float) -> list[Hypothesis]:
    return [Hypothesis([5], n, n) for n in normalized]


def test_each_scheme_divides_by_its_own_length_norm():
    assert length_norm(7, 1.0) == gnmt_penalty(7, 1.0) == 2.0 and length_norm(7, 0.0) == 1.0
    assert length_norm(7, 1.0, "hf") == 7.0 and length_norm(0, 2.0, "hf") == 1.0
    for scheme, norm in ((GnmtRanking(0.6, 4, 1), gnmt_penalty(3, 0.6)), (HfRanking(0.6, 4, False, ()), 3 ** 0.6)):
        hyp = scheme.hypothesis([4, 5, 2], -3.0, None)
        assert hyp.score == -3.0 and math.isclose(hyp.normalized, -3.0 / norm)


def test_make_ranking_refuses_unknown_options_by_name():
    assert isinstance(make_ranking("gnmt", 1.0, 4, 2, False, ()), GnmtRanking)
    assert isinstance(make_ranking("hf", 1.0, 4, 2, "never", (1,)), HfRanking)
    with pytest.raises(ValueError, match="ranking must be gnmt or hf, got 'gmnt'"):
        make_ranking("gmnt", 1.0, 4, 2, False, ())
    with pytest.raises(ValueError, match="early_stopping must be True, False or 'never'"):
        make_ranking("hf", 1.0, 4, 2, "always", ())


def test_gnmt_stops_at_k_finished_or_when_no_live_beam_can_beat_the_nth():
    scheme = GnmtRanking(alpha=1.0, beam_size=3, n_best=2)
    assert scheme.stops(finished(-1.0, -2.0, -3.0), best_live=-0.1, length=4, limit=20)  # rule 1: k finished
    assert scheme.stops([], best_live=INF, length=4, limit=20)  # no live beam left
    assert not scheme.stops(finished(-1.0), best_live=-50.0, length=4, limit=20)  # fewer than n_best
    # rule 2: the best live score over the largest penalty it can reach (length 20) against the 2nd finished
    assert scheme.stops(finished(-1.0, -2.0), best_live=-2.0 * gnmt_penalty(20, 1.0), length=4, limit=20)
    assert not scheme.stops(finished(-1.0, -2.0), best_live=-1.9 * gnmt_penalty(20, 1.0), length=4, limit=20)


def test_hf_stops_as_transformers_early_stopping_says():
    two = finished(-1.0, -2.0)
    assert HfRanking(1.0, 2, True, ()).stops(two, best_live=-0.1, length=4, limit=20)  # k finished: done
    assert not HfRanking(1.0, 3, True, ()).stops(two, best_live=-50.0, length=4, limit=20)
    assert HfRanking(1.0, 2, False, ()).stops(two, best_live=-8.0, length=4, limit=20)  # -8 / 4 <= -2
    assert not HfRanking(1.0, 2, False, ()).stops(two, best_live=-7.9, length=4, limit=20)
    assert not HfRanking(1.0, 2, "never", ()).stops(two, best_live=-8.0, length=4, limit=20)  # -8 / 20 > -2
    assert HfRanking(1.0, 2, "never", ()).stops(two, best_live=-40.0, length=4, limit=20)


def test_the_limit_finishes_gnmts_live_beams_and_hfs_best_candidates():
    at_limit = torch.tensor([True, False])
    gnmt, hf = GnmtRanking(1.0, 2, 1), HfRanking(1.0, 2, False, ())
    assert gnmt.candidates_end(at_limit) is None and torch.equal(gnmt.live_end(at_limit), at_limit)
    assert torch.equal(hf.candidates_end(at_limit), at_limit) and not hf.live_end(at_limit).any()


def test_gnmt_masks_banned_ids_before_the_softmax_and_hf_after_it():
    logits = torch.tensor([[[0.0, 1.0, 2.0, 3.0]]])
    gnmt = GnmtRanking(1.0, 2, 1).log_probs(logits, banned=[0, 1])
    hf = HfRanking(1.0, 2, False, absent=[0]).log_probs(logits, banned=[0, 1])
    assert torch.isinf(gnmt[0, :2]).all() and torch.isinf(hf[0, :2]).all()
    assert math.isclose(float(gnmt[0, 2:].exp().sum()), 1.0, rel_tol=1e-6)  # renormalized among the rest
    assert float(hf[0, 2:].exp().sum()) < 0.99  # id 1 keeps its probability mass, out of reach
    with pytest.raises(ValueError, match="absent ids must be in"):
        HfRanking(1.0, 2, False, absent=[9]).check(4)
    GnmtRanking(1.0, 2, 1).check(4)  # no ids of its own
