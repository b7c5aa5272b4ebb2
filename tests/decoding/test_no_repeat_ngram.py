"""``no_repeat_ngram`` (fairseq's --no-repeat-ngram-size): no output repeats an n-gram of its hypothesis.

A toy model whose greedy output cycles (each token prefers the next one of a short cycle) shows the
ban at work, checked against a slow reference that picks, step by step, the best token that repeats
nothing; n = 0 changes nothing; beam search and prompts of unequal length honour the ban too; the
option flows from ``DecodeConfig`` through text-level decoding.
"""

from dataclasses import dataclass

import pytest
import torch

from seqmap.config import ConfigError, DecodeConfig
from seqmap.data.tokenizers import BOS, EOS, NEVER_GENERATED, PAD
from seqmap.decoding.beam import beam_search
from seqmap.decoding.greedy import decode_loop, greedy
from seqmap.decoding.steps import repeated_ngrams
from seqmap.decoding.text import translate_ids
from seqmap.models.protocol import Memory

from .test_unequal_prompts import PROMPTS
from .test_unequal_prompts import make as make_lm

V = 12
CYCLE = [4, 5, 6]  # after 4 comes 5, after 5 comes 6, after 6 comes 4: greedy repeats 4 5 6 forever


@dataclass
class PreviousState:
    position: int
    last: torch.Tensor  # (B,) the last token fed

    def reorder(self, index, *, same_sources=False):
        self.last = self.last.index_select(0, index)


class CycleModel:
    """Logits depend on the previous token only: token v scores -((v - successor) mod V) - 0.01 v.

    So the successor of the previous token in ``CYCLE`` (or 4 after anything else) is best, then the
    ids after it in a fixed order; EOS scores lowest but one, so a banned cycle still yields tokens.
    """

    def encode(self, src, src_mask):
        return Memory(states=None if src is None else src.float()[..., None], mask=src_mask)

    def logits(self, last: torch.Tensor) -> torch.Tensor:  # (B,) -> (B, V)
        successor = torch.tensor([CYCLE[(CYCLE.index(t) + 1) % len(CYCLE)] if t in CYCLE else CYCLE[0]
                                  for t in last.tolist()])
        v = torch.arange(V)
        scores = -((v[None] - successor[:, None]) % V).float() - 0.01 * v
        return scores.masked_fill(v == EOS, -V - 1.0)

    def decode_step(self, tokens, memory, state=None, *, need_attention=False):
        state = PreviousState((0 if state is None else state.position) + tokens.size(1), tokens[:, -1])
        return self.logits(state.last)[:, None], state, None


def reference_greedy(model: CycleModel, prefix: list[int], n: int, steps: int) -> list[int]:
    """Step by step, the best token (by logit) whose n-gram is not already in the row, up to EOS: plain lists."""
    row, out = list(prefix), []
    for _ in range(steps):
        order = model.logits(torch.tensor([row[-1]]))[0].argsort(descending=True, stable=True).tolist()
        grams = set(ngrams(row, n))
        token = next(t for t in order
                     if t not in NEVER_GENERATED and tuple([*row[len(row) - n + 1:], t]) not in grams)
        row.append(token)
        out.append(token)
        if token == EOS:
            break
    return out


def log_probs_of(model: CycleModel, prefix: list[int], tokens: list[int]) -> torch.Tensor:
    """Sum of the model's log-probabilities of ``tokens`` after ``prefix`` (NEVER_GENERATED out of the softmax)."""
    total = torch.tensor(0.0)
    for prev, token in zip([*prefix[-1:], *tokens], tokens):
        logits = model.logits(torch.tensor([prev]))[0].index_fill(0, torch.tensor(NEVER_GENERATED), float("-inf"))
        total = total + torch.log_softmax(logits, -1)[token]
    return total


def ngrams(row: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(row[i:i + n]) for i in range(len(row) - n + 1)]


def src(batch=2):
    return torch.full((batch, 3), 7), torch.ones(batch, 3, dtype=torch.bool)


# -- the ban itself ---------------------------------------------------------------------------------


def test_repeated_ngrams_bans_exactly_the_tokens_that_complete_a_known_ngram():
    history = torch.tensor([[5, 6, 7, 5, 6], [5, 6, 7, 5, 6], [-1, -1, -1, 4, 4], [-1, -1, 8, 9, 8]])
    expected = {  # n -> banned ids per row
        1: [{5, 6, 7}, {5, 6, 7}, {4}, {8, 9}],
        2: [{7}, {7}, {4}, {9}],  # row 0: (6, 7) is known; row 2: (4, 4)
        3: [{7}, {7}, set(), set()],  # row 0: (5, 6, 7); row 3: (9, 8, ?) is new
        4: [set(), set(), set(), set()],
    }
    for n, rows in expected.items():
        banned = repeated_ngrams(history, n, V)
        assert [set(r.nonzero().flatten().tolist()) for r in banned] == rows, n
    assert not repeated_ngrams(history, 0, V).any()
    assert not repeated_ngrams(history[:, :1], 2, V).any()  # no bigram yet


# -- greedy ---------------------------------------------------------------------------------------------


def test_greedy_output_repeats_without_the_ban():
    out = greedy(CycleModel(), *src(1), bos=BOS, eos=EOS, max_len=9, banned=NEVER_GENERATED)
    assert out.tokens[0].tolist() == CYCLE * 3


@pytest.mark.parametrize("n", [1, 2, 3])
def test_greedy_with_the_ban_equals_the_reference_and_repeats_no_ngram(n):
    model = CycleModel()
    steps = 9 if n == 1 else 14  # n = 1: the 8 ids 4..11 once each, then only EOS is left
    out = greedy(model, *src(2), bos=BOS, eos=EOS, max_len=steps, banned=NEVER_GENERATED, no_repeat_ngram=n)
    expected = reference_greedy(model, [BOS], n, steps)
    assert out.lengths.tolist() == [len(expected)] * 2
    for row in out.tokens.tolist():
        assert row[:len(expected)] == expected
        assert len(set(ngrams([BOS, *expected], n))) == len(ngrams([BOS, *expected], n))
    assert expected != (CYCLE * 5)[:steps] and (n > 1 or expected[-1] == EOS)
    # scores are the model's own log-probabilities of the chosen tokens: the ban does not renormalize
    torch.testing.assert_close(out.scores[0], log_probs_of(model, [BOS], expected), atol=1e-4, rtol=1e-5)


def test_n_zero_changes_nothing():
    model = CycleModel()
    plain = greedy(model, *src(2), bos=BOS, eos=EOS, max_len=12, banned=NEVER_GENERATED)
    zero = greedy(model, *src(2), bos=BOS, eos=EOS, max_len=12, banned=NEVER_GENERATED, no_repeat_ngram=0)
    assert torch.equal(plain.tokens, zero.tokens) and torch.equal(plain.scores, zero.scores)
    assert torch.equal(plain.lengths, zero.lengths)


def test_the_prompt_counts_as_part_of_the_hypothesis():
    # the prompt 4 5 6 already holds (4, 5) and (5, 6): the first generated 4 may not be followed by 5
    out = greedy(CycleModel(), None, None, bos=BOS, eos=EOS, max_len=6, prompt=torch.tensor([[BOS, 4, 5, 6]]),
                 banned=NEVER_GENERATED, no_repeat_ngram=2)
    assert out.tokens[0].tolist() == reference_greedy(CycleModel(), [BOS, 4, 5, 6], 2, 6)
    assert out.tokens[0, :2].tolist() != [4, 5]


def test_prompts_of_unequal_length_are_banned_as_each_alone():
    model = make_lm()
    prompts = [torch.tensor(p) for p in PROMPTS]
    kw = dict(bos=BOS, eos=EOS, max_len=5, pad=PAD, no_repeat_ngram=1)  # 6 + 5 tokens: never out of ids
    together = decode_loop(model, None, None, prompt=prompts, **kw)
    for b, p in enumerate(prompts):
        own = decode_loop(model, None, None, prompt=p[None], **kw)
        n = int(own.lengths[0])
        assert together.tokens[b, :n].tolist() == own.tokens[0, :n].tolist()
        assert not set(own.tokens[0, :n].tolist()) & set(p.tolist())  # n = 1: nothing of the prompt again


def test_a_negative_size_is_refused():
    with pytest.raises(ValueError, match="no_repeat_ngram must be >= 0"):
        greedy(CycleModel(), *src(1), bos=BOS, eos=EOS, max_len=3, no_repeat_ngram=-1)
    with pytest.raises(ValueError, match="no_repeat_ngram must be >= 0"):
        beam_search(CycleModel(), *src(1), beam_size=2, bos=BOS, eos=EOS, max_len=3, no_repeat_ngram=-1)
    with pytest.raises(ConfigError, match="decode.no_repeat_ngram must be >= 0"):
        DecodeConfig(no_repeat_ngram=-2)


# -- beam search and the text level ---------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3])
def test_beam_hypotheses_repeat_no_ngram_and_beam_one_is_greedy(n):
    model = CycleModel()
    kw = dict(bos=BOS, eos=EOS, max_len=14, banned=NEVER_GENERATED, no_repeat_ngram=n)
    result = beam_search(model, *src(2), beam_size=4, n_best=4, length_penalty=1.0, **kw).hypotheses
    for hyps in result:
        assert len(hyps) == 4
        for h in hyps:
            assert len(set(ngrams([BOS, *h.tokens], n))) == len(ngrams([BOS, *h.tokens], n))
    one = beam_search(model, *src(2), beam_size=1, **kw).best()
    g = greedy(model, *src(2), **kw)
    assert torch.equal(one.tokens, g.tokens)
    torch.testing.assert_close(one.scores, g.scores, atol=1e-5, rtol=1e-5)


def test_beam_search_without_the_ban_does_repeat():
    best = beam_search(CycleModel(), *src(1), beam_size=4, bos=BOS, eos=EOS, max_len=9,
                       banned=NEVER_GENERATED).best()
    assert best.tokens[0].tolist() == CYCLE * 3


def test_the_decode_option_reaches_translation():
    sources = [[7, 8, 9], [9, 10]]
    for beam in (1, 3):
        plain = translate_ids(CycleModel(), sources, beam_size=beam, max_len_a=0, max_len_b=9)
        banned = translate_ids(CycleModel(), sources, beam_size=beam, max_len_a=0, max_len_b=9, no_repeat_ngram=2)
        assert plain == [CYCLE * 3] * 2
        for row in banned:
            assert len(row) == 9 and len(set(ngrams(row, 2))) == 8
