"""Layers: parity with PyTorch's own Transformer layers, and the pieces they are made of."""

import math

import pytest
import torch
from torch import nn

from seqmap.nn.attention import key_mask
from seqmap.nn.kv_cache import KVCache
from seqmap.nn.layers import DecoderLayer, EncoderLayer, FeedForward, TokenEmbedding, make_norm
from seqmap.nn.multihead import MultiHeadAttention

D, H, F = 16, 4, 32


def _copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    ours.in_proj.weight.data.copy_(theirs.in_proj_weight)
    ours.in_proj.bias.data.copy_(theirs.in_proj_bias)
    ours.out_proj.weight.data.copy_(theirs.out_proj.weight)
    ours.out_proj.bias.data.copy_(theirs.out_proj.bias)


def _copy_common(ours, theirs, norms: int) -> None:
    _copy_attention(ours.self_attn, theirs.self_attn)
    ours.ff.w1.load_state_dict(theirs.linear1.state_dict())
    ours.ff.w2.load_state_dict(theirs.linear2.state_dict())
    for i in range(1, norms + 1):
        getattr(ours, f"norm{i}").load_state_dict(getattr(theirs, f"norm{i}").state_dict())


def _randomise_norms(layer: nn.Module) -> None:
    """LayerNorm starts as identity; random affine parameters make the parity test meaningful."""
    for m in layer.modules():
        if isinstance(m, nn.LayerNorm):
            nn.init.normal_(m.weight, 1.0, 0.3)
            nn.init.normal_(m.bias, 0.0, 0.3)


def _encoder_layer(pre_norm: bool) -> EncoderLayer:
    return EncoderLayer(MultiHeadAttention(D, H), FeedForward(D, F), nn.LayerNorm(D), nn.LayerNorm(D),
                        pre_norm=pre_norm)


def _decoder_layer(pre_norm: bool) -> DecoderLayer:
    return DecoderLayer(MultiHeadAttention(D, H), MultiHeadAttention(D, H), FeedForward(D, F),
                        nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D), pre_norm=pre_norm)


@pytest.mark.parametrize("norm_first", [True, False])
def test_encoder_layer_matches_torch(norm_first):
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, batch_first=True, norm_first=norm_first)
    _randomise_norms(theirs)
    ours = _encoder_layer(pre_norm=norm_first)
    _copy_common(ours, theirs, norms=2)
    x = torch.randn(3, 7, D)
    real = torch.ones(3, 7, dtype=torch.bool)
    real[1, 5:] = False
    real[2, 3:] = False
    theirs.train()  # keep torch off its inference fast path (nested tensors zero the padding)
    expected = theirs(x, src_key_padding_mask=~real)  # torch: True = ignore
    got, _ = ours(x, key_mask(real))
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_layer_matches_torch(norm_first):
    torch.manual_seed(1)
    theirs = nn.TransformerDecoderLayer(D, H, F, dropout=0.0, batch_first=True, norm_first=norm_first)
    _randomise_norms(theirs)
    ours = _decoder_layer(pre_norm=norm_first)
    _copy_common(ours, theirs, norms=3)
    _copy_attention(ours.cross_attn, theirs.multihead_attn)
    x, memory = torch.randn(2, 6, D), torch.randn(2, 5, D)
    src_real = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    future = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)  # torch: True = not allowed
    expected = theirs(x, memory, tgt_mask=future, memory_key_padding_mask=~src_real)
    got, _ = ours(x, ours.cross_attn.project_memory(memory), key_mask(src_real))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pre_norm", [True, False])
def test_decoder_layer_cached_steps_equal_full_pass(pre_norm):
    torch.manual_seed(2)
    layer = _decoder_layer(pre_norm).eval()
    x, memory = torch.randn(2, 6, D), torch.randn(2, 4, D)
    kv = layer.cross_attn.project_memory(memory)
    full, _ = layer(x, kv, None)
    cache = KVCache()
    steps = [layer(x[:, i:i + 1], kv, None, offset=i, cache=cache)[0] for i in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_decoder_layer_returns_cross_attention_weights():
    layer = _decoder_layer(True).eval()
    x, memory = torch.randn(2, 3, D), torch.randn(2, 5, D)
    src_real = torch.tensor([[True] * 5, [True] * 2 + [False] * 3])
    _, w = layer(x, layer.cross_attn.project_memory(memory), key_mask(src_real), need_weights=True)
    assert w.shape == (2, H, 3, 5)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, H, 3))
    assert torch.all(w[1, :, :, 2:] == 0)


def test_token_embedding_is_scaled_by_sqrt_d_and_pad_row_is_zero():
    emb = TokenEmbedding(10, D, pad_id=0)
    tokens = torch.tensor([[0, 3, 4]])
    out = emb(tokens)
    torch.testing.assert_close(out[0, 1], emb.weight[3] * math.sqrt(D))
    assert torch.all(out[0, 0] == 0)
    unscaled = TokenEmbedding(10, D, scale=False)
    torch.testing.assert_close(unscaled(tokens)[0, 1], unscaled.weight[3])


@pytest.mark.parametrize("activation", ["relu", "gelu", "swiglu", "geglu", "geglu_tanh"])
def test_feed_forward_shapes_and_activation(activation):
    torch.manual_seed(3)
    ff = FeedForward(D, F, activation)
    x = torch.randn(2, 5, D)
    assert ff(x).shape == x.shape
    h = ff.w1(x)
    if activation in ("swiglu", "geglu", "geglu_tanh"):
        assert ff.w1.out_features == 2 * F
        gate, up = h.chunk(2, -1)
        gelu = torch.nn.functional.gelu(gate, approximate="tanh" if activation == "geglu_tanh" else "none")
        expected = ff.w2((torch.nn.functional.silu(gate) if activation == "swiglu" else gelu) * up)
    else:
        expected = ff.w2(torch.relu(h) if activation == "relu" else torch.nn.functional.gelu(h))
    torch.testing.assert_close(ff(x), expected)


def test_feed_forward_without_biases_has_none():
    ff = FeedForward(D, F, "geglu_tanh", bias=False)
    assert ff.w1.bias is None and ff.w2.bias is None
    x = torch.randn(2, 5, D)
    gate, up = (x @ ff.w1.weight.t()).chunk(2, -1)
    torch.testing.assert_close(ff(x), (torch.nn.functional.gelu(gate, approximate="tanh") * up) @ ff.w2.weight.t())


def test_feed_forward_rejects_unknown_activation():
    with pytest.raises(ValueError, match="swiglu"):
        FeedForward(D, F, "tanh")


def test_rmsnorm_normalises_root_mean_square():
    norm = make_norm("rmsnorm", D)
    x = torch.randn(4, D) * 7
    y = norm(x)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(4), atol=1e-3, rtol=1e-3)
    with pytest.raises(ValueError, match="layernorm or rmsnorm"):
        make_norm("batchnorm", D)


@pytest.mark.parametrize("pre_norm", [True, False])
def test_layers_pass_finite_gradients_to_every_parameter(pre_norm):
    torch.manual_seed(4)
    layer = _decoder_layer(pre_norm)
    x, memory = torch.randn(2, 4, D), torch.randn(2, 3, D)
    out, _ = layer(x, layer.cross_attn.project_memory(memory), None)
    out.pow(2).sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
