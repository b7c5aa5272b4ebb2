"""Invariants of the recurrent language model (family rnn_lm), for every cell.

Incremental decoding (one token at a time, or a prompt then tokens) equals
teacher forcing, later tokens never change earlier logits, states reorder by
batch row, every parameter learns, tying shares the table, it memorises a
sequence, and it generates through the shared decoding code.
"""

import pytest
import torch
import torch.nn.functional as F

from seqmap.config import ConfigError, ModelConfig
from seqmap.decoding.greedy import greedy
from seqmap.models.builder import build_model
from seqmap.models.protocol import DecoderState, SequenceModel
from seqmap.models.rnn_lm import RNNLM

V = 17
CELLS = ["rnn", "lstm", "gru"]


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster


def make(cell="lstm", **overrides) -> RNNLM:
    cfg = dict(family="rnn_lm", tgt_vocab=V, rnn_cell=cell, emb_size=6, hidden_size=8, dec_layers=2, dropout=0.0)
    cfg.update(overrides)
    torch.manual_seed(0)
    return build_model(ModelConfig(**cfg)).eval()


def tokens(b=3, t=9, seed=1):
    return torch.randint(3, V, (b, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("cell", CELLS)
def test_incremental_decoding_equals_teacher_forcing(cell):
    model, x = make(cell), tokens()
    full = model(None, None, x)
    memory = model.encode(None, None)
    state, steps = None, []
    for i in range(x.size(1)):
        logits, state, attention = model.decode_step(x[:, i:i + 1], memory, state)
        steps.append(logits)
        assert attention is None
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-6)
    assert state.position == x.size(1)
    prefill, state, _ = model.decode_step(x[:, :5], memory, None)  # a prompt at once, then one token
    nxt, state, _ = model.decode_step(x[:, 5:6], memory, state)
    torch.testing.assert_close(torch.cat([prefill, nxt], 1), full[:, :6], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", CELLS)
def test_future_tokens_do_not_change_earlier_logits(cell):
    model, x = make(cell), tokens()
    y = x.clone()
    y[:, 6:] = torch.randint(3, V, y[:, 6:].shape, generator=torch.Generator().manual_seed(9))
    torch.testing.assert_close(model(None, None, x)[:, :6], model(None, None, y)[:, :6])


@pytest.mark.parametrize("cell", CELLS)
def test_state_reorder_selects_batch_rows(cell):
    model, x = make(cell), tokens(b=4)
    memory = model.encode()
    _, state, _ = model.decode_step(x[:, :4], memory)
    index = torch.tensor([2, 0, 2])
    state.reorder(index)
    assert isinstance(state, DecoderState)
    logits, _, _ = model.decode_step(x[index, 4:5], memory, state)
    torch.testing.assert_close(logits, model(None, None, x[index, :5])[:, 4:5], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", CELLS)
def test_every_parameter_gets_a_finite_gradient(cell):
    model = make(cell, tie_embeddings=False).train()
    x = tokens()
    F.cross_entropy(model(None, None, x[:, :-1]).flatten(0, 1), x[:, 1:].flatten()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("emb, hidden", [(8, 8), (6, 8)])
def test_tied_output_shares_the_embedding_table(emb, hidden):
    model = make(emb_size=emb, hidden_size=hidden, tie_embeddings=True)
    assert model.output.weight is model.embedding.weight
    assert (model.bridge is None) == (emb == hidden)
    assert torch.equal(model.embedding.weight[0], torch.zeros(emb))  # PAD row
    untied = make(emb_size=emb, hidden_size=hidden, tie_embeddings=False)
    assert untied.output.weight is not untied.embedding.weight and untied.bridge is None


def test_memorises_a_sequence_and_greedy_decoding_continues_it():
    torch.manual_seed(0)
    model = make("lstm", emb_size=16, hidden_size=32, dec_layers=1).train()
    seq = torch.tensor([[1, 5, 9, 4, 12, 7, 3, 15, 6, 2]])  # BOS ... EOS
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(150):
        opt.zero_grad()
        F.cross_entropy(model(None, None, seq[:, :-1])[0], seq[0, 1:]).backward()
        opt.step()
    model.eval()
    out = greedy(model, None, None, max_len=12, bos=1, eos=2, prompt=seq[:, :3])
    assert out.tokens[0].tolist() == seq[0, 3:].tolist()  # the rest of the sequence, ending at its EOS


def test_speaks_the_protocol_and_config_checks():
    assert isinstance(make(), SequenceModel)
    with pytest.raises(ConfigError, match="rnn_cell"):
        ModelConfig(family="rnn_lm", rnn_cell="transformer")
    with pytest.raises(ConfigError, match="family"):
        ModelConfig(family="rnnlm")


@pytest.mark.parametrize("cell", CELLS)
def test_carried_state_continues_the_text_and_cuts_the_gradient(cell):
    """Two windows through CarriedState give the logits of one forward over both; gradients stop at the cut."""
    from seqmap.training.carry import CarriedState

    model, x = make(cell), tokens(t=10)
    carry = CarriedState(model)
    first, second = carry(None, None, x[:, :4]), carry(None, None, x[:, 4:])
    torch.testing.assert_close(torch.cat([first, second], 1), model(None, None, x), rtol=1e-5, atol=1e-6)
    carry.reset()
    torch.testing.assert_close(carry(None, None, x[:, 4:]), model(None, None, x[:, 4:]))

    train = make(cell, tie_embeddings=False).train()  # untied: the output layer's gradient reaches no embedding
    carry = CarriedState(train)
    carry(None, None, x[:, :4])
    carry(None, None, x[:, 4:]).sum().backward()
    grads = train.embedding.weight.grad
    only_first = sorted(set(x[:, :4].flatten().tolist()) - set(x[:, 4:].flatten().tolist()))
    assert torch.equal(grads[only_first], torch.zeros_like(grads[only_first]))  # no gradient into window one
