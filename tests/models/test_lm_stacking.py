"""Language-model states of rows that have read different numbers of tokens stack into one batch
(``LMState.stack``, ``RNNLMState.stack``), and every row then decodes as it does alone.

Every positional scheme of the decoder-only LM (learned positions past their window
included, where rows cross it at different steps) and every RNN cell: logits and
attention of each stacked row equal those of the row decoded alone, through steps of
one token and of several, and after the rows are reordered.
"""

import pytest
import torch

from seqmap.config import ModelConfig
from seqmap.models.builder import build_model
from seqmap.models.lm import LMState
from seqmap.models.protocol import Memory
from seqmap.models.rnn_lm import RNNLMState
from seqmap.nn.positional import POSITIONAL_KINDS

V = 13
WINDOW = 8  # learned positions stop here; the rows below read up to 16 tokens
PROMPT_LENGTHS = (3, 7, 1, 5)
CHUNKS = (1, 2, 1, 1, 3, 1)  # new tokens per step after the prompts

CASES = {
    **{f"lm-{p}": dict(family="lm", positional=p) for p in POSITIONAL_KINDS},
    "lm-relative-values": dict(family="lm", positional="relative", relative_values=True, relative_clip=3),
    "lm-rope-gqa-post-norm": dict(family="lm", positional="rope", n_kv_heads=2, norm_position="post"),
    **{f"rnn_lm-{cell}": dict(family="rnn_lm", rnn_cell=cell, emb_size=6, hidden_size=8)
       for cell in ("rnn", "lstm", "gru")},
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster


def make(case: str) -> torch.nn.Module:
    cfg = dict(tgt_vocab=V, d_model=32, n_heads=4, d_ff=64, dec_layers=2, dropout=0.0, max_len=WINDOW)
    cfg.update(CASES[case])
    torch.manual_seed(0)
    return build_model(ModelConfig(**cfg)).eval()


def prompts_and_steps(seed=1):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, V, (n,), generator=g) for n in PROMPT_LENGTHS]
    steps = torch.randint(3, V, (len(prompts), sum(CHUNKS)), generator=g)
    return prompts, steps


def run_chunks(model, state, steps):
    """Feed steps (B, N) in CHUNKS; per chunk (logits (B, t, V), attention or None)."""
    out, start = [], 0
    for n in CHUNKS:
        logits, state, attention = model.decode_step(steps[:, start:start + n], Memory(), state, need_attention=True)
        out.append((logits, attention))
        start += n
    return out, state


def alone(model, prompt, steps):
    logits, state, _ = model.decode_step(prompt[None], Memory(), None)
    out, _ = run_chunks(model, state, steps[None])
    return logits[:, -1], out


def stacked(model, prompts, steps):
    first, states = [], []
    for p in prompts:
        logits, state, _ = model.decode_step(p[None], Memory(), None)
        first.append(logits[:, -1])
        states.append(state)
    state = type(states[0]).stack(states)
    out, state = run_chunks(model, state, steps)
    return torch.cat(first), out, state


def assert_row_equals_alone(got, want, row):
    """A stacked row's chunk outputs equal its own: logits, and attention at its keys (zero past them)."""
    for (logits, attention), (own_logits, own_attention) in zip(got, want):
        torch.testing.assert_close(logits[row:row + 1], own_logits, atol=1e-5, rtol=1e-5)
        assert (attention is None) == (own_attention is None)
        if attention is not None:
            keys = own_attention.size(-1)
            torch.testing.assert_close(attention[row:row + 1, ..., :keys], own_attention, atol=1e-5, rtol=1e-5)
            assert torch.all(attention[row, ..., keys:] == 0)


@pytest.mark.parametrize("case", CASES)
def test_stacked_rows_of_unequal_length_decode_as_each_alone(case):
    model = make(case)
    prompts, steps = prompts_and_steps()
    first, got, state = stacked(model, prompts, steps)
    for row, prompt in enumerate(prompts):
        own_first, own = alone(model, prompt, steps[row])
        torch.testing.assert_close(first[row:row + 1], own_first, atol=0, rtol=0)  # each prompt was read alone
        assert_row_equals_alone(got, own, row)
    assert state.position == max(PROMPT_LENGTHS) + sum(CHUNKS)  # the longest row


@pytest.mark.parametrize("case", ["lm-learned", "lm-rope", "lm-t5", "rnn_lm-lstm"])
def test_a_stacked_state_reorders_its_rows(case):
    model = make(case)
    prompts, steps = prompts_and_steps(seed=2)
    states = [model.decode_step(p[None], Memory(), None)[1] for p in prompts]
    state = type(states[0]).stack(states)
    index = torch.tensor([3, 0, 0])
    state.reorder(index)
    got, _ = run_chunks(model, state, steps[index])
    for row, b in enumerate(index.tolist()):
        _, own = alone(model, prompts[b], steps[b])
        assert_row_equals_alone(got, own, row)


def test_rows_of_one_length_stack_without_padding():
    model = make("lm-rope")
    prompts = [torch.tensor([3, 4, 5]), torch.tensor([6, 7, 8])]
    state = LMState.stack([model.decode_step(p[None], Memory(), None)[1] for p in prompts])
    assert state.pads is None and state.position == 3 and state.caches[0].length == 3


def test_shorter_rows_are_padded_on_the_left_of_the_caches():
    model = make("lm-sinusoidal")
    prompts = [torch.tensor([3, 4]), torch.tensor([5, 6, 7, 8, 9])]
    states = [model.decode_step(p[None], Memory(), None)[1] for p in prompts]
    state = LMState.stack(states)
    assert state.pads.tolist() == [3, 0] and state.position == 5
    k = state.caches[0].k[:, :, :state.caches[0].length]  # (2, H, 5, Dh)
    assert torch.all(k[0, :, :3] == 0)
    torch.testing.assert_close(k[0, :, 3:], states[0].caches[0].k[0, :, :2], atol=0, rtol=0)
    torch.testing.assert_close(k[1], states[1].caches[0].k[0, :, :5], atol=0, rtol=0)


def test_rnn_states_stack_their_hidden_rows():
    model = make("rnn_lm-gru")
    states = [model.decode_step(torch.tensor([[3, 4, 5][:n]]), Memory(), None)[1] for n in (1, 3)]
    state = RNNLMState.stack(states)
    assert state.hidden.shape[1] == 2 and state.position == 3
    torch.testing.assert_close(state.hidden[:, 1], states[1].hidden[:, 0], atol=0, rtol=0)
