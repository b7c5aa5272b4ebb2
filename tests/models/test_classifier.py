"""The encoder-only classifier: padding never changes a prediction, CLS and mean pooling, it learns."""

import pytest
import torch

from seqmap.config import ModelConfig
from seqmap.models.builder import build_classifier
from seqmap.nn.positional import POSITIONAL_KINDS

pytestmark = pytest.mark.usefixtures("one_thread")

POSITIONALS = POSITIONAL_KINDS


def tiny(pooling="cls", positional="sinusoidal", n_classes=3, **overrides):
    cfg = ModelConfig(family="transformer", src_vocab=12, tgt_vocab=12, d_model=16, n_heads=2, d_ff=32,
                      enc_layers=2, dropout=0.0, max_len=16, positional=positional, **overrides)
    return build_classifier(cfg, n_classes, pooling).eval()


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("positional", POSITIONALS)
def test_extra_padding_does_not_change_the_prediction(pooling, positional):
    model = tiny(pooling, positional)
    src = torch.tensor([[4, 5, 6, 7]])
    alone = model(src, torch.ones_like(src, dtype=torch.bool))
    padded = torch.tensor([[4, 5, 6, 7, 0, 0, 0], [8, 9, 10, 11, 4, 5, 6]])  # row 0 padded to a longer row
    logits = model(padded, padded != 0)
    torch.testing.assert_close(logits[0], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("positional", POSITIONALS)
def test_an_empty_text_in_a_batch_gets_finite_logits_and_changes_nothing(pooling, positional):
    """``collate_labels`` gives an empty text one PAD with mask False: no real key at all. Its logits are finite
    (mean pooling: the mean of nothing is zero, so the head's bias; CLS: the class vector attends to itself), and
    the other row reads as alone."""
    from seqmap.data.batching import collate_labels

    model = tiny(pooling, positional)
    batch = collate_labels([([], 0), ([4, 5, 6], 1)])
    assert batch.src_mask.tolist() == [[False, False, False], [True, True, True]]
    with torch.no_grad():
        logits = model(batch.src, batch.src_mask)
        alone = model(torch.tensor([[4, 5, 6]]), None)
        empty = model(torch.tensor([[0]]), torch.tensor([[False]]))
    assert bool(logits.isfinite().all())
    torch.testing.assert_close(logits[1], alone[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits[0], empty[0], atol=1e-5, rtol=1e-5)  # however much padding
    if pooling == "mean":
        torch.testing.assert_close(logits[0], model.head.bias, atol=0, rtol=0)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_padded_keys_get_exactly_zero_attention(pooling):
    model = tiny(pooling)
    src = torch.tensor([[4, 5, 0, 0], [4, 5, 6, 7]])
    weights = model.encoder_attention(src, src != 0)  # (B, L, H, S', S')
    extra = 1 if pooling == "cls" else 0
    assert weights.shape == (2, 2, 2, 4 + extra, 4 + extra)
    assert torch.all(weights[0, ..., 2 + extra:] == 0)  # row 0's two padded keys
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 2, 4 + extra))


def test_cls_pooling_reads_position_zero_and_mean_pooling_the_real_positions():
    model = tiny("mean")
    states = torch.arange(24, dtype=torch.float).view(2, 3, 4)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    pooled = model.pool(states, mask)
    torch.testing.assert_close(pooled[0], states[0, :2].mean(0))
    torch.testing.assert_close(pooled[1], states[1].mean(0))
    assert torch.equal(tiny("cls").pool(states, mask), states[:, 0])


def test_every_parameter_gets_a_finite_gradient():
    model = tiny("cls").train()
    src = torch.tensor([[4, 5, 6, 0], [7, 8, 9, 10]])
    torch.nn.functional.cross_entropy(model(src, src != 0), torch.tensor([0, 2])).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_learns_which_of_two_marker_tokens_a_sequence_holds(pooling):
    torch.manual_seed(0)
    model = tiny(pooling, n_classes=2).train()
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, 10, (64, 6), generator=g)
    labels = torch.randint(0, 2, (64,), generator=g)
    src[torch.arange(64), torch.randint(0, 6, (64,), generator=g)] = 10 + labels  # marker 10 or 11, anywhere
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(src, None), labels).backward()
        opt.step()
    assert (model.eval()(src, None).argmax(-1) == labels).float().mean() == 1.0


def test_bad_arguments_say_what_to_change():
    with pytest.raises(ValueError, match="pooling must be one of cls, mean"):
        tiny("max")
    with pytest.raises(ValueError, match="n_classes must be at least 2"):
        tiny(n_classes=1)
