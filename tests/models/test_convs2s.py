"""Invariants of the convolutional encoder-decoder (ConvS2S).

Every position scheme it takes and odd and even kernels: masked source positions get exactly zero
attention, padding never changes a real position (encoder and decoder), the future never changes the
past, cached decoding equals teacher forcing, states reorder by row, a sentence decodes the same alone
and in a batch (greedy and beam), every parameter learns, the encoder's gradient is scaled, and the
model memorises a batch.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from seqmap.config import ConfigError, ModelConfig
from seqmap.decoding.beam import beam_search
from seqmap.decoding.greedy import greedy
from seqmap.models.builder import build_model
from seqmap.models.convs2s import ConvS2S, scale_gradient
from seqmap.models.protocol import DecoderState, SequenceModel
from seqmap.nn.glu_conv import CausalGLUConv, GLUConv

SRC_V, TGT_V, PAD, BOS, EOS = 11, 13, 0, 1, 2

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster


def make(**overrides) -> ConvS2S:
    cfg = dict(family="convs2s", src_vocab=SRC_V, tgt_vocab=TGT_V, emb_size=12, hidden_size=16, kernel_size=3,
               enc_layers=2, dec_layers=3, dropout=0.0, positional="learned", max_len=64)
    cfg.update(overrides)
    torch.manual_seed(0)
    return build_model(ModelConfig(**cfg)).eval()


def batch(b=3, s=7, t=6, seed=1):
    """Sources right-padded to S (row 1: 5 tokens, row 2: 3), targets (B, T) without padding."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, SRC_V, (b, s), generator=g)
    src_mask = torch.ones(b, s, dtype=torch.bool)
    src_mask[1, s - 2:] = False
    src_mask[2, 3:] = False
    src = src.masked_fill(~src_mask, PAD)
    tgt = torch.randint(3, TGT_V, (b, t), generator=g)
    return src, src_mask, tgt


def decode_incrementally(model, src, src_mask, tgt, chunks=None):
    """Feed tgt through decode_step in chunks (default: one token at a time)."""
    memory = model.encode(src, src_mask)
    chunks = chunks or [1] * tgt.size(1)
    state, logits, start = None, [], 0
    for n in chunks:
        out, state, _ = model.decode_step(tgt[:, start:start + n], memory, state)
        logits.append(out)
        start += n
    assert state.position == tgt.size(1)
    return torch.cat(logits, dim=1)


VARIANTS = {
    "learned-k3": dict(),
    "learned-k2": dict(kernel_size=2),
    "learned-k4": dict(kernel_size=4),
    "sinusoidal-k5": dict(positional="sinusoidal", kernel_size=5),
    "none-k3": dict(positional="none"),
    "untied-bias": dict(tie_embeddings=False, output_bias=True),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_incremental_decoding_equals_teacher_forcing(variant):
    model = make(**VARIANTS[variant])
    src, src_mask, tgt = batch()
    with torch.no_grad():
        full = model(src, src_mask, tgt)
        torch.testing.assert_close(decode_incrementally(model, src, src_mask, tgt), full, atol=1e-5, rtol=1e-5)
        # a forced prefix of several tokens at once, then single steps
        torch.testing.assert_close(decode_incrementally(model, src, src_mask, tgt, [3, 1, 2]), full,
                                   atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_masked_source_positions_get_exactly_zero_weight(variant):
    model = make(**VARIANTS[variant])
    src, src_mask, tgt = batch()
    memory = model.encode(src, src_mask)
    _, _, attention = model.decode_step(tgt[:, :4], memory, None, need_attention=True)
    assert attention.shape == (3, 3, 1, 4, 7)  # (B, L_dec, H = 1, t, S): one map per decoder layer
    assert torch.all(attention.permute(0, 4, 1, 2, 3)[~src_mask] == 0)  # exactly zero, every layer and step
    torch.testing.assert_close(attention.sum(-1), torch.ones(3, 3, 1, 4))
    # the weights do not depend on asking for them one step at a time
    _, state, _ = model.decode_step(tgt[:, :3], memory, None)
    _, _, step = model.decode_step(tgt[:, 3:4], memory, state, need_attention=True)
    torch.testing.assert_close(step, attention[..., 3:4, :], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_source_padding_does_not_change_outputs(variant):
    model = make(**VARIANTS[variant])
    src, src_mask, tgt = batch()
    padded_src = torch.cat([src, torch.full((3, 4), PAD)], dim=1)
    padded_mask = torch.cat([src_mask, torch.zeros(3, 4, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        keys, values = model.encoder(src, src_mask)
        more_keys, more_values = model.encoder(padded_src, padded_mask)
        torch.testing.assert_close(more_keys[:, :7], keys, atol=1e-6, rtol=1e-6)  # encoder: real positions equal
        torch.testing.assert_close(more_values[:, :7], values, atol=1e-6, rtol=1e-6)
        assert torch.all(more_keys[~padded_mask] == 0) and torch.all(more_values[~padded_mask] == 0)
        logits = model(src, src_mask, tgt)
        torch.testing.assert_close(model(padded_src, padded_mask, tgt), logits, atol=1e-5, rtol=1e-5)
        # one sentence alone (no padding, no mask) gives what it gives inside the padded batch
        alone_keys, _ = model.encoder(src[2:3, :3], None)
        torch.testing.assert_close(alone_keys, keys[2:3, :3], atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(model(src[2:3, :3], None, tgt[2:3]), logits[2:3], atol=1e-5, rtol=1e-5)


def test_target_padding_does_not_change_real_positions():
    model = make()
    src, src_mask, tgt = batch()
    padded = torch.cat([tgt, torch.full((3, 3), PAD)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(src, src_mask, padded)[:, :6], model(src, src_mask, tgt),
                                   atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("variant", VARIANTS)
def test_future_tokens_do_not_change_earlier_logits(variant):
    model = make(**VARIANTS[variant])
    src, src_mask, tgt = batch()
    changed = tgt.clone()
    changed[:, 4:] = (changed[:, 4:] + 1 - 3) % (TGT_V - 3) + 3
    with torch.no_grad():
        before, after = model(src, src_mask, tgt), model(src, src_mask, changed)
    torch.testing.assert_close(after[:, :4], before[:, :4], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(after[:, 4:], before[:, 4:])


def test_state_reorder_selects_batch_rows():
    model = make()
    src, src_mask, tgt = batch()
    memory = model.encode(src, src_mask)
    _, state, _ = model.decode_step(tgt[:, :3], memory, None)
    assert isinstance(state, DecoderState) and [w.shape for w in state.windows] == [(3, 2, 16)] * 3
    index = torch.tensor([2, 0, 2])
    state.reorder(index)
    got, _, _ = model.decode_step(tgt[index, 3:4], memory.index_select(index), state)
    expected = model(src[index], src_mask[index], tgt[index])[:, 3:4]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # beam search moving beams within their sentence: same_sources, memory unchanged
    memory = model.encode(src[[0, 0, 1, 1]], src_mask[[0, 0, 1, 1]])
    rows = tgt[[0, 1, 2, 0]]
    _, state, _ = model.decode_step(rows[:, :2], memory, None)
    swap = torch.tensor([1, 0, 3, 2])
    state.reorder(swap, same_sources=True)
    got, _, _ = model.decode_step(rows[swap, 2:3], memory, state)
    expected = model(src[[0, 0, 1, 1]], src_mask[[0, 0, 1, 1]], rows[swap, :3])[:, 2:3]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_a_sentence_decodes_the_same_alone_and_in_a_batch_greedy_and_beam():
    model = make(dec_layers=2)
    src, src_mask, _ = batch(b=3, s=7, seed=4)
    limits = torch.tensor([9, 6, 8])
    kw = dict(bos=BOS, eos=EOS, max_len=limits)
    g = greedy(model, src, src_mask, **kw)
    b1 = beam_search(model, src, src_mask, beam_size=1, length_penalty=1.0, **kw).best()
    assert torch.equal(b1.tokens, g.tokens) and torch.equal(b1.lengths, g.lengths)  # beam 1 is greedy
    beams = beam_search(model, src, src_mask, beam_size=3, length_penalty=0.6, n_best=2, **kw).hypotheses
    for i in range(3):
        n = int(src_mask[i].sum())
        alone_src, alone_kw = src[i:i + 1, :n], dict(bos=BOS, eos=EOS, max_len=int(limits[i]))
        alone = greedy(model, alone_src, None, **alone_kw)
        length = int(g.lengths[i])
        assert g.tokens[i, :length].tolist() == alone.tokens[0, :length].tolist()
        alone_beams = beam_search(model, alone_src, None, beam_size=3, length_penalty=0.6, n_best=2,
                                  **alone_kw).hypotheses[0]
        assert [h.tokens for h in beams[i]] == [h.tokens for h in alone_beams]


def test_every_parameter_gets_a_finite_gradient():
    model = make(dropout=0.2, tie_embeddings=False, output_bias=True).train()
    src, src_mask, tgt = batch()
    model(src, src_mask, tgt).log_softmax(-1).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{name} has a non-finite gradient"
        assert p.grad.abs().sum() > 0, f"{name} has an all-zero gradient"


def test_the_encoder_gradient_is_scaled_by_one_over_twice_the_attentions():
    x = torch.randn(3, requires_grad=True)
    y = scale_gradient(x, 0.25)
    y.sum().backward()
    assert torch.equal(y, x) and torch.equal(x.grad, torch.full((3,), 0.25))
    model = make()
    assert model.encoder.grad_scale == 1 / (2 * 3)
    src, src_mask, tgt = batch()
    grads = []
    for scale in (model.encoder.grad_scale, 1.0):
        model.zero_grad()
        model.encoder.grad_scale = scale
        model(src, src_mask, tgt).log_softmax(-1).mean().backward()
        grads.append([p.grad.clone() for p in model.encoder.layers.parameters()])
    for scaled, plain in zip(*grads, strict=True):  # the convolutions reach the loss only through z
        torch.testing.assert_close(scaled, plain / 6, atol=1e-9, rtol=1e-5)


def test_the_papers_initialisation_keeps_the_variance():
    model = make(emb_size=64, hidden_size=128, kernel_size=3, dropout=0.2, tie_embeddings=False)
    conv = model.encoder.layers[0].conv
    assert conv.weight.std().item() == pytest.approx(math.sqrt(4 * 0.8 / (3 * 128)), rel=0.05)
    assert model.encoder.fc_in.weight.std().item() == pytest.approx(math.sqrt(0.8 / 64), rel=0.05)
    assert model.encoder.fc_out.weight.std().item() == pytest.approx(math.sqrt(1 / 128), rel=0.05)
    assert model.decoder.output.weight.std().item() == pytest.approx(math.sqrt(0.8 / 64), rel=0.05)
    assert model.encoder.embedding.weight[1:].std().item() == pytest.approx(0.1, rel=0.05)
    assert model.encoder.positional.table.weight.std().item() == pytest.approx(0.1, rel=0.05)
    assert torch.all(model.encoder.embedding.weight[PAD] == 0)
    assert all(bool((p == 0).all()) for name, p in model.named_parameters() if name.endswith("bias"))
    # the factor 4 before a GLU: unit-variance inputs give a GLU output of the same order (a quarter without it)
    torch.manual_seed(0)
    block = GLUConv(256, 3).eval()
    assert 0.7 < block(torch.randn(8, 64, 256)).var().item() < 1.5


def test_causal_glu_conv_window_continues_the_sequence():
    torch.manual_seed(0)
    conv = CausalGLUConv(4, 3).eval()
    x = torch.randn(2, 5, 4)
    full, last = conv(x)
    first, window = conv(x[:, :2])
    rest, window = conv(x[:, 2:], window)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full)
    torch.testing.assert_close(window, x[:, 3:])
    torch.testing.assert_close(last, x[:, 3:])
    empty, _ = conv(x[:, :0])
    assert empty.shape == (2, 0, 4)


def test_features_and_the_output_layer_give_the_logits():
    model = make(tie_embeddings=False, output_bias=True)
    src, src_mask, tgt = batch()
    with torch.no_grad():
        torch.testing.assert_close(model.output_layer(model(src, src_mask, tgt, features=True)),
                                   model(src, src_mask, tgt))


def test_overfits_one_batch():
    """Teacher-forced reversal of 4 sources of length 6; the sources share their last 3 tokens, so only the
    source tells the rows apart after the first 3 target tokens."""
    torch.manual_seed(0)
    model = make(src_vocab=12, tgt_vocab=12, emb_size=16, hidden_size=32, enc_layers=2, dec_layers=2).train()
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, 12, (4, 6), generator=g)
    src[:, 3:] = src[0, 3:]
    tgt = src.flip(1)
    tgt_in = torch.cat([torch.full((4, 1), BOS), tgt[:, :-1]], dim=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(200):
        loss = F.cross_entropy(model(src, None, tgt_in).flatten(0, 1), tgt.flatten())
        if loss.item() < 0.05:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05


def test_speaks_the_protocol_with_tied_and_shared_embeddings():
    model = make(src_vocab=TGT_V, share_vocab=True)
    assert isinstance(model, SequenceModel)
    assert model.decoder.output.weight is model.decoder.embedding.weight
    assert model.encoder.embedding is model.decoder.embedding
    untied = make(tie_embeddings=False)
    assert untied.decoder.output.weight is not untied.decoder.embedding.weight


def test_an_empty_source_row_attends_to_nothing_and_stays_finite():
    model = make()
    src, src_mask, tgt = batch()
    src_mask[1] = False
    memory = model.encode(src.masked_fill(~src_mask, PAD), src_mask)
    logits, _, attention = model.decode_step(tgt[:, :2], memory, None, need_attention=True)
    assert torch.isfinite(logits).all() and torch.all(attention[1] == 0)


@pytest.mark.parametrize("cfg, message", [
    (dict(positional="rope"), "model.positional=rope acts inside attention scores, and convs2s adds positions"),
    (dict(positional="relative_cp"), "model.positional=relative_cp acts inside Transformer self-attention, which "
                                     "model.family=convs2s has none of"),
    (dict(positional="alibi"), "model.positional=alibi acts inside attention scores"),
    (dict(kernel_size=1), "model.kernel_size must be >= 2"),
    (dict(family="transformer", kernel_size=5), "model.kernel_size is for model.family=convs2s"),
    (dict(copy=True), "model.copy=true is for model.family=transformer"),
])
def test_config_errors_name_the_option(cfg, message):
    with pytest.raises(ConfigError, match=message) as error:
        ModelConfig(**{"family": "convs2s", **cfg})
    assert "\n" not in str(error.value)


def test_builder_errors_name_the_option():
    with pytest.raises(ConfigError, match="share_vocab=true needs src_vocab == tgt_vocab"):
        ModelConfig(family="convs2s", src_vocab=5, tgt_vocab=6, share_vocab=True)
    with pytest.raises(ConfigError, match="model.tgt_vocab must be set"):
        build_model(ModelConfig(family="convs2s", src_vocab=5))
    src, src_mask, tgt = batch()
    with pytest.raises(ValueError, match="learned positions stop at model.max_len=4"):
        make(max_len=4)(src, src_mask, tgt)


# -- a run: `seqmap train`, translate (greedy, beam, sampling), evaluate -------------------------------------------

PAIRS = [("ein zwei drei", "one two three"), ("drei vier", "three four"), ("vier zwei ein", "four two one"),
         ("zwei zwei", "two two")]


def train_tiny_run(root, steps: int = 12):
    """A run directory of a tiny ConvS2S trained for a few steps by `seqmap train` on a word-level toy corpus."""
    from seqmap.cli import main

    root.mkdir(parents=True, exist_ok=True)
    (root / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS * 10))
    (root / "valid.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS))
    (root / "config.yaml").write_text(
        "model: {family: convs2s, emb_size: 8, hidden_size: 8, enc_layers: 2, dec_layers: 2, dropout: 0.1,\n"
        "        positional: learned, max_len: 160}\n"
        f"data: {{tokenizer: word, train: {root / 'train.tsv'}, valid: {root / 'valid.tsv'}}}\n"
        f"train: {{max_steps: {steps}, max_tokens: 200, lr: 3.0e-3, warmup: 0, schedule: constant, "
        f"clip_norm: 0.1, valid_every: {steps}}}\n")
    assert main(["train", str(root / "config.yaml"), "--run-dir", str(root / "run")]) == 0
    return root / "run"


@pytest.fixture(scope="module")
def convs2s_run(tmp_path_factory):
    return train_tiny_run(tmp_path_factory.mktemp("convs2s"))


def test_a_run_trains_translates_and_evaluates_through_the_cli(convs2s_run, capsys, tmp_path):
    from seqmap.cli import main

    capsys.readouterr()
    outputs = []
    for options in ([], ["--decode.beam_size", "3"], ["--sample", "--seed", "1"]):
        assert main(["translate", str(convs2s_run), "ein zwei drei", *options]) == 0
        outputs.append(capsys.readouterr().out.strip())
    from seqmap.decoding.text import translate_texts
    from seqmap.runs import load_run

    run = load_run(convs2s_run)
    for output, beam in zip(outputs[:2], (1, 3), strict=True):  # what the decoding functions give
        assert output == translate_texts(run.model, run.src_tok, run.tgt_tok, ["ein zwei drei"], run.cfg.decode,
                                         beam_size=beam)[0]
    assert "\n" not in outputs[2]
    (tmp_path / "src.txt").write_text("".join(f"{s}\n" for s, _ in PAIRS))
    (tmp_path / "ref.txt").write_text("".join(f"{t}\n" for _, t in PAIRS))
    assert main(["evaluate", str(convs2s_run), "--src", str(tmp_path / "src.txt"), "--ref",
                 str(tmp_path / "ref.txt"), "--out", str(tmp_path / "hyp.txt")]) == 0
    assert "BLEU" in capsys.readouterr().out and len((tmp_path / "hyp.txt").read_text().splitlines()) == 4
