"""The Vision Transformer: patches in row-major order, shift equivariance of the patch tokens, the model's errors."""

from __future__ import annotations

import pytest
import torch

from seqmap.config import ConfigError, ModelConfig
from seqmap.models.builder import build_model
from seqmap.nn.patches import PatchEmbedding, patchify, unpatchify
from seqmap.nn.positional import POSITIONAL_KINDS
from seqmap.nn.rollout import attention_rollout
from seqmap.visualize.image_attention import cls_maps


def test_patches_are_row_major_blocks():
    c, h, w, p = 2, 6, 9, 3
    images = torch.arange(2 * c * h * w, dtype=torch.float32).reshape(2, c, h, w)
    patches = patchify(images, p)
    assert patches.shape == (2, (h // p) * (w // p), c * p * p)
    for n in range(patches.size(1)):
        row, col = divmod(n, w // p)  # left to right, then top to bottom
        block = images[:, :, row * p:(row + 1) * p, col * p:(col + 1) * p]
        assert torch.equal(patches[:, n], block.reshape(2, -1))  # channel, row, column inside a patch
    assert torch.equal(unpatchify(patches, p, c, h, w), images)


def test_a_shifted_image_shifts_its_patch_tokens():
    torch.manual_seed(0)
    emb = PatchEmbedding(1, 8, 12, 4, 16)
    image = torch.randint(0, 256, (1, 1, 8, 12), dtype=torch.uint8)
    image[..., 8:] = 0  # the last patch column is background, so a shift by one patch loses nothing
    shifted = torch.zeros_like(image)
    shifted[..., 4:] = image[..., :8]  # one patch (4 pixels) to the right
    tokens, moved = emb(image).reshape(2, 3, 16), emb(shifted).reshape(2, 3, 16)  # (grid rows, grid cols, D)
    torch.testing.assert_close(moved[:, 1:], tokens[:, :2], rtol=0, atol=1e-6)
    blank = emb(torch.zeros_like(image)).reshape(2, 3, 16)
    torch.testing.assert_close(moved[:, 0], blank[:, 0], rtol=0, atol=1e-6)


def test_patch_embedding_normalises_with_its_buffers_and_checks_shape():
    emb = PatchEmbedding(1, 4, 4, 2, 3, mean=[100.0], std=[50.0])
    with torch.no_grad():
        emb.proj.weight.copy_(torch.eye(3, 4))
        emb.proj.bias.zero_()
    out = emb(torch.full((1, 1, 4, 4), 150, dtype=torch.uint8))
    torch.testing.assert_close(out, torch.ones(1, 4, 3))
    assert set(dict(emb.named_buffers())) == {"mean", "std"}  # saved with the weights
    with pytest.raises(ValueError, match=r"images must be 1x4x4 \(channels x height x width\), got 3x4x4"):
        emb(torch.zeros(1, 3, 4, 4, dtype=torch.uint8))


def _cfg(**kw) -> ModelConfig:
    base = dict(family="vit", d_model=16, n_heads=2, d_ff=32, enc_layers=2, dropout=0.0, positional="learned",
                max_len=20, patch_size=2, image_channels=1, image_height=6, image_width=6, n_classes=3,
                pixel_mean=[127.0], pixel_std=[60.0])
    base.update(kw)
    return ModelConfig(**base)


def test_vit_classifies_each_image_alone():
    torch.manual_seed(0)
    model = build_model(_cfg()).eval()
    images = torch.randint(0, 256, (4, 1, 6, 6), dtype=torch.uint8)
    logits = model(images, None)
    assert logits.shape == (4, 3)
    torch.testing.assert_close(model(images[2:3], None), logits[2:3], rtol=1e-5, atol=1e-6)
    weights = model.encoder_attention(images, None)
    assert weights.shape == (4, 2, 2, 10, 10)  # (B, layers, heads, CLS + 9 patches, same)


@pytest.mark.parametrize("kw, message", [
    (dict(patch_size=4), "model.patch_size=4 must divide the image size 6x6"),
    (dict(max_len=5), "model.max_len=5 learned positions cannot cover the 10 patches + CLS"),
    (dict(image_height=0), "model.image_channels/image_height/image_width must be set"),
    (dict(n_classes=1), "model.n_classes must be at least 2"),
    (dict(pixel_mean=[127.0, 127.0], pixel_std=[60.0, 60.0]),
     "model.pixel_mean and model.pixel_std must hold 1 numbers each (one per channel, model.image_channels), std > 0; "
     "got [127.0, 127.0] and [60.0, 60.0]"),  # once a ValueError traceback from PatchEmbedding
    (dict(pixel_std=[0.0]), "std > 0; got [127.0] and [0.0]"),
    (dict(pixel_std=[]), "model.pixel_mean and model.pixel_std go together (got [127.0] and []): give both, or "
                         "neither"),  # once built with std 1 without a word
])
def test_vit_config_errors(kw, message):
    with pytest.raises(ConfigError) as e:
        build_model(_cfg(**kw))
    assert message in str(e.value)


def test_without_pixel_statistics_the_pixels_are_not_normalised():
    model = build_model(_cfg(pixel_mean=[], pixel_std=[]))
    assert model.encoder.embedding.mean.flatten().tolist() == [0.0]
    assert model.encoder.embedding.std.flatten().tolist() == [1.0]
    colour = build_model(_cfg(image_channels=3, pixel_mean=[1.0, 2.0, 3.0], pixel_std=[4.0, 5.0, 6.0]))
    assert colour.encoder.embedding.std.flatten().tolist() == [4.0, 5.0, 6.0]


def test_every_positional_scheme_builds_a_vit():
    images = torch.randint(0, 256, (2, 1, 6, 6), dtype=torch.uint8)
    for kind in POSITIONAL_KINDS:
        assert build_model(_cfg(positional=kind)).eval()(images, None).shape == (2, 3)


def test_attention_rollout():
    s = 4
    identity = torch.eye(s).expand(3, 2, s, s)
    torch.testing.assert_close(attention_rollout(identity), torch.eye(s, dtype=torch.float64))
    uniform = torch.full((1, 1, s, s), 1.0 / s)
    expected = 0.5 * torch.eye(s, dtype=torch.float64) + 0.5 / s  # one layer: half residual, half uniform
    torch.testing.assert_close(attention_rollout(uniform), expected)
    w = torch.softmax(torch.randn(3, 2, 5, 5), dim=-1)
    rolled = attention_rollout(w)
    torch.testing.assert_close(rolled.sum(-1), torch.ones(5, dtype=torch.float64))
    a = [0.5 * torch.eye(5, dtype=torch.float64) + 0.5 * layer.mean(0).double() for layer in w]
    torch.testing.assert_close(rolled, a[2] @ a[1] @ a[0])  # first layer applied first
    roll_map, last_map = cls_maps(w, (2, 2))
    assert roll_map.shape == last_map.shape == (2, 2)
    torch.testing.assert_close(last_map.sum(), torch.tensor(1.0))
    torch.testing.assert_close(last_map.flatten(), (w[-1, :, 0, 1:].mean(0) / w[-1, :, 0, 1:].mean(0).sum()))
