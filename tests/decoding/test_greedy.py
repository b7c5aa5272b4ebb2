"""Greedy decoding against a fake protocol model whose next-token choice we script."""

from dataclasses import dataclass
from functools import partial

import pytest
import torch

from seqmap.decoding.beam import beam_search
from seqmap.decoding.greedy import greedy
from seqmap.decoding.sampling import sample
from seqmap.models.protocol import Memory

V, BOS, EOS, PAD = 10, 1, 2, 0


@dataclass
class FakeState:
    position: int
    history: torch.Tensor  # (B, position) every token fed so far

    def reorder(self, index):
        self.history = self.history.index_select(0, index)


class ScriptedModel:
    """Row b emits ``script[b][position - 1]`` after consuming ``position`` tokens; after the script, EOS.

    The next token depends only on the state's position, so a decoder that drops
    or resets the state emits the wrong tokens.
    """

    def __init__(self, script):
        self.script = script
        self.calls = []  # (tokens fed, position before) per decode_step
        self.encoded = 0

    def encode(self, src, src_mask):
        self.encoded += 1
        return Memory(states=None if src is None else src.float()[..., None], mask=src_mask)

    def decode_step(self, tokens, memory, state=None, *, need_attention=False):
        batch, t = tokens.shape
        if state is None:
            state = FakeState(0, tokens.new_zeros(batch, 0))
        self.calls.append((tokens.clone(), state.position))
        state = FakeState(state.position + t, torch.cat([state.history, tokens], dim=1))
        logits = torch.full((batch, t, V), -5.0)
        for b in range(batch):
            row = self.script[b]
            nxt = row[state.position - 1] if state.position - 1 < len(row) else EOS
            logits[b, -1, nxt] = 5.0
        return logits, state, None


def _src(batch):
    return torch.full((batch, 4), 3), torch.ones(batch, 4, dtype=torch.bool)


def test_follows_the_script_and_stops_when_all_rows_finish():
    model = ScriptedModel([[5, 6, EOS], [7, EOS]])
    out = greedy(model, *_src(2), bos=BOS, eos=EOS, max_len=10)
    assert out.tokens.tolist() == [[5, 6, EOS], [7, EOS, PAD]]  # finished rows emit pad
    assert out.lengths.tolist() == [3, 2]
    assert len(model.calls) == 3 and model.encoded == 1
    # a finished row's score stops growing: each step adds log_softmax of a +5 logit among -5s
    step = torch.log_softmax(torch.tensor([5.0] + [-5.0] * (V - 1)), 0)[0]
    torch.testing.assert_close(out.scores, torch.stack([3 * step, 2 * step]), atol=1e-6, rtol=1e-4)


def test_threads_the_state_one_token_at_a_time():
    model = ScriptedModel([[4, 5, 6, EOS]])
    greedy(model, *_src(1), bos=BOS, eos=EOS, max_len=10)
    fed = [tokens.tolist() for tokens, _ in model.calls]
    assert fed == [[[BOS]], [[4]], [[5]], [[6]]]
    assert [position for _, position in model.calls] == [0, 1, 2, 3]


def test_max_len_caps_the_output_without_eos():
    model = ScriptedModel([[4] * 20, [5, EOS]])
    out = greedy(model, *_src(2), bos=BOS, eos=EOS, max_len=6)
    assert out.tokens.shape == (2, 6)
    assert out.tokens[0].tolist() == [4] * 6
    assert out.tokens[1].tolist() == [5, EOS, PAD, PAD, PAD, PAD]
    assert out.lengths.tolist() == [6, 2]


def test_prompt_is_prefilled_in_one_call_and_not_returned():
    # after the 3-token prompt the position is 3, so row b emits script[b][2:]
    model = ScriptedModel([[0, 0, 8, EOS]])
    prompt = torch.tensor([[BOS, 3, 4]])
    out = greedy(model, None, None, bos=BOS, eos=EOS, max_len=5, prompt=prompt)
    assert out.tokens.tolist() == [[8, EOS]]
    assert model.calls[0][0].tolist() == [[BOS, 3, 4]] and model.calls[1][0].tolist() == [[8]]


def test_needs_a_source_or_a_prompt():
    with pytest.raises(ValueError, match="source or a prompt"):
        greedy(ScriptedModel([[EOS]]), None, None, bos=BOS, eos=EOS, max_len=3)


@pytest.mark.parametrize("max_len", [10.5, 10.0, True, torch.tensor([3.0, 4.5])],
                         ids=["10.5", "10.0", "True", "floats"])
def test_a_max_len_that_is_not_a_whole_number_of_tokens_is_refused(max_len):
    """A float max_len used to be truncated silently (10.5 -> 10 tokens); every search refuses it by name."""
    for search in (greedy, sample, partial(beam_search, beam_size=2)):
        with pytest.raises(TypeError, match=r"max_len must be a whole number of tokens \(an int or an integer "
                                            r"tensor\), got .*; round it"):
            search(ScriptedModel([[EOS], [EOS]]), *_src(2), bos=BOS, eos=EOS, max_len=max_len)
    out = greedy(ScriptedModel([[4] * 9, [EOS]]), *_src(2), bos=BOS, eos=EOS, max_len=torch.tensor([3, 4]))
    assert out.lengths.tolist() == [3, 1]


class FixedLogits:
    """Every step gives the same (B, V) logits; the state counts the steps."""

    def __init__(self, logits):
        self.logits = logits

    def encode(self, src, src_mask):
        return Memory(states=src.float()[..., None], mask=src_mask)

    def decode_step(self, tokens, memory, state=None, *, need_attention=False):
        return self.logits[:, None].expand(-1, tokens.size(1), -1), (state or 0) + 1, None


def test_greedy_takes_the_best_logit_without_a_softmax_and_the_same_tokens_with_or_without_scores():
    # 0.0 and 5e-8 differ by less than half a float32 step of their log-probs (about -1.63): the softmax
    # can round both to one value, and a choice among log-probs would take the first; the best logit
    # is the second (transformers and CTranslate2 take the best logit too)
    logits = torch.tensor([[-1.0, -1.0, -1.0, 0.0, -1.0, 5e-8, -1.0, -1.0, -1.0, -1.0],
                           [-1.0, 2.0, -1.0, -1.0, 3.0, -1.0, -1.0, -1.0, -1.0, -1.0]])
    with_scores = greedy(FixedLogits(logits), *_src(2), bos=BOS, eos=EOS, max_len=3)
    without = greedy(FixedLogits(logits), *_src(2), bos=BOS, eos=EOS, max_len=3, scores=False)
    assert with_scores.tokens.tolist() == [[5, 5, 5], [4, 4, 4]] == without.tokens.tolist()
    assert without.scores is None and without.lengths.tolist() == [3, 3]
    expected = 3 * torch.log_softmax(logits, dim=-1)[[0, 1], [5, 4]]
    torch.testing.assert_close(with_scores.scores, expected, atol=1e-6, rtol=1e-5)


def test_scores_false_is_for_greedy_only():
    from seqmap.decoding.greedy import decode_loop
    from seqmap.decoding.sampling import sampling_choice

    with pytest.raises(ValueError, match="scores=False is for greedy"):
        decode_loop(FixedLogits(torch.zeros(1, V)), *_src(1), bos=BOS, eos=EOS, max_len=2,
                    choose=sampling_choice(1.0, 0, 1.0, None), scores=False)


class CountingRows:
    """Passes the protocol through and records how many rows each decode step computed."""

    def __init__(self, model):
        self.model, self.rows = model, []

    def encode(self, src, src_mask):
        return self.model.encode(src, src_mask)

    def decode_step(self, tokens, memory, state=None, *, need_attention=False):
        self.rows.append(tokens.size(0))
        return self.model.decode_step(tokens, memory, state, need_attention=need_attention)


@pytest.mark.parametrize("no_repeat_ngram", [0, 2])
def test_finished_rows_leave_the_batch_and_every_row_decodes_as_alone(trained_reverse_toy, no_repeat_ngram):
    from seqmap.decoding.greedy import DROP_FINISHED_AT

    model, task = trained_reverse_toy
    batch = next(iter(task.batches(1, 12, seed=5)))  # sources of 2 to 6 symbols: outputs end at different steps
    spy = CountingRows(model)
    kw = dict(bos=BOS, eos=EOS, max_len=8, need_attention=True, no_repeat_ngram=no_repeat_ngram)
    out = greedy(spy, batch.src, batch.src_mask, **kw)
    assert spy.rows[0] == 12 and spy.rows[-1] < 12  # rows were dropped ...
    assert all(a >= b for a, b in zip(spy.rows, spy.rows[1:]))
    assert len(set(spy.rows)) > 2  # ... more than once
    lengths = out.lengths.tolist()
    for before, after in zip(spy.rows, spy.rows[1:]):  # ... never before a quarter of the batch had finished
        assert before == after or (before - after) * DROP_FINISHED_AT >= before
    for b in range(12):
        n, s = lengths[b], int(batch.src_mask[b].sum())
        alone = greedy(model, batch.src[b : b + 1, :s], batch.src_mask[b : b + 1, :s], **kw)
        assert out.tokens[b, :n].tolist() == alone.tokens[0, :n].tolist() and lengths[b] == int(alone.lengths[0])
        assert out.tokens[b, n:].eq(PAD).all()
        torch.testing.assert_close(out.scores[b], alone.scores[0], rtol=0, atol=1e-5)
        torch.testing.assert_close(out.attention[b, :, :, :n, :s], alone.attention[0, :, :, :n], rtol=0, atol=1e-5)
        assert out.attention[b, :, :, n:].eq(0).all() and out.attention[b, ..., s:].eq(0).all()
    without_scores = greedy(model, batch.src, batch.src_mask, bos=BOS, eos=EOS, max_len=8, scores=False,
                            no_repeat_ngram=no_repeat_ngram)
    assert torch.equal(without_scores.tokens, out.tokens) and without_scores.scores is None
    assert torch.equal(without_scores.lengths, out.lengths)


@pytest.mark.parametrize("family", ["transformer", "rnn", "convs2s", "lm", "rnn_lm"])
def test_rows_at_their_limit_leave_the_batch_in_every_family_and_decode_as_alone(family):
    """Rows of unequal limits (and, for the language models, prompts of unequal length) end at different
    steps; each family's state follows the dropped rows (``state.reorder``), so each row decodes as alone."""
    from seqmap.config import ModelConfig
    from seqmap.models.builder import build_model

    torch.manual_seed(0)
    cfg = ModelConfig(family=family, src_vocab=0 if family in ("lm", "rnn_lm") else 24, tgt_vocab=24, d_model=32,
                      n_heads=2, d_ff=64, enc_layers=1, dec_layers=2, dropout=0.0, emb_size=16, hidden_size=16)
    model = build_model(cfg).eval()
    limits = torch.tensor([2, 7, 3, 9, 1, 6, 4, 8])
    if family in ("lm", "rnn_lm"):
        prompts = [torch.randint(3, 24, (n,)) for n in (3, 1, 4, 2, 5, 2, 1, 3)]
        inputs = [(None, None, {"prompt": [p]}) for p in prompts]
        batch = (None, None, {"prompt": prompts})
    else:
        src = torch.randint(3, 24, (8, 5))
        inputs = [(src[b : b + 1], torch.ones(1, 5, dtype=torch.bool), {}) for b in range(8)]
        batch = (src, torch.ones(8, 5, dtype=torch.bool), {})
    spy = CountingRows(model)
    out = greedy(spy, batch[0], batch[1], bos=BOS, eos=EOS, max_len=limits, banned=[EOS], **batch[2])
    assert out.lengths.tolist() == limits.tolist()  # EOS banned: every row runs to its limit
    assert spy.rows[-1] < 8 and len(set(spy.rows)) > 2
    for b, (src_b, mask_b, kw) in enumerate(inputs):
        alone = greedy(model, src_b, mask_b, bos=BOS, eos=EOS, max_len=int(limits[b]), banned=[EOS], **kw)
        n = int(limits[b])
        assert out.tokens[b, :n].tolist() == alone.tokens[0].tolist(), b
        assert out.tokens[b, n:].eq(PAD).all()
        torch.testing.assert_close(out.scores[b], alone.scores[0], rtol=0, atol=1e-5)
