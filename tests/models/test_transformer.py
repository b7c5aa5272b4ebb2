"""Invariants of the Transformer encoder-decoder and the decoder-only LM.

Every positional scheme and both norm placements: incremental decoding equals
teacher forcing, padding never changes real outputs, the future never changes
the past, every parameter learns, and each model can memorise a batch.
"""

import pytest
import torch

from seqmap.config import ConfigError, ModelConfig
from seqmap.models.builder import build_model
from seqmap.models.protocol import Memory, SequenceModel
from seqmap.models.transformer import source_blocks
from seqmap.nn.positional import POSITIONAL_KINDS

SRC_V, TGT_V, PAD = 11, 13, 0


def make(family="transformer", **overrides) -> torch.nn.Module:
    cfg = dict(family=family, src_vocab=SRC_V, tgt_vocab=TGT_V, d_model=32, n_heads=4, d_ff=64, enc_layers=2,
               dec_layers=2, dropout=0.0, max_len=64)
    cfg.update(overrides)
    torch.manual_seed(0)
    return build_model(ModelConfig(**cfg)).eval()


def batch(b=3, s=7, t=6, seed=1):
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


FAMILIES = ["transformer", "lm"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("positional", POSITIONAL_KINDS)
@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_incremental_decoding_equals_teacher_forcing(family, positional, norm_position):
    model = make(family, positional=positional, norm_position=norm_position)
    src, src_mask, tgt = batch()
    full = model(src, src_mask, tgt)
    torch.testing.assert_close(decode_incrementally(model, src, src_mask, tgt), full, atol=1e-5, rtol=1e-5)
    # a prompt/prefix of several tokens at once, then single steps
    torch.testing.assert_close(decode_incrementally(model, src, src_mask, tgt, [3, 1, 2]), full,
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", [
    dict(n_kv_heads=1), dict(n_kv_heads=2), dict(activation="swiglu", norm="rmsnorm"),
    dict(activation="gelu"), dict(relative_values=True, positional="relative"),
    dict(tie_embeddings=False), dict(scale_embeddings=False),
    dict(activation="geglu_tanh", linear_bias=False, scale_attention=False, head_dim=6, positional="t5",
         norm="rmsnorm")])
@pytest.mark.parametrize("family", FAMILIES)
def test_incremental_decoding_for_layer_variants(family, variant):
    model = make(family, **variant)
    src, src_mask, tgt = batch()
    torch.testing.assert_close(decode_incrementally(model, src, src_mask, tgt), model(src, src_mask, tgt),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positional", POSITIONAL_KINDS)
def test_source_padding_does_not_change_outputs(positional):
    model = make("transformer", positional=positional)
    src, src_mask, tgt = batch()
    padded_src = torch.cat([src, torch.full((3, 4), PAD)], dim=1)
    padded_mask = torch.cat([src_mask, torch.zeros(3, 4, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(model(padded_src, padded_mask, tgt), model(src, src_mask, tgt),
                               atol=1e-5, rtol=1e-5)
    # and one sentence alone gives what it gives inside the padded batch
    alone = model(src[2:3, :3], src_mask[2:3, :3], tgt[2:3])
    torch.testing.assert_close(alone, model(src, src_mask, tgt)[2:3], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("positional", POSITIONAL_KINDS)
def test_future_tokens_do_not_change_earlier_logits(family, positional):
    model = make(family, positional=positional)
    src, src_mask, tgt = batch()
    changed = tgt.clone()
    changed[:, 4:] = (changed[:, 4:] + 1 - 3) % (TGT_V - 3) + 3
    before, after = model(src, src_mask, tgt), model(src, src_mask, changed)
    torch.testing.assert_close(after[:, :4], before[:, :4], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(after[:, 4:], before[:, 4:])


def test_cross_attention_is_returned_per_layer_and_head_and_ignores_padding():
    model = make("transformer")
    src, src_mask, tgt = batch()
    memory = model.encode(src, src_mask)
    _, _, attention = model.decode_step(tgt[:, :2], memory, None, need_attention=True)
    assert attention.shape == (3, 2, 4, 2, 7)  # (B, L, H, t, S)
    torch.testing.assert_close(attention.sum(-1), torch.ones(3, 2, 4, 2))
    assert torch.all(attention[2, ..., 3:] == 0)


def test_lm_attention_covers_keys_seen_so_far():
    model = make("lm")
    _, _, tgt = batch()
    _, state, _ = model.decode_step(tgt[:, :4], Memory(), None)
    _, _, attention = model.decode_step(tgt[:, 4:5], Memory(), state, need_attention=True)
    assert attention.shape == (3, 2, 4, 1, 5)
    torch.testing.assert_close(attention.sum(-1), torch.ones(3, 2, 4, 1))


def windowed_reference(model, tokens, window):
    """nanoGPT's generate: the next-token logits after each prefix, read from its last `window` tokens."""
    return torch.stack([model(None, None, tokens[:, max(0, t + 1 - window):t + 1])[:, -1]
                        for t in range(tokens.size(1))], dim=1)


@pytest.mark.parametrize("chunks", [[1] * 14, [5, 1, 1, 4, 3], [12, 2]])
def test_lm_with_learned_positions_slides_a_window_past_max_len(chunks):
    model = make("lm", positional="learned", max_len=6)
    tokens = torch.randint(3, TGT_V, (2, 14), generator=torch.Generator().manual_seed(3))
    with pytest.raises(ValueError, match="model.max_len=6"):
        model(None, None, tokens)  # teacher forcing has no window to slide
    reference = windowed_reference(model, tokens, 6)
    state, start = None, 0
    for n in chunks:
        out, state, _ = model.decode_step(tokens[:, start:start + n], Memory(), state)
        start += n
        assert out.size(1) == min(n, 6)
        # the next-token logits read the last 6 tokens, as nanoGPT's generate does
        torch.testing.assert_close(out[:, -1], reference[:, start - 1], atol=1e-5, rtol=1e-5)
        if start <= 6:  # inside the window, every position is exact
            torch.testing.assert_close(out, reference[:, start - n:start], atol=1e-5, rtol=1e-5)
    assert state.position == 14


def test_lm_window_reorders_its_history_and_places_attention_at_absolute_positions():
    model = make("lm", positional="learned", max_len=4)
    tokens = torch.randint(3, TGT_V, (3, 7), generator=torch.Generator().manual_seed(4))
    _, state, _ = model.decode_step(tokens[:, :6], Memory(), None)
    index = torch.tensor([2, 0, 2])
    state.reorder(index)
    got, _, attention = model.decode_step(tokens[index, 6:7], Memory(), state, need_attention=True)
    torch.testing.assert_close(got[:, -1], model(None, None, tokens[index, 3:7])[:, -1], atol=1e-5, rtol=1e-5)
    assert attention.shape == (3, 2, 4, 1, 7)  # keys 0..6; the first three fell out of the window
    assert torch.all(attention[..., :3] == 0)
    torch.testing.assert_close(attention.sum(-1), torch.ones(3, 2, 4, 1))


@pytest.mark.parametrize("family", FAMILIES)
def test_state_reorder_selects_batch_rows(family):
    model = make(family)
    src, src_mask, tgt = batch()
    memory = model.encode(src, src_mask)
    _, state, _ = model.decode_step(tgt[:, :3], memory, None)
    index = torch.tensor([2, 0, 2])
    state.reorder(index)
    got, _, _ = model.decode_step(tgt[index, 3:4], memory.index_select(index), state)
    expected = model(src[index], src_mask[index], tgt[index])[:, 3:4]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("positional", ["learned", "relative", "t5"])
def test_every_parameter_gets_a_finite_gradient(family, positional):
    model = make(family, positional=positional, dropout=0.1).train()
    src, src_mask, tgt = batch()
    model(src, src_mask, tgt).log_softmax(-1).mean().backward()
    for name, p in model.named_parameters():
        if family == "lm" and name.startswith("encoder"):
            continue
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{name} has a non-finite gradient"
        assert p.grad.abs().sum() > 0, f"{name} has an all-zero gradient"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_overfits_one_batch(family, norm_position):
    model = make(family, norm_position=norm_position).train()
    src, src_mask, tgt = batch(b=4, t=7, seed=5)
    inputs, targets = tgt[:, :-1], tgt[:, 1:]
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):
        loss = torch.nn.functional.cross_entropy(model(src, src_mask, inputs).flatten(0, 1), targets.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05


def test_models_speak_the_protocol():
    for family in FAMILIES:
        assert isinstance(make(family), SequenceModel)


def test_tied_and_shared_embeddings():
    model = make("transformer", src_vocab=TGT_V, share_vocab=True)
    assert model.decoder.output.weight is model.decoder.embedding.weight
    assert model.encoder.embedding is model.decoder.embedding
    untied = make("transformer", tie_embeddings=False)
    assert untied.decoder.output.weight is not untied.decoder.embedding.weight


@pytest.mark.parametrize("cfg, message", [
    (dict(tgt_vocab=0), "model.tgt_vocab"),
    (dict(src_vocab=0), "model.src_vocab"),
    (dict(share_vocab=True), "share_vocab"),
])
def test_builder_errors_name_the_option(cfg, message):
    with pytest.raises(ConfigError, match=message):
        make("transformer", **cfg)


@pytest.mark.parametrize("family, cfg, message", [
    ("transformer", dict(positional="relative", relative_clip=-1), r"^model\.relative_clip=-1 must be >= 0"),
    ("transformer", dict(positional="t5", t5_buckets=3), r"^model\.t5_buckets=3 is too small; use at least 4"),
    ("lm", dict(positional="t5", t5_buckets=1), r"^model\.t5_buckets=1 is too small; use at least 2"),
    ("lm", dict(positional="t5", t5_buckets=8, t5_max_distance=4), r"^model\.t5_max_distance=4 must exceed the 4 "),
    ("transformer", dict(positional="rope", rope_base=0.0), r"^model\.rope_base=0\.0 must be > 1"),
    ("lm", dict(positional="rope", rope_base=-5.0), r"^model\.rope_base=-5\.0 must be > 1"),
    ("lm", dict(positional="rope", rope_base=1.0), r"^model\.rope_base=1\.0 must be > 1"),
])
def test_bad_positional_options_are_config_errors_naming_the_option(family, cfg, message):
    """The options of a positional scheme are checked where the scheme is built: a ConfigError (one line from the
    command line, never a traceback) naming ``model.<option>``. A RoPE base <= 1 once built NaN (base <= 0) or
    equal (base 1) angles without a word."""
    with pytest.raises(ConfigError, match=message):
        make(family, **cfg)


def test_the_edges_of_the_positional_options_build():
    """The smallest accepted values: clip 0 (every offset is one), the fewest buckets, a base just above 1."""
    src, src_mask, tgt = batch()
    for family, cfg in [("transformer", dict(positional="relative", relative_clip=0)),
                        ("transformer", dict(positional="t5", t5_buckets=4, t5_max_distance=3)),
                        ("lm", dict(positional="t5", t5_buckets=2, t5_max_distance=2)),
                        ("lm", dict(positional="rope", rope_base=1.5))]:
        model = make(family, **cfg)
        with torch.no_grad():
            out = model(None, None, tgt) if family == "lm" else model(src, src_mask, tgt)
        assert out.shape == (3, 6, TGT_V) and bool(out.isfinite().all()), (family, cfg)


@pytest.mark.parametrize("cfg, message", [
    (dict(d_model=30, n_heads=4), "divisible"),
    (dict(n_kv_heads=3), "n_kv_heads"),
    (dict(positional="absolute"), "sinusoidal"),
    (dict(norm_position="middle"), "norm_position"),
    (dict(dropout=1.5), "dropout"),
    (dict(head_dim=0), "model.head_dim must be > 0"),
    (dict(head_dim=6, positional="rope"), "model.head_dim=6 cannot go with model.positional=rope"),
    (dict(scale_attention=False, positional="relative"), "model.scale_attention=false cannot go with model.posit"),
    (dict(family="lm", scale_output=True), "model.scale_output=true scales an encoder-decoder's decoder output"),
    (dict(family="rnn", linear_bias=False, scale_attention=False), "model.linear_bias=False and "
                                                                   "model.scale_attention=False change multi-head"),
])
def test_config_rejects_bad_values(cfg, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**cfg)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("tie", [True, False])
def test_features_through_the_output_layer_are_the_logits(family, tie):
    model = make(family, tie_embeddings=tie)
    src, src_mask, tgt = batch()
    if family == "lm":
        src = src_mask = None
    features = model(src, src_mask, tgt, features=True)
    assert features.shape == (3, 6, 32)
    assert isinstance(model.output_layer, torch.nn.Linear)
    assert (model.output_layer.weight is model.decoder.embedding.weight if family == "transformer"
            else model.output_layer.weight is model.embedding.weight) == tie
    torch.testing.assert_close(model.output_layer(features), model(src, src_mask, tgt))


T5_OPTIONS = dict(positional="t5", norm="rmsnorm", activation="geglu_tanh", linear_bias=False, scale_attention=False,
                  scale_embeddings=False, head_dim=6, share_vocab=True, src_vocab=TGT_V)  # an imported T5's


@pytest.mark.parametrize("tie", [True, False])
def test_t5_options_keep_the_invariants(tie):
    """The options a T5 maps onto (``seqmap.hub.t5``), with the rescaled output: no bias anywhere, features times
    the output layer are the logits, padding and the future change nothing, every parameter learns."""
    model = make(**T5_OPTIONS, tie_embeddings=tie, scale_output=tie)
    assert not [name for name, _ in model.named_parameters() if name.endswith(".bias")]
    assert model.decoder.output_scale == (32**-0.5 if tie else 1.0)
    src, src_mask, tgt = batch()
    logits = model(src, src_mask, tgt)
    torch.testing.assert_close(model.output_layer(model(src, src_mask, tgt, features=True)), logits)
    torch.testing.assert_close(decode_incrementally(model, src, src_mask, tgt, [2, 1, 3]), logits, atol=1e-5, rtol=1e-5)
    padded = torch.cat([src, torch.full((3, 2), PAD)], dim=1), torch.cat([src_mask, torch.zeros(3, 2, dtype=bool)], 1)
    torch.testing.assert_close(model(*padded, tgt), logits, atol=1e-5, rtol=1e-5)
    changed = tgt.clone()
    changed[:, 4:] = 3
    torch.testing.assert_close(model(src, src_mask, changed)[:, :4], logits[:, :4], atol=1e-6, rtol=1e-6)
    model.train()
    model(src, src_mask, tgt).logsumexp(-1).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and bool(p.grad.isfinite().all()), name


@pytest.mark.parametrize("index, sources, per_source", [
    ([0, 0, 0, 1, 1, 1], [0, 1], 3),  # k = 3 beams per sentence
    ([2, 0, 2], [2, 0, 2], 1),  # rows in no blocks: one entry per row
    ([0, 0, 1, 1, 1, 1], [0, 1, 1], 2),  # the largest block that fits every run
    ([1, 1, 1, 1], [1], 4),
])
def test_source_blocks(index, sources, per_source):
    got, r = source_blocks(torch.tensor(index))
    assert got.tolist() == sources and r == per_source


def test_reorder_keeps_one_copy_of_the_memory_per_block_of_rows_and_equals_copies():
    """Beams (rows repeated per source) read one copy of the cross-attention keys/values, as r copies would."""
    model = make()
    src, src_mask, tgt = batch()
    memory = model.encode(src, src_mask)
    _, state, _ = model.decode_step(tgt[:, :3], memory, None)
    expand = torch.arange(3).repeat_interleave(4)  # 4 rows per source
    state.reorder(expand)
    assert state.per_source == 4 and state.memory_kv[0][0].size(0) == 3 and state.memory_mask.size(0) == 3
    beams = (torch.arange(3)[:, None] * 4 + torch.tensor([[3, 0, 0, 1], [2, 2, 1, 0], [0, 1, 2, 3]])).flatten()
    state.reorder(beams, same_sources=True)
    drop = torch.tensor([0, 1, 2, 3, 8, 9, 10, 11])  # the second sentence leaves
    state.reorder(drop)
    assert state.per_source == 4 and state.memory_kv[0][0].size(0) == 2
    rows = expand[beams][drop]
    got, _, attention = model.decode_step(tgt[rows, 3:5], memory.index_select(rows), state, need_attention=True)
    expected = model(src[rows], src_mask[rows], tgt[rows, :5])[:, 3:5]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert attention.shape == (8, 2, 4, 2, src.size(1))
    assert torch.all(attention[4:, ..., 3:] == 0)  # rows of the third sentence: only 3 real source tokens


@pytest.mark.parametrize("family", ["transformer", "classifier"])
def test_a_mask_that_is_not_bool_is_refused_naming_the_convention(family):
    """A float 0/1 mask failed on bitwise_or inside the attention; an int one went through by accident."""
    model = make(family, n_classes=2)
    src, src_mask, tgt = batch()
    for wrong in (src_mask.float(), src_mask.long()):
        with pytest.raises(TypeError, match="src_mask must be a bool tensor, True at real tokens"):
            model(src, wrong, tgt) if family == "transformer" else model(src, wrong)
