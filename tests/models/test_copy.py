"""The pointer-generator (``model.copy: true``): its distribution, its OOV copying, its decoding.

The mixed distribution sums to 1 and copies an out-of-vocabulary source word through its extended
id; incremental decoding equals teacher forcing; beam 1 equals greedy; every parameter learns.
"""

import pytest
import torch

from seqmap.config import ConfigError, DataConfig, ModelConfig, RunConfig
from seqmap.data.tokenizers import BOS, EOS, PAD, UNK
from seqmap.decoding.beam import beam_search
from seqmap.decoding.greedy import greedy
from seqmap.models.builder import build_model
from seqmap.nn.copy import mix_copy

V = 13


def make(**overrides):
    cfg = dict(src_vocab=V, tgt_vocab=V, d_model=32, n_heads=4, d_ff=64, enc_layers=2, dec_layers=2,
               dropout=0.0, copy=True, share_vocab=True)
    cfg.update(overrides)
    torch.manual_seed(0)
    return build_model(ModelConfig(**cfg)).eval()


def batch(b=3, s=7, t=6, seed=1, oov=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V + oov, (b, s), generator=g)
    mask = torch.ones(b, s, dtype=torch.bool)
    mask[1, s - 2:] = False
    mask[2, 3:] = False
    return src.masked_fill(~mask, PAD), mask, torch.randint(4, V, (b, t), generator=g)


def test_mixed_distribution_sums_to_one():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, V, generator=g)
    weights = torch.softmax(torch.randn(2, 5, 4, generator=g), -1)
    src = torch.tensor([[5, 6, V, V + 1], [7, 7, 8, V]])  # two OOVs in row 0, one in row 1
    p_gen = torch.rand(2, 5, 1, generator=g)
    log_p = mix_copy(logits, weights, src, p_gen)
    assert log_p.shape == (2, 5, V + 2) and torch.isfinite(log_p).all()
    torch.testing.assert_close(log_p.exp().sum(-1), torch.ones(2, 5))
    # repeated source ids add their weights: row 1 copies id 7 with the weight of both positions
    gate = p_gen[1, :, 0]
    expected = gate * torch.softmax(logits[1], -1)[:, 7] + (1 - gate) * weights[1, :, :2].sum(-1)
    torch.testing.assert_close(log_p[1, :, 7].exp(), expected, atol=1e-6, rtol=1e-5)


def test_copy_puts_an_oov_source_word_on_its_extended_id():
    """p_gen = 0 and all attention on the OOV position: its extended id V gets all the mass."""
    logits = torch.zeros(1, 1, V)
    src = torch.tensor([[5, V, 6]])  # the middle word is out of the vocabulary: extended id V
    weights = torch.tensor([[[0.0, 1.0, 0.0]]])
    log_p = mix_copy(logits, weights, src, torch.zeros(1, 1, 1))
    assert int(log_p.argmax(-1)) == V and log_p[0, 0, V].exp() > 0.999


def test_model_copies_an_oov_source_word_when_generation_is_off():
    """A whole model: with the gate forced to copy, greedy decoding emits the source OOV's extended id."""
    model = make()
    with torch.no_grad():
        model.copy.gate.bias.fill_(-30.0)  # p_gen ~ 0: copy only
        model.copy.query.weight.zero_()
        model.copy.query.bias.zero_()  # uniform copy attention over the real source tokens
    src = torch.tensor([[V, V, V, 5]])  # an OOV word three times, one in-vocabulary word
    out = greedy(model, src, torch.ones_like(src, dtype=torch.bool), bos=BOS, eos=EOS, max_len=3,
                 banned=(PAD, BOS, UNK))
    assert out.tokens[0, 0].item() == V
    # the copied extended id is read back as UNK: the next step runs and stays finite
    log_p, _, _ = model.decode_step(out.tokens[:, :1], model.encode(src, None), None)
    assert torch.isfinite(log_p).all() and log_p.size(-1) == V + 1


def test_incremental_decoding_equals_teacher_forcing():
    model = make()
    src, mask, tgt = batch(oov=2)
    full = model(src, mask, tgt)
    memory, state, steps = model.encode(src, mask), None, []
    for i in range(tgt.size(1)):
        out, state, _ = model.decode_step(tgt[:, i:i + 1], memory, state)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(full.exp().sum(-1), torch.ones(tgt.shape))


def test_beam_one_equals_greedy():
    model = make()
    src, mask, _ = batch()
    limits = torch.tensor([6, 4, 5])
    g = greedy(model, src, mask, bos=BOS, eos=EOS, max_len=limits)
    b = beam_search(model, src, mask, beam_size=1, bos=BOS, eos=EOS, max_len=limits, length_penalty=1.0).best()
    assert torch.equal(b.tokens, g.tokens) and torch.equal(b.lengths, g.lengths)
    torch.testing.assert_close(b.scores, g.scores, atol=1e-5, rtol=1e-5)
    wide = beam_search(model, src, mask, beam_size=3, bos=BOS, eos=EOS, max_len=limits, length_penalty=1.0)
    assert len(wide.hypotheses) == 3


def test_every_parameter_gets_a_finite_gradient_through_the_mixed_loss():
    model = make().train()
    src, mask, tgt = batch(oov=1)
    log_p = model(src, mask, tgt)
    loss = torch.nn.functional.cross_entropy(log_p.flatten(0, 1), tgt.flatten(), label_smoothing=0.1)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.copy.gate.weight.grad.abs().sum() > 0


def test_copy_needs_the_transformer_and_a_joint_vocabulary():
    with pytest.raises(ConfigError, match="model.copy=true is for model.family=transformer"):
        ModelConfig(family="rnn", copy=True)
    with pytest.raises(ConfigError, match="data.joint_vocab=true"):
        RunConfig(model=ModelConfig(copy=True), data=DataConfig(joint_vocab=False))


def test_a_word_outside_the_vocabulary_is_copied_through_extended_ids():
    """Word tokenizer -> extended source ids -> a copying model -> the unseen word back as text."""
    from seqmap.data.oov import decode_extended, extend_source, extend_target
    from seqmap.data.tokenizers import train_tokenizer

    tok = train_tokenizer("word", ["install the tool now", "the tool"])
    src_ids, oov = extend_source(tok, "install zyxwv the zyxwv qq")
    v = tok.vocab_size
    assert oov == ["zyxwv", "qq"] and src_ids[1] == src_ids[3] == v and src_ids[4] == v + 1
    assert extend_target(tok, "zyxwv tool", oov) == [v, tok.encode("tool")[0]]
    model = make(src_vocab=v, tgt_vocab=v)
    with torch.no_grad():
        model.copy.gate.bias.fill_(-30.0)  # copy only
        model.copy.query.weight.zero_()
        model.copy.query.bias.zero_()
    src = torch.tensor([src_ids])
    out = greedy(model, src, None, bos=BOS, eos=EOS, max_len=1, banned=(PAD, BOS, UNK))
    assert decode_extended(tok, out.tokens[0].tolist(), oov) == "zyxwv"  # 2 of 5 positions: the likeliest
    assert decode_extended(tok, [v + 1, *tok.encode("tool")], oov) == "qq tool"


def test_extended_ids_decode_between_words_and_for_a_char_tokenizer():
    """A copied word after and between in-vocabulary words keeps its place; a char tokenizer joins without spaces;
    an extended id past the source's OOV list is an error naming both."""
    from seqmap.data.oov import decode_extended, extend_source
    from seqmap.data.tokenizers import train_tokenizer

    tok = train_tokenizer("word", ["install the tool now", "the tool"])
    v = tok.vocab_size
    ids, oov = extend_source(tok, "the tool zyxwv now qq")
    assert oov == ["zyxwv", "qq"] and ids[2] == v and ids[4] == v + 1
    assert decode_extended(tok, ids, oov) == "the tool zyxwv now qq"
    assert decode_extended(tok, [v + 1, v, *tok.encode("the")], oov) == "qq zyxwv the"
    with pytest.raises(ValueError, match=f"extended id {v + 2} names OOV piece 2, but the source has 2"):
        decode_extended(tok, [*tok.encode("the"), v + 2], oov)
    chars = train_tokenizer("char", ["ab c", "cab"])
    ids, oov = extend_source(chars, "a€b ¥c")
    assert oov == ["€", "¥"] and ids.count(chars.vocab_size) == 1
    assert decode_extended(chars, ids, oov) == "a€b ¥c"


def test_copy_attention_for_plots_is_what_the_output_mixes():
    """``copy_attention`` gives the weights and p_gen that ``forward`` mixes: mixing them again gives its output."""
    model = make()
    src, mask, tgt = batch()
    weights, p_gen = model.copy_attention(src, mask, tgt)
    assert weights.shape == (3, 6, 7) and p_gen.shape == (3, 6)
    assert torch.all(weights.masked_select(~mask[:, None, :].expand_as(weights)) == 0)  # padding: exactly 0
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 6))
    assert torch.all((p_gen > 0) & (p_gen < 1))
    logits = model.decoder.output(model(src, mask, tgt, features=True))
    torch.testing.assert_close(mix_copy(logits, weights, src, p_gen[..., None]), model(src, mask, tgt),
                               atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="no copy head"):
        make(copy=False).copy_attention(src, mask, tgt)
