"""Invariants of the RNN encoder-decoder family.

Every cell (rnn, lstm, gru) x source use (no attention, Cho et al. fixed context,
Bahdanau, Luong dot/general/concat, Luong without input feeding, a reversed source
without and with attention) x uni/bidirectional
encoder: incremental decoding equals teacher forcing, padding never changes real
outputs, states and memories reorder by batch row, every parameter learns, and a
few configurations memorise a batch.
"""

import pytest
import torch
import torch.nn.functional as F

from seqmap.config import ConfigError, ModelConfig
from seqmap.models.builder import build_model
from seqmap.models.protocol import DecoderState, SequenceModel
from seqmap.models.rnn import RNNDecoder, RNNSeq2Seq, build_rnn, reverse_padded

SRC_V, TGT_V, PAD = 11, 13, 0

MODES = {
    "none": dict(rnn_attention="none"),
    "cho": dict(rnn_attention="none", context_every_step=True),
    "bahdanau": dict(rnn_attention="bahdanau"),
    "dot": dict(rnn_attention="dot"),
    "general": dict(rnn_attention="general"),
    "general-nofeed": dict(rnn_attention="general", input_feeding=False),
    "concat": dict(rnn_attention="concat"),
    "none-reversed": dict(rnn_attention="none", reverse_source=True),
    "bahdanau-reversed": dict(rnn_attention="bahdanau", reverse_source=True),
}
# dot attention needs encoder width == decoder width, so only a unidirectional encoder.
GRID = [pytest.param(cell, mode, bi, id=f"{cell}-{mode}-{'bi' if bi else 'uni'}")
        for cell in ("rnn", "lstm", "gru") for mode in MODES for bi in (False, True)
        if not (mode == "dot" and bi)]


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster


def make(cell="lstm", mode="bahdanau", bidirectional=True, **overrides) -> RNNSeq2Seq:
    cfg = dict(family="rnn", src_vocab=SRC_V, tgt_vocab=TGT_V, rnn_cell=cell, emb_size=6, hidden_size=5,
               bidirectional=bidirectional, enc_layers=2, dec_layers=2, dropout=0.0)
    cfg.update(MODES[mode])
    cfg.update(overrides)
    torch.manual_seed(0)
    return build_rnn(ModelConfig(**cfg)).eval()


def batch(b=3, s=7, t=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, SRC_V, (b, s), generator=g)
    src_mask = torch.ones(b, s, dtype=torch.bool)
    src_mask[1, s - 2:] = False
    src_mask[2, 3:] = False
    src = src.masked_fill(~src_mask, PAD)
    tgt = torch.randint(3, TGT_V, (b, t), generator=g)
    return src, src_mask, tgt


def decode_incrementally(model, src, src_mask, tgt, chunks=None):
    """Feed tgt through decode_step in chunks (default: one token at a time); also return attention."""
    memory = model.encode(src, src_mask)
    chunks = chunks or [1] * tgt.size(1)
    state, logits, attention, start = None, [], [], 0
    for n in chunks:
        out, state, attn = model.decode_step(tgt[:, start:start + n], memory, state, need_attention=True)
        logits.append(out)
        attention.append(attn)
        start += n
    assert state.position == tgt.size(1)
    return torch.cat(logits, dim=1), attention


@pytest.mark.parametrize("cell, mode, bidirectional", GRID)
def test_incremental_decoding_equals_teacher_forcing(cell, mode, bidirectional):
    model = make(cell, mode, bidirectional)
    src, src_mask, tgt = batch()
    full = model(src, src_mask, tgt)
    assert full.shape == (3, 5, TGT_V)
    steps, attention = decode_incrementally(model, src, src_mask, tgt)
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=1e-5)
    chunked, _ = decode_incrementally(model, src, src_mask, tgt, [3, 1, 1])
    torch.testing.assert_close(chunked, full, atol=1e-5, rtol=1e-5)
    if MODES[mode]["rnn_attention"] == "none":
        assert all(a is None for a in attention)
        return
    attention = torch.cat(attention, dim=3)  # (B, 1, 1, T, S)
    assert attention.shape == (3, 1, 1, 5, 7)
    torch.testing.assert_close(attention.sum(-1), torch.ones(3, 1, 1, 5))
    assert (attention.masked_select(~src_mask[:, None, None, None, :]) == 0).all()


@pytest.mark.parametrize("cell, mode, bidirectional", GRID)
def test_source_padding_does_not_change_outputs(cell, mode, bidirectional):
    model = make(cell, mode, bidirectional)
    src, src_mask, tgt = batch()
    reference = model(src, src_mask, tgt)
    extra = 3
    more_mask = torch.cat([src_mask, torch.zeros(3, extra, dtype=torch.bool)], dim=1)
    padded = torch.cat([src, torch.full((3, extra), PAD)], dim=1)
    torch.testing.assert_close(model(padded, more_mask, tgt), reference, atol=1e-5, rtol=1e-5)
    # whatever sits under the padding is never read
    garbage = torch.randint(3, SRC_V, padded.shape, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(model(torch.where(more_mask, padded, garbage), more_mask, tgt), reference,
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cell, mode, bidirectional", GRID)
def test_state_reorder_selects_rows(cell, mode, bidirectional):
    model = make(cell, mode, bidirectional)
    src, src_mask, tgt = batch()
    full = model(src, src_mask, tgt)
    memory = model.encode(src, src_mask)
    _, state, _ = model.decode_step(tgt[:, :2], memory)
    index = torch.tensor([2, 0, 2, 1])
    state.reorder(index)
    assert isinstance(state, DecoderState) and state.position == 2
    logits, state, _ = model.decode_step(tgt[index, 2:], memory, state)
    torch.testing.assert_close(logits, full[index, 2:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cell, mode, bidirectional", GRID)
def test_memory_index_select_decodes_the_same_rows(cell, mode, bidirectional):
    model = make(cell, mode, bidirectional)
    src, src_mask, tgt = batch()
    full = model(src, src_mask, tgt)
    index = torch.tensor([1, 1, 2, 0])
    memory = model.encode(src, src_mask).index_select(index)
    logits, _, _ = model.decode_step(tgt[index], memory)
    torch.testing.assert_close(logits, full[index], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cell, mode, bidirectional", GRID)
def test_every_parameter_gets_a_finite_gradient(cell, mode, bidirectional):
    model = make(cell, mode, bidirectional).train()
    src, src_mask, tgt = batch()
    F.cross_entropy(model(src, src_mask, tgt).flatten(0, 1), tgt.flatten()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("layers", [(1, 2), (3, 2), (2, 1)])
def test_bridge_maps_encoder_layers_to_decoder_layers(layers):
    enc_layers, dec_layers = layers
    for cell in ("lstm", "gru"):
        model = make(cell, "general", enc_layers=enc_layers, dec_layers=dec_layers)
        src, src_mask, tgt = batch()
        memory = model.encode(src, src_mask)
        h = memory.final[0] if cell == "lstm" else memory.final
        assert h.shape == (dec_layers, 3, 5)
        assert memory.states.shape == (3, 7, 10)
        steps, _ = decode_incrementally(model, src, src_mask, tgt)
        torch.testing.assert_close(steps, model(src, src_mask, tgt), atol=1e-5, rtol=1e-5)


def test_reverse_padded_reverses_real_positions_only_and_is_its_own_inverse():
    x = torch.arange(10.0).view(2, 5)[:, :, None].expand(2, 5, 3)
    lengths = torch.tensor([3, 5])
    out = reverse_padded(x, lengths)
    assert out[..., 0].tolist() == [[2.0, 1.0, 0.0, 3.0, 4.0], [9.0, 8.0, 7.0, 6.0, 5.0]]
    torch.testing.assert_close(reverse_padded(out, lengths), x)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_reversed_encoder_reads_the_source_backwards_and_returns_states_in_source_order(bidirectional):
    forward_model = make("lstm", "bahdanau", bidirectional)
    backward_model = make("lstm", "bahdanau", bidirectional, reverse_source=True)
    backward_model.load_state_dict(forward_model.state_dict())  # the same weights; only the reading order differs
    src, src_mask, _ = batch()
    lengths = src_mask.sum(1)
    flipped = reverse_padded(src[:, :, None], lengths)[:, :, 0]
    states, final = backward_model.encoder(src, src_mask)
    flipped_states, flipped_final = forward_model.encoder(flipped, src_mask)
    torch.testing.assert_close(final, flipped_final)
    torch.testing.assert_close(states, reverse_padded(flipped_states, lengths))
    # and the order matters: the unreversed encoder ends in a different state
    assert not torch.allclose(forward_model.encoder(src, src_mask)[1][0], final[0])
    # without a mask (no padding) the whole row is reversed
    full_states, full_final = backward_model.encoder(src[:1, :], None)
    flip_states, flip_final = forward_model.encoder(src[:1, :].flip(1), None)
    torch.testing.assert_close(full_final, flip_final)
    torch.testing.assert_close(full_states, flip_states.flip(1))


def test_padded_encoder_states_are_zero_and_empty_source_is_finite():
    model = make("lstm", "bahdanau")
    src, src_mask, tgt = batch()
    src_mask[0] = False
    src[0] = PAD
    memory = model.encode(src, src_mask)
    assert (memory.states[~src_mask] == 0).all()
    logits, _, attention = model.decode_step(tgt, memory, need_attention=True)
    assert torch.isfinite(logits).all()
    assert (attention[0] == 0).all()


@pytest.mark.parametrize("mode", ["none", "cho", "bahdanau", "general", "bahdanau-reversed"])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_an_empty_source_encodes_as_the_initial_state_with_or_without_padding(cell, mode):
    """A source of length 0 (a row of padding, or a batch of width S = 0, which packing refused) is the RNN's
    zero initial state through the bridge, and the decoder runs on it as on any source."""
    model = make(cell, mode)
    src, src_mask, tgt = batch()
    src_mask[0], src[0] = False, PAD
    _, final = model.encoder(src, src_mask)
    zero = torch.zeros(4, 1, 5)  # (layers x directions, B, H): what the RNN starts from
    initial = model.encoder.bridge((zero, zero) if cell == "lstm" else zero)
    if cell == "lstm":  # (h, c)
        final, initial = torch.stack(final), torch.stack(initial)
    torch.testing.assert_close(final[..., :1, :], initial)
    for width in (0, 4):  # S = 0, and rows of padding only, alone or in a batch of one
        for rows in (1, 3):
            empty_src = torch.full((rows, width), PAD)
            empty_mask = torch.zeros(rows, width, dtype=torch.bool)
            for mask in (empty_mask, None) if width == 0 else (empty_mask,):
                logits = model(empty_src, mask, tgt[:rows])
                assert logits.shape == (rows, 5, TGT_V) and torch.isfinite(logits).all()
                padding_row = model(src[:1].expand(rows, -1), src_mask[:1].expand(rows, -1), tgt[:rows])
                torch.testing.assert_close(logits, padding_row, atol=1e-6, rtol=1e-5)
                memory = model.encode(empty_src, mask)
                assert memory.states.shape == (rows, width, 10)
                _, _, attention = model.decode_step(tgt[:rows, :1], memory, need_attention=True)
                assert attention is None or (attention.shape[-1] == width and (attention == 0).all())


@pytest.mark.parametrize("tie", [True, False])
def test_output_layer_tying(tie):
    model = make("gru", "bahdanau", tie_embeddings=tie)
    output = model.decoder.output
    last = output[-1] if isinstance(output, torch.nn.Sequential) else output
    assert (last.weight is model.decoder.embedding.weight) == tie
    # features (H + D_enc = 15) are projected to emb_size (6) before the tied layer
    assert (output[0].in_features, output[0].out_features) == (15, 6) if tie else last.in_features == 15


def test_built_through_the_common_builder_and_speaks_the_protocol():
    cfg = ModelConfig(family="rnn", src_vocab=SRC_V, tgt_vocab=TGT_V, emb_size=6, hidden_size=5, dropout=0.0)
    model = build_model(cfg)
    assert isinstance(model, RNNSeq2Seq) and isinstance(model, SequenceModel)


def test_share_vocab_uses_one_table():
    model = make(share_vocab=True, src_vocab=TGT_V)
    assert model.encoder.embedding is model.decoder.embedding


def test_clear_errors():
    with pytest.raises(ConfigError, match="bidirectional=false"):
        make("lstm", "dot", bidirectional=True)
    with pytest.raises(ConfigError, match="reverse_source=true is for model.family=rnn"):
        ModelConfig(family="transformer", reverse_source=True)
    model = make("lstm", "general")
    src, src_mask, tgt = batch()
    with pytest.raises(ValueError, match="right-padded"):
        model.encode(src, src_mask.flip(1))
    rnn = torch.nn.GRU(4, 4, batch_first=True)
    with pytest.raises(ValueError, match="Luong"):
        RNNDecoder(torch.nn.Embedding(5, 4), rnn, torch.nn.Linear(4, 5), input_feeding=True)
    with pytest.raises(ValueError, match="without attention"):
        RNNDecoder(torch.nn.Embedding(5, 4), rnn, torch.nn.Linear(4, 5), attention=model.decoder.attention,
                   context_every_step=True)


def overfit_batch(model, steps=300, lr=0.02):
    """Teacher-force reversal of 4 sources of length 6 over a 12-token vocabulary.

    The sources share their last 3 tokens, so every target starts with the same 3
    tokens and only the source tells the rows apart after that.
    """
    g = torch.Generator().manual_seed(0)
    src = torch.randint(2, 12, (4, 6), generator=g)
    src[:, 3:] = src[0, 3:]
    tgt = src.flip(1)
    tgt_in = torch.cat([torch.ones(4, 1, dtype=torch.long), tgt[:, :-1]], dim=1)  # BOS = 1
    src_mask = torch.ones(4, 6, dtype=torch.bool)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = F.cross_entropy(model(src, src_mask, tgt_in).flatten(0, 1), tgt.flatten())
        if loss.item() < 0.05:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


@pytest.mark.parametrize("cell, mode", [("lstm", "bahdanau"), ("gru", "dot"), ("lstm", "none"), ("rnn", "concat"),
                                        ("gru", "cho")])
def test_overfits_one_batch(cell, mode):
    torch.manual_seed(0)
    cfg = ModelConfig(family="rnn", src_vocab=12, tgt_vocab=12, rnn_cell=cell, emb_size=16, hidden_size=24,
                      bidirectional=mode != "dot", enc_layers=1, dec_layers=1, dropout=0.0, **MODES[mode])
    assert overfit_batch(build_rnn(cfg)) < 0.05


def test_input_feeding_carries_the_attentional_vector():
    model = make("lstm", "concat")
    src, src_mask, tgt = batch()
    memory = model.encode(src, src_mask)
    _, state, _ = model.decode_step(tgt[:, :1], memory)
    assert state.feed.shape == (3, 5) and (state.feed != 0).any()
    fed, _, _ = model.decode_step(tgt[:, 1:2], memory, state)
    _, state, _ = model.decode_step(tgt[:, :1], memory)
    state.feed = torch.zeros_like(state.feed)
    unfed, _, _ = model.decode_step(tgt[:, 1:2], memory, state)
    assert not torch.allclose(fed, unfed)


@pytest.mark.parametrize("mode", ["bahdanau", "general"])
def test_attention_query_is_previous_state_for_bahdanau_and_current_for_luong(mode):
    model = make("gru", mode)
    src, src_mask, tgt = batch()
    memory = model.encode(src, src_mask)
    _, state, attention = model.decode_step(tgt[:, :1], memory, need_attention=True)
    top = state.hidden[-1] if mode == "general" else memory.final[-1]  # (B, H)
    _, expected = model.decoder.attention(top, memory.states, memory.mask)
    torch.testing.assert_close(attention[:, 0, 0, 0], expected)


def test_a_mask_that_is_not_bool_is_refused_naming_the_convention():
    """A float or int mask failed deep in torch (bitwise_or, masked_fill) with no word of the convention."""
    model = make()
    src, src_mask, tgt = batch()
    for wrong in (src_mask.float(), src_mask.long()):
        with pytest.raises(TypeError, match="src_mask must be a bool tensor, True at real tokens"):
            model.encode(src, wrong)
