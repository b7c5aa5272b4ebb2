"""Beam search invariants, for every model family, and decoder-state reordering.

Beam 1 is greedy; a batch decodes as its sentences one at a time; cached
decoding equals a slow reference search that reruns ``model.forward`` on the
whole prefix at every step; the length penalty, EOS, maximum lengths, n-best
lists, prompts and attention do what the docstrings say; ``reorder`` keeps the
right rows for any index.
"""

import math
from dataclasses import dataclass
from functools import partial

import pytest
import torch

import seqmap.nn.kv_cache as kv_cache
import seqmap.nn.multihead as multihead
from seqmap.config import ModelConfig
from seqmap.decoding.beam import BeamResult, beam_search, n_best_error
from seqmap.decoding.greedy import greedy
from seqmap.decoding.ranking import gnmt_penalty
from seqmap.decoding.sampling import sample
from seqmap.models.builder import build_model
from seqmap.models.protocol import Memory
from seqmap.nn.kv_cache import KVCache, reorder_caches

PAD, BOS, EOS = 0, 1, 2
V = 8  # small, so random models end hypotheses with EOS at varied lengths

FAMILIES = {
    "transformer": dict(family="transformer"),
    "lm": dict(family="lm"),
    "transformer-relative_cp": dict(family="transformer", positional="relative_cp"),  # relative terms over
    "lm-relative_cp": dict(family="lm", positional="relative_cp"),  # reordered caches
    "rnn-bahdanau": dict(family="rnn", rnn_attention="bahdanau", rnn_cell="lstm"),
    "rnn-none": dict(family="rnn", rnn_attention="none", rnn_cell="gru"),
    "convs2s": dict(family="convs2s", kernel_size=3),  # per-layer windows of past inputs follow the beams
}


class EosBias:
    """A real model whose EOS logit grows with the position, so hypotheses end at varied lengths.

    It speaks the protocol by passing every call through; only the logits
    change, by ``slope * (position - 4)`` on EOS, the same in ``decode_step``
    and ``forward``.
    """

    def __init__(self, model, slope):
        self.model, self.slope = model, slope

    def _bias(self, logits, first):
        position = torch.arange(first, first + logits.size(1), dtype=logits.dtype)
        bias = torch.zeros(logits.size(1), V)
        bias[:, EOS] = self.slope * (position - 4)
        return logits + bias

    def encode(self, src, src_mask):
        return self.model.encode(src, src_mask)

    def decode_step(self, tokens, memory, state=None, *, need_attention=False):
        first = 0 if state is None else state.position
        logits, state, attention = self.model.decode_step(tokens, memory, state, need_attention=need_attention)
        return self._bias(logits, first), state, attention

    def __call__(self, src, src_mask, tgt):
        return self._bias(self.model(src, src_mask, tgt), 0)


def make(name, seed=0, eos_slope=0.8):
    torch.manual_seed(seed)
    cfg = ModelConfig(src_vocab=V, tgt_vocab=V, d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=2,
                      dropout=0.0, emb_size=8, hidden_size=16, **FAMILIES[name])
    return EosBias(build_model(cfg).eval(), eos_slope)


def inputs(name, b=4, s=6, seed=1):
    """(src, src_mask, prompt): padded sources of different lengths; an LM gets prompts instead."""
    g = torch.Generator().manual_seed(seed)
    if FAMILIES[name]["family"] == "lm":
        return None, None, torch.randint(3, V, (b, 3), generator=g)
    src = torch.randint(3, V, (b, s), generator=g)
    lengths = torch.tensor([s, s - 2, 3, 1, s, 2][:b])
    mask = torch.arange(s)[None, :] < lengths[:, None]
    return src.masked_fill(~mask, PAD), mask, None


def row(x, i):
    return None if x is None else x[i:i + 1]


def trim(x, i):
    """Sentence i alone, its padding removed."""
    if x is None:
        return None
    src, mask = x
    n = int(mask[i].sum())
    return src[i:i + 1, :n], mask[i:i + 1, :n]


# -- beam 1 is greedy, batching changes nothing, caching changes nothing -----------------------


@pytest.mark.parametrize("name", FAMILIES)
def test_beam_one_equals_greedy(name):
    model = make(name)
    src, mask, prompt = inputs(name)
    limits = torch.tensor([9, 4, 7, 2])
    g = greedy(model, src, mask, bos=BOS, eos=EOS, max_len=limits, prompt=prompt, need_attention=True)
    b = beam_search(model, src, mask, beam_size=1, bos=BOS, eos=EOS, max_len=limits, prompt=prompt,
                    length_penalty=1.0, need_attention=True).best()
    assert torch.equal(b.tokens, g.tokens) and torch.equal(b.lengths, g.lengths)
    torch.testing.assert_close(b.scores, g.scores, atol=1e-5, rtol=1e-5)  # sums: CPU-dependent rounding
    if g.attention is None:
        assert b.attention is None and name == "rnn-none"
    else:
        torch.testing.assert_close(b.attention, g.attention)
    assert (g.lengths <= limits).all()


@pytest.mark.parametrize("name", FAMILIES)
def test_batched_beam_equals_one_sentence_at_a_time(name):
    model = make(name)
    src, mask, prompt = inputs(name, b=6)
    limits = torch.tensor([10, 3, 8, 6, 10, 5])
    kw = dict(beam_size=3, bos=BOS, eos=EOS, length_penalty=0.6, n_best=3)
    batched = beam_search(model, src, mask, max_len=limits, prompt=prompt, **kw).hypotheses
    ended = set()
    for i in range(6):
        s, m = trim((src, mask), i) if src is not None else (None, None)
        alone = beam_search(model, s, m, max_len=int(limits[i]), prompt=row(prompt, i), **kw).hypotheses[0]
        assert [h.tokens for h in batched[i]] == [h.tokens for h in alone]
        for a, b in zip(batched[i], alone):
            assert math.isclose(a.score, b.score, rel_tol=1e-5, abs_tol=1e-5) and math.isclose(
                a.normalized, b.normalized, rel_tol=1e-5, abs_tol=1e-5)
        ended |= {h.tokens[-1] == EOS for h in batched[i]}
    assert ended == {True, False}  # hypotheses ending in EOS and at the maximum length were both compared


@torch.no_grad()
def reference_beam(model, src, src_mask, prompt, k, max_len, alpha, n_best):
    """A slow, obvious beam search for one sentence: ``model.forward`` on the whole prefix for every beam.

    Same rules as ``beam_search``: one live beam at first; the 2k best candidates;
    those ending in EOS among the k best finish; the k best others live on;
    stop with k finished or at max_len (live beams finish without EOS).
    """
    live, finished = [(0.0, [])], []
    for t in range(max_len):
        candidates = []
        for score, tokens in live:
            tgt = torch.tensor([prompt + tokens])
            log_probs = torch.log_softmax(model(src, src_mask, tgt)[0, -1].double(), -1)
            candidates += [(score + float(log_probs[v]), tokens + [v]) for v in range(V)]
        candidates.sort(key=lambda c: -c[0])
        top = candidates[:2 * k]
        finished += [c for c in top[:k] if c[1][-1] == EOS]
        live = [c for c in top if c[1][-1] != EOS][:k]
        if t + 1 == max_len:
            finished += live
        if len(finished) >= k or t + 1 == max_len:
            break
    finished.sort(key=lambda c: -c[0] / gnmt_penalty(len(c[1]), alpha))
    return finished[:n_best]


@pytest.mark.parametrize("name", FAMILIES)
def test_cached_beam_search_equals_full_recomputation(name):
    model = make(name, seed=3)
    src, mask, prompt = inputs(name, b=4, seed=2)
    if prompt is None:  # a forced target prefix for the encoder-decoders
        prompt = torch.tensor([[BOS, 5]] * 4)
    result = beam_search(model, src, mask, beam_size=3, bos=BOS, eos=EOS, max_len=7, length_penalty=1.0,
                         n_best=2, prompt=prompt).hypotheses
    for i in range(4):
        s, m = trim((src, mask), i) if src is not None else (None, None)
        expected = reference_beam(model, s, m, prompt[i].tolist(), 3, 7, 1.0, 2)
        assert [h.tokens for h in result[i]] == [tokens for _, tokens in expected]
        for h, (score, _) in zip(result[i], expected):
            assert math.isclose(h.score, score, rel_tol=1e-5, abs_tol=1e-5)


class MemoryCopies:
    """Passes a Transformer through; records (rows, rows of the cross-attention keys/values) at every step.

    ``copies=True`` gives every row its own copy of its sentence's keys/values before each step,
    which is how the search ran before the beams of a sentence shared one copy.
    """

    def __init__(self, model, copies=False):
        self.model, self.copies, self.seen = model, copies, []

    def encode(self, src, src_mask):
        return self.model.encode(src, src_mask)

    def decode_step(self, tokens, memory, state=None, *, need_attention=False):
        if state is not None and self.copies and state.per_source > 1:
            r, state.per_source = state.per_source, 1
            state.memory_kv = [(k.repeat_interleave(r, 0), v.repeat_interleave(r, 0)) for k, v in state.memory_kv]
            if state.memory_mask is not None:
                state.memory_mask = state.memory_mask.repeat_interleave(r, 0)
        if state is not None:
            self.seen.append((tokens.size(0), state.memory_kv[0][0].size(0)))
        return self.model.decode_step(tokens, memory, state, need_attention=need_attention)


@pytest.mark.parametrize("copy", [False, True], ids=["transformer", "pointer-generator"])
def test_beams_reading_one_copy_of_the_memory_equal_beams_with_copies(copy):
    torch.manual_seed(4)
    cfg = ModelConfig(src_vocab=V, tgt_vocab=V, d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=2,
                      dropout=0.0, family="transformer", copy=copy, share_vocab=copy)
    model = EosBias(build_model(cfg).eval(), 0.8)
    src, mask, _ = inputs("transformer", b=6)
    limits = torch.tensor([10, 3, 8, 6, 10, 5])  # sentences leave the batch at different steps
    kw = dict(beam_size=3, bos=BOS, eos=EOS, max_len=limits, length_penalty=0.6, n_best=3, need_attention=True)
    shared, copies = MemoryCopies(model), MemoryCopies(model, copies=True)
    ours, before = beam_search(shared, src, mask, **kw).hypotheses, beam_search(copies, src, mask, **kw).hypotheses
    for a, b in zip(ours, before):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        for h, g in zip(a, b):
            assert math.isclose(h.score, g.score, rel_tol=1e-5, abs_tol=1e-5)
            torch.testing.assert_close(h.attention, g.attention, atol=1e-5, rtol=1e-5)
    assert all(rows == 3 * kv for rows, kv in shared.seen[1:]) and shared.seen[-1][1] < 6  # one copy per sentence
    assert all(rows == kv for rows, kv in copies.seen)


# -- a scripted model: the length penalty, EOS, maximum lengths, prompts ------------------------


@dataclass
class HistoryState:
    history: torch.Tensor  # (B, t) every token fed so far
    position: int = 0

    def reorder(self, index, *, same_sources=False):
        self.history = self.history.index_select(0, index)


class TableModel:
    """Next-token probabilities are ``table[generated so far]`` (the prompt excluded), else ``default``.

    Tokens a row does not name get 1e-6; PAD takes what mass is left, so every row sums to 1.
    """

    def __init__(self, table, default, vocab=5, state_type=HistoryState):
        self.table, self.default, self.vocab, self.state_type = table, default, vocab, state_type
        self.calls = []

    def encode(self, src, src_mask):
        return Memory(states=None if src is None else src.float()[..., None], mask=src_mask)

    def decode_step(self, tokens, memory, state=None, *, need_attention=False):
        self.calls.append(tokens.clone())
        if state is None:
            state = self.state_type(tokens[:, :0], 0)
            self.prompt_len = tokens.size(1)
        state.history = torch.cat([state.history, tokens], dim=1)
        state.position += tokens.size(1)
        rows = []
        for h in state.history[:, self.prompt_len:].tolist():
            probs = self.table.get(tuple(h), self.default)
            p = [probs.get(v, 1e-6) for v in range(self.vocab)]
            p[PAD] = max(1.0 - sum(p[1:]), 1e-6)
            rows.append(p)
        logits = torch.tensor(rows).log()[:, None].expand(-1, tokens.size(1), -1)
        return logits, state, None


A, B_ = 3, 4
SHORT_VS_LONG = {
    (): {A: 0.5, B_: 0.4},
    (A,): {EOS: 0.9},  # A EOS: score log .5 + log .9 = -0.80, two tokens
    (B_,): {B_: 0.9},
    (B_, B_): {B_: 0.9},
    (B_, B_, B_): {B_: 0.9},
    (B_, B_, B_, B_): {EOS: 0.9},  # B B B B EOS: log .4 + 4 log .9 = -1.34, five tokens
}
FLAT = {A: 0.3, B_: 0.3, EOS: 0.01}


def test_length_penalty_changes_the_winner():
    src, mask = torch.full((1, 3), 3), torch.ones(1, 3, dtype=torch.bool)
    kw = dict(beam_size=2, bos=BOS, eos=EOS, max_len=10, n_best=2)
    raw = beam_search(TableModel(SHORT_VS_LONG, FLAT), src, mask, length_penalty=0.0, **kw).hypotheses[0]
    assert raw[0].tokens == [A, EOS]
    assert math.isclose(raw[0].score, math.log(0.5) + math.log(0.9), rel_tol=1e-5)
    long = beam_search(TableModel(SHORT_VS_LONG, FLAT), src, mask, length_penalty=2.0, **kw).hypotheses[0]
    assert [h.tokens for h in long] == [[B_, B_, B_, B_, EOS], [A, EOS]]
    assert long[0].score < long[1].score and long[0].normalized > long[1].normalized
    assert math.isclose(long[0].normalized, long[0].score / ((5 + 5) / 6) ** 2.0, rel_tol=1e-6)


LATE_WINNER = {
    (): {A: 0.55, B_: 0.4},
    (A,): {EOS: 0.99},  # A EOS: score -0.61, normalized (alpha 2) -0.45, finished at step 2
    **{(B_,) * n: {B_: 0.95} for n in range(1, 6)},
    (B_,) * 6: {EOS: 0.95},  # B x6 EOS: score -1.22, normalized -0.31, finished at step 7
}


def test_search_goes_on_while_a_longer_hypothesis_can_still_win():
    # after step 2 the live B B has score -0.97: over the penalty of its current length it could not beat
    # A EOS, but over the penalty of the maximum length it could, and it does
    src = torch.full((1, 3), 3)
    kw = dict(beam_size=2, bos=BOS, eos=EOS, max_len=10, n_best=1)
    late = beam_search(TableModel(LATE_WINNER, FLAT), src, None, length_penalty=2.0, **kw).hypotheses[0]
    assert late[0].tokens == [B_] * 6 + [EOS]
    early = beam_search(TableModel(LATE_WINNER, FLAT), src, None, length_penalty=0.0, **kw)
    assert early.hypotheses[0][0].tokens == [A, EOS]


def test_max_len_returns_hypotheses_without_eos_per_sentence():
    never_ends = TableModel({}, {A: 0.5, B_: 0.3, EOS: 1e-6})
    src, mask = torch.full((3, 2), 3), torch.ones(3, 2, dtype=torch.bool)
    limits = torch.tensor([3, 5, 1])
    out = beam_search(never_ends, src, mask, beam_size=2, bos=BOS, eos=EOS, max_len=limits, n_best=2,
                      length_penalty=1.0).hypotheses
    for hyps, limit in zip(out, limits.tolist()):
        assert len(hyps) == 2
        assert all(len(h.tokens) == limit and EOS not in h.tokens for h in hyps)
        assert hyps[0].tokens == [A] * limit
    assert len(never_ends.calls) == 5  # sentences stop at their own limit; the longest sets the steps


def test_eos_ends_a_hypothesis_and_stops_the_search():
    model = TableModel({(): {A: 0.9}, (A,): {EOS: 0.9}}, {A: 0.3, B_: 0.3, EOS: 0.3})
    out = beam_search(model, torch.full((1, 2), 3), None, beam_size=1, bos=BOS, eos=EOS, max_len=50).hypotheses
    assert out[0][0].tokens == [A, EOS]
    assert len(model.calls) == 2  # nothing decoded after the only sentence finished


def test_prompt_is_forced_fed_once_and_not_returned():
    # the table sees only generated tokens; the prompt decides nothing here but must be fed first, in one call
    model = TableModel({(): {B_: 0.9}, (B_,): {EOS: 0.9}}, FLAT)
    prompt = torch.tensor([[BOS, A, A], [BOS, B_, A]])
    out = beam_search(model, torch.full((2, 2), 3), None, beam_size=3, bos=BOS, eos=EOS, max_len=6,
                      prompt=prompt).hypotheses
    assert torch.equal(model.calls[0], prompt)
    assert all(c.size(1) == 1 for c in model.calls[1:])
    assert [hyps[0].tokens for hyps in out] == [[B_, EOS], [B_, EOS]]
    assert math.isclose(out[0][0].score, 2 * math.log(0.9), rel_tol=1e-5)  # the prompt is not scored


@pytest.mark.parametrize("name", FAMILIES)
def test_nbest_lists_are_sorted_distinct_and_start_with_the_prompt_continuation(name):
    model = make(name)
    src, mask, prompt = inputs(name)
    out = beam_search(model, src, mask, beam_size=4, bos=BOS, eos=EOS, max_len=8, length_penalty=1.0,
                      n_best=4, prompt=prompt).hypotheses
    for hyps in out:
        assert len(hyps) == 4
        normalized = [h.normalized for h in hyps]
        assert normalized == sorted(normalized, reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == 4
        for h in hyps:
            assert math.isclose(h.normalized, h.score / gnmt_penalty(len(h.tokens), 1.0), rel_tol=1e-6)
            assert EOS not in h.tokens[:-1]


def test_beam_size_and_n_best_are_checked():
    model = make("transformer")
    src, mask, _ = inputs("transformer")
    with pytest.raises(ValueError, match="n_best"):
        beam_search(model, src, mask, beam_size=2, bos=BOS, eos=EOS, max_len=5, n_best=3)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, mask, beam_size=0, bos=BOS, eos=EOS, max_len=5)
    with pytest.raises(ValueError, match="max_len"):
        beam_search(model, src, mask, beam_size=2, bos=BOS, eos=EOS, max_len=torch.tensor([3, 0, 2, 2]))


def test_one_n_best_check_words_each_callers_message():
    assert n_best_error(2, 2) is None and n_best_error(1, 5, "beam_size") is None
    assert n_best_error(3, 2) == "n_best=3 needs decode.beam_size >= 3 (got 2)"
    assert n_best_error(2, 1, "beam search with decode.beam_size") == \
        "n_best=2 needs beam search with decode.beam_size >= 2 (got 1)"
    assert n_best_error(3, 2, "beam_size", n_best_as="n_best 3") == "n_best 3 needs beam_size >= 3 (got 2)"
    model = make("transformer")
    src, mask, _ = inputs("transformer")
    with pytest.raises(ValueError, match=r"^n_best=3 needs beam_size >= 3 \(got 2\)$"):
        beam_search(model, src, mask, beam_size=2, bos=BOS, eos=EOS, max_len=5, n_best=3)
    with pytest.raises(ValueError, match="n_best must be between 1 and beam_size=2, got 0"):
        beam_search(model, src, mask, beam_size=2, bos=BOS, eos=EOS, max_len=5, n_best=0)


def test_arguments_beam_search_cannot_use_are_refused_by_name():
    """A float beam size failed inside topk, a list of prompts on ``.dim()``, and an unknown early_stopping
    was read as False."""
    model = make("transformer")
    src, mask, _ = inputs("transformer")
    with pytest.raises(ValueError, match="beam_size must be an int"):
        beam_search(model, src, mask, beam_size=2.5, bos=BOS, eos=EOS, max_len=5)
    with pytest.raises(TypeError, match=r"prompt must be a \(B, P\) tensor"):
        beam_search(model, src, mask, beam_size=2, bos=BOS, eos=EOS, max_len=5, prompt=[torch.tensor([BOS])] * 4)
    with pytest.raises(ValueError, match="early_stopping must be True, False or 'never'"):
        beam_search(model, src, mask, beam_size=2, bos=BOS, eos=EOS, max_len=5, ranking="hf", early_stopping="yes")


@pytest.mark.parametrize("name", FAMILIES)
def test_an_empty_batch_gives_empty_results(name):
    """Zero sentences used to fail in the model (a ZeroDivisionError, or RNN packing)."""
    model = make(name)
    src, mask, prompt = inputs(name)
    src, mask, prompt = (None if x is None else x[:0] for x in (src, mask, prompt))
    result = beam_search(model, src, mask, beam_size=2, bos=BOS, eos=EOS, max_len=5, prompt=prompt)
    assert result.hypotheses == []
    assert result.best().tokens.shape == (0, 0)
    out = greedy(model, src, mask, bos=BOS, eos=EOS, max_len=5, prompt=prompt)
    assert out.tokens.shape == (0, 0) and out.scores.shape == out.lengths.shape == (0,)


@pytest.mark.parametrize("name", FAMILIES)
def test_scores_come_back_in_the_model_dtype(name):
    """A float64 model's scores are float64 (they were cast to float32), and its tokens are the float32 model's."""
    single, double = make(name), make(name)
    double.model.double()
    src, mask, prompt = inputs(name)
    args = dict(bos=BOS, eos=EOS, max_len=6, prompt=prompt)
    for search in (greedy, partial(beam_search, beam_size=3, n_best=2)):
        want, got = search(single, src, mask, **args), search(double, src, mask, **args)
        if isinstance(got, BeamResult):
            assert [[h.tokens for h in hyps] for hyps in got.hypotheses] == \
                   [[h.tokens for h in hyps] for hyps in want.hypotheses]
            want, got = want.best(), got.best()
        assert got.scores.dtype == torch.float64 and want.scores.dtype == torch.float32
        assert torch.equal(got.tokens, want.tokens)
        torch.testing.assert_close(got.scores, want.scores.double(), atol=1e-4, rtol=1e-4)
    drawn = sample(double, src, mask, **args, generator=torch.Generator().manual_seed(0))
    assert drawn.scores.dtype == torch.float64


@pytest.mark.parametrize("name", [name for name in FAMILIES if FAMILIES[name]["family"] != "lm"])
@pytest.mark.parametrize("rows", [1, 3])
def test_an_empty_source_decodes_as_a_source_of_padding_only(name, rows):
    """Sources of length 0 (S = 0: the RNN's packing refused them) decode as rows of padding do, in every family."""
    model = make(name)
    padding = torch.full((rows, 3), PAD), torch.zeros(rows, 3, dtype=torch.bool)
    empty = torch.full((rows, 0), PAD), torch.zeros(rows, 0, dtype=torch.bool)
    for search in (greedy, partial(beam_search, beam_size=2)):
        want, got = (search(model, *source, bos=BOS, eos=EOS, max_len=5) for source in (padding, empty))
        if isinstance(got, BeamResult):
            want, got = want.best(), got.best()
        assert torch.equal(got.tokens, want.tokens) and torch.isfinite(got.scores).all()
        torch.testing.assert_close(got.scores, want.scores)


# -- attention ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["transformer", "rnn-bahdanau", "lm"])
def test_attention_per_step_sums_to_one_over_real_source_tokens(name):
    model = make(name)
    src, mask, prompt = inputs(name)
    best = beam_search(model, src, mask, beam_size=3, bos=BOS, eos=EOS, max_len=6, prompt=prompt,
                       need_attention=True).best()
    layers, heads = (1, 1) if name.startswith("rnn") else (2, 2)
    keys = src.size(1) if src is not None else prompt.size(1) + best.tokens.size(1) - 1
    assert best.attention.shape == (4, layers, heads, best.tokens.size(1), keys)
    for b, length in enumerate(best.lengths.tolist()):
        rows = best.attention[b, :, :, :length]
        torch.testing.assert_close(rows.sum(-1), torch.ones_like(rows.sum(-1)))
        assert (best.attention[b, :, :, length:] == 0).all()
        if mask is not None:
            assert (rows[..., ~mask[b]] == 0).all()
        else:  # a decoder-only model attends to the prompt and the tokens before the query, not after
            for t in range(length):
                assert (rows[:, :, t, prompt.size(1) + t:] == 0).all()


def test_rnn_without_attention_returns_none():
    model = make("rnn-none")
    src, mask, _ = inputs("rnn-none")
    result = beam_search(model, src, mask, beam_size=2, bos=BOS, eos=EOS, max_len=4, need_attention=True)
    assert result.best().attention is None and result.hypotheses[0][0].attention is None


# -- reordering decoder states --------------------------------------------------------------------


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("index", [[2, 0, 2], [3, 2, 1, 0], [1, 1, 1, 1], [0, 1, 2, 3], [3, 0, 1, 2, 3, 0]],
                         ids=["drop-repeat", "reverse", "all-one", "identity", "grow"])
def test_state_reorder_keeps_the_chosen_rows(name, index):
    model = make(name)
    src, mask, prompt = inputs(name)
    tgt = torch.randint(3, V, (4, 5), generator=torch.Generator().manual_seed(5))
    if prompt is not None:
        tgt = torch.cat([prompt, tgt], dim=1)
    index = torch.tensor(index)
    memory = model.encode(src, mask)
    _, state, _ = model.decode_step(tgt[:, :3], memory, None)
    _, state, _ = model.decode_step(tgt[:, 3:4], memory, state)  # a cache that has grown past its prefill
    state.reorder(index)
    got, _, _ = model.decode_step(tgt[index, 4:6], memory.index_select(index), state)
    expected = model(row_select(src, index), row_select(mask, index), tgt[index, :6])[:, 4:6]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def row_select(x, index):
    return None if x is None else x[index]


@pytest.mark.parametrize("name", FAMILIES)
def test_state_reorder_within_sentences_keeps_the_sources(name):
    """same_sources=True (beams moving inside their sentence's block) skips the per-source tensors, rightly."""
    model = make(name)
    src, mask, prompt = inputs(name)
    k = 3
    tgt = torch.randint(3, V, (4 * k, 4), generator=torch.Generator().manual_seed(6))
    if prompt is not None:
        tgt = torch.cat([prompt.repeat_interleave(k, 0), tgt], dim=1)
    expand = torch.arange(4).repeat_interleave(k)
    memory = model.encode(src, mask).index_select(expand)
    _, state, _ = model.decode_step(tgt[:, :3], memory, None)
    beams = torch.tensor([[2, 2, 0], [1, 0, 2], [0, 0, 0], [2, 1, 1]])
    index = (torch.arange(4)[:, None] * k + beams).flatten()
    state.reorder(index, same_sources=True)
    got, _, _ = model.decode_step(tgt[index, 3:4], memory, state)
    expected = model(row_select(src, expand), row_select(mask, expand), tgt[index, :4])[:, 3:4]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("index", [[1, 2, 0, 0], [0, 1, 2, 3], [3, 3, 3, 3], [2, 0], [0, 1, 2, 3, 1, 0]])
def test_kv_cache_reorder_matches_index_select_and_keeps_its_capacity(index):
    cache = KVCache()
    k, v = torch.randn(4, 2, 5, 3), torch.randn(4, 2, 5, 3)
    cache.append(k, v)
    capacity, storage = cache.k.size(2), cache.k.data_ptr()
    index = torch.tensor(index)
    cache.reorder(index)
    assert cache.length == 5 and cache.k.size(2) == capacity
    if len(index) == 4:  # same batch size: updated in place
        assert cache.k.data_ptr() == storage
    k2, v2 = torch.randn(len(index), 2, 1, 3), torch.randn(len(index), 2, 1, 3)
    got_k, got_v = cache.append(k2, v2)
    assert torch.equal(got_k, torch.cat([k[index], k2], dim=2))
    assert torch.equal(got_v, torch.cat([v[index], v2], dim=2))


def test_kv_cache_reorders_repeatedly_in_place_and_equals_gathering(monkeypatch):
    """Beam-like reorders (rows of a block of 5 choose parents among themselves, so histories share prefixes)
    update the storage in place, copying only the changed suffixes; every step equals gathering whole rows."""
    g = torch.Generator().manual_seed(0)
    cache, k, v = KVCache(), torch.randn(10, 2, 3, 3, generator=g), torch.randn(10, 2, 3, 3, generator=g)
    cache.append(k, v)
    storages, copied = set(), []
    gathered = []
    real_index_select = torch.Tensor.index_select

    def counting(self, dim, index):
        out = real_index_select(self, dim, index)
        if self.is_floating_point():  # keys/values (storage rows of Dh numbers), not the lineage
            gathered.append(out.numel())
        return out

    monkeypatch.setattr(torch.Tensor, "index_select", counting)
    for step in range(24):
        if step == 5:
            index = torch.arange(10)  # identity: nothing moves
        else:
            index = (torch.randint(0, 5, (10,), generator=g) + torch.arange(10) // 5 * 5)
        gathered.clear()
        cache.reorder(index)
        copied.append(sum(gathered) / (2 * cache.k[:, :, : cache.length].numel()))  # share of all slots copied
        k, v = k[index], v[index]
        assert torch.equal(cache.k[:, :, : cache.length], k) and torch.equal(cache.v[:, :, : cache.length], v)
        step_k, step_v = torch.randn(10, 2, 1, 3, generator=g), torch.randn(10, 2, 1, 3, generator=g)
        got_k, got_v = cache.append(step_k, step_v)
        k, v = torch.cat([k, step_k], dim=2), torch.cat([v, step_v], dim=2)
        assert torch.equal(got_k, k) and torch.equal(got_v, v)
        storages.add(cache.k.data_ptr())
    assert len(storages) <= 2  # in place, and one growth (capacity 16 -> 32) at most
    assert copied[5] == 0 and max(copied) <= 1 and min(copied[:5] + copied[6:]) > 0
    assert sum(copied[-8:]) / 8 < 0.5  # late reorders copy a small part of the histories


def test_caches_reordered_together_share_one_plan_and_each_equals_gathering(monkeypatch):
    """Three layers' caches appended in step share one plan of what to copy; a fourth, reordered on its own
    before (its lineage differs), gets its own; every cache equals gathering its rows."""
    g = torch.Generator().manual_seed(1)
    caches = [KVCache() for _ in range(4)]
    stores = [[torch.randn(6, 2, 4, 3, generator=g), torch.randn(6, 2, 4, 3, generator=g)] for _ in caches]
    for cache, (k, v) in zip(caches, stores):
        cache.append(k, v)
    planned = []
    real_plan = kv_cache._SlotCopies.plan
    monkeypatch.setattr(kv_cache._SlotCopies, "plan", lambda lineage, index: planned.append(1) or
                        real_plan(lineage, index))
    odd = torch.tensor([1, 1, 0, 4, 3, 3])
    caches[3].reorder(odd)  # the fourth cache alone: its lineage now differs from the others'
    stores[3] = [s[odd] for s in stores[3]]
    for _ in range(4):
        planned.clear()
        index = torch.randint(0, 3, (6,), generator=g) + torch.arange(6) // 3 * 3
        reorder_caches(caches, index)
        assert len(planned) == 2  # one for the three in step, one for the fourth
        for cache, kv in zip(caches, stores):
            kv[:] = [s[index] for s in kv]
            length = cache.length
            assert torch.equal(cache.k[:, :, :length], kv[0]) and torch.equal(cache.v[:, :, :length], kv[1])
            new_k, new_v = torch.randn(6, 2, 1, 3, generator=g), torch.randn(6, 2, 1, 3, generator=g)
            cache.append(new_k, new_v)
            kv[:] = [torch.cat([kv[0], new_k], dim=2), torch.cat([kv[1], new_v], dim=2)]


class CountingState(HistoryState):
    reorders = 0

    def reorder(self, index, *, same_sources=False):
        CountingState.reorders += 1
        super().reorder(index, same_sources=same_sources)


def test_beam_one_never_reorders_the_state():
    model = TableModel({}, {A: 0.5, B_: 0.3, EOS: 0.01}, state_type=CountingState)
    CountingState.reorders = 0
    beam_search(model, torch.full((2, 2), 3), None, beam_size=1, bos=BOS, eos=EOS, max_len=6)
    assert CountingState.reorders == 0  # every reorder would be the identity
    beam_search(model, torch.full((2, 2), 3), None, beam_size=2, bos=BOS, eos=EOS, max_len=6)
    assert CountingState.reorders >= 1


def test_beams_reading_their_shared_prefix_once_find_the_same_hypotheses(monkeypatch):
    """A Transformer's beam search with each sentence's common history read once per sentence
    (``shared_prefix_attention``, from 4 shared slots here) finds the same hypotheses, with the same
    scores to float rounding, as with every beam reading its own copy."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(family="transformer", src_vocab=40, tgt_vocab=40, d_model=32, n_heads=4,
                                    d_ff=64, enc_layers=1, dec_layers=2, dropout=0.0)).eval()
    src = torch.randint(3, 40, (3, 7), generator=torch.Generator().manual_seed(1))
    monkeypatch.setattr(multihead, "MANY_ROWS", 1)  # a few rows here; the CPU path wants many
    calls = []
    real = multihead.shared_prefix_attention
    monkeypatch.setattr(multihead, "shared_prefix_attention", lambda *a, **k: calls.append(1) or real(*a, **k))

    def search(shared_from):
        monkeypatch.setattr(multihead, "SHARED_PREFIX_MIN", shared_from)
        return beam_search(model, src, None, beam_size=4, bos=1, eos=2, max_len=30, n_best=4, banned=(0,))

    alone, shared = search(10**9), search(4)
    assert calls  # the second search read shared prefixes
    for ours, theirs in zip(shared.hypotheses, alone.hypotheses, strict=True):
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]
        assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], abs=1e-5)


@pytest.mark.parametrize("ranking", ["gnmt", "hf"])
def test_beams_that_no_repeat_ngram_strands_are_kept_not_lost(ranking):
    """Every token a beam may take used up before EOS was allowed: the sentence ended with no hypothesis at all
    (``best()`` raised IndexError). The stranded beams now finish without EOS, as at the length limit."""
    torch.manual_seed(0)
    lm = build_model(ModelConfig(family="lm", tgt_vocab=11, src_vocab=11, d_model=16, n_heads=2, d_ff=32,
                                 dec_layers=1, dropout=0.0)).eval()
    prompt = torch.tensor([[1, 5, 6], [1, 7, 8]])
    result = beam_search(lm, None, None, beam_size=2, bos=1, eos=2, max_len=14, prompt=prompt, banned=[2],
                         no_repeat_ngram=1, ranking=ranking, n_best=2)
    for row, hyps in zip(prompt.tolist(), result.hypotheses, strict=True):
        assert len(hyps) == 2
        for h in hyps:  # each of the 7 tokens neither banned nor in the prompt, once
            assert sorted(h.tokens) == sorted(set(range(11)) - {2, *row}) and math.isfinite(h.score)
    assert result.best().tokens.shape == (2, 7)
