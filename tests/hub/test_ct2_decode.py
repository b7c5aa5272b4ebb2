"""``seqmap.hub.ct2.decode`` on its own: n-best lists come back best first by the score seqmap gives them.

A stand-in translator and generator return hypotheses in CTranslate2's order (by its length norm,
``length ** length_penalty``), which GNMT's norm ranks the other way round; no CTranslate2 is needed.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from seqmap.config import DecodeConfig
from seqmap.decoding.ranking import length_norm
from seqmap.decoding.text import Scored
from seqmap.hub.ct2.decode import best_first, generate_ct2_nbest, translate_ct2_nbest

LONG, SHORT = ["t5", "t6", "t7", "t5", "t6"], ["t7"]  # 5 tokens and 1, each then EOS


class Pieces:
    """A tokenizer's id <-> piece map: id i is piece ``t{i}`` (2 is EOS, ``</s>``)."""

    vocab_size = 8

    def pieces(self, ids):
        return ["</s>" if i == 2 else f"t{i}" for i in ids]


class Translator:
    """CTranslate2's order: the long hypothesis first (score / length: -1.0 against -1.1)."""

    def translate_batch(self, sources, **options):
        return [SimpleNamespace(hypotheses=[LONG, SHORT], scores=[-1.0, -1.1]) for _ in sources]


class Generator:
    def generate_batch(self, prompts, **options):
        return [SimpleNamespace(sequences=[[*LONG, "</s>"], [*SHORT, "</s>"]], scores=[-1.0, -1.1])
                for _ in prompts]


DECODE = DecodeConfig(beam_size=2, length_penalty=1.0, max_len_a=0.0, max_len_b=20, max_new_tokens=20)


def test_the_gnmt_norm_ranks_the_stand_in_hypotheses_the_other_way():
    # the premise of the tests below: summed scores -6.0 (6 tokens with EOS) and -2.2 (2 tokens)
    assert -6.0 / 6 > -2.2 / 2 and -6.0 / length_norm(6, 1.0) < -2.2 / length_norm(2, 1.0)


def test_translate_nbest_lists_are_best_first_by_the_normalized_score():
    tok = Pieces()
    [entries] = translate_ct2_nbest(Translator(), tok, tok, [[3, 4]], DECODE, n_best=2, scores=True)
    assert [e.output for e in entries] == [[7], [5, 6, 7, 5, 6]]
    assert [e.score for e in entries] == pytest.approx([-2.2, -6.0])
    assert entries[0].normalized > entries[1].normalized
    assert entries[0].normalized == pytest.approx(-2.2 / length_norm(2, 1.0))
    [unscored] = translate_ct2_nbest(Translator(), tok, tok, [[3, 4]], DECODE, n_best=2)
    assert [e.output for e in unscored] == [[5, 6, 7, 5, 6], [7]]  # no scores: CTranslate2's order


def test_generate_nbest_lists_are_best_first_by_the_normalized_score():
    [entries] = generate_ct2_nbest(Generator(), Pieces(), [[3]], DECODE, n_best=2, scores=True)
    assert [e.output for e in entries] == [[7], [5, 6, 7, 5, 6]]
    assert entries[0].normalized > entries[1].normalized


def test_best_first_keeps_the_order_of_ties():
    tied = [Scored([1], -1.0, -0.5), Scored([2], -2.0, -0.5), Scored([3], -0.1, -0.1)]
    assert [e.output for e in best_first(tied)] == [[3], [1], [2]]
