"""The options pretrained encoders need (BERT, ViT): a norm over the embeddings, BERT's tanh pooler, the norms'
epsilon. Each is checked against the computation it names, and padding still never changes a prediction."""

import pytest
import torch
from torch import nn

from seqmap.config import ConfigError, ModelConfig
from seqmap.models.builder import build_classifier, build_model

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**overrides):
    cfg = ModelConfig(family="classifier", src_vocab=12, tgt_vocab=12, d_model=16, n_heads=2, d_ff=32,
                      enc_layers=2, dropout=0.0, max_len=16, positional="learned", norm_position="post",
                      scale_embeddings=False, n_classes=3, **overrides)
    return build_classifier(cfg, 3, "cls").eval()


def test_the_embedding_norm_normalizes_embeddings_plus_positions():
    model = tiny(embedding_norm=True, norm_eps=1e-12)
    enc = model.encoder
    assert isinstance(enc.embedding_norm, nn.LayerNorm) and enc.embedding_norm.eps == 1e-12
    with torch.no_grad():
        enc.embedding_norm.weight.uniform_(0.5, 1.5)
        enc.embedding_norm.bias.normal_()
    src = torch.tensor([[4, 5, 6]])
    x, _ = model._inputs(src, None)
    expected = enc.embedding_norm(enc.positional.embed(x))
    for layer in enc.layers:
        expected, _ = layer(expected, None, positional=enc.positional)
    states, _, _ = model.encode(src, None)
    torch.testing.assert_close(states, expected)
    assert isinstance(tiny().encoder.embedding_norm, nn.Identity)  # off by default: no parameters


def test_the_tanh_pooler_is_linear_then_tanh_before_the_head():
    model = tiny(pooler="tanh")
    src = torch.tensor([[4, 5, 6]])
    states, mask, _ = model.encode(src, None)
    linear = model.pooler[0]
    expected = model.head(torch.tanh(linear(states[:, 0])))
    torch.testing.assert_close(model(src, None), expected)
    assert "pooler.0.weight" in model.state_dict() and "pooler.0.weight" not in tiny().state_dict()


def test_norm_eps_reaches_every_norm():
    model = tiny(embedding_norm=True, norm_eps=1e-12)
    eps = {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)}
    assert eps == {1e-12}
    vit = build_model(ModelConfig(family="vit", d_model=16, n_heads=2, d_ff=32, enc_layers=1, n_classes=2,
                                  image_channels=1, image_height=8, image_width=8, patch_size=4,
                                  positional="learned", max_len=8, norm_eps=1e-6))
    assert {m.eps for m in vit.modules() if isinstance(m, nn.LayerNorm)} == {1e-6}


def test_padding_still_does_not_change_the_prediction():
    model = tiny(embedding_norm=True, pooler="tanh", norm_eps=1e-12)
    src = torch.tensor([[4, 5, 6, 7]])
    alone = model(src, torch.ones_like(src, dtype=torch.bool))
    padded = torch.tensor([[4, 5, 6, 7, 0, 0], [8, 9, 10, 11, 4, 5]])
    torch.testing.assert_close(model(padded, padded != 0)[0], alone[0], atol=1e-5, rtol=1e-5)


def test_bad_values_say_what_to_change():
    with pytest.raises(ConfigError, match="model.pooler = 'relu' is not valid"):
        ModelConfig(family="classifier", pooler="relu")
    with pytest.raises(ConfigError, match="model.embedding_norm and model.pooler are for model.family classifier"):
        ModelConfig(family="lm", embedding_norm=True)
    with pytest.raises(ConfigError, match="model.norm_eps must be in"):
        ModelConfig(norm_eps=0.0)
