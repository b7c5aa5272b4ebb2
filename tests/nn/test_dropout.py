"""seqmap's dropout: the drop rate, the scaling, the gradient, the seeding, and eval mode."""

import pytest
import torch

from seqmap.nn.dropout import LEVELS, Dropout, dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_drop_rate_is_p_in_every_one_of_the_four_lanes_of_a_random_word(p):
    torch.manual_seed(0)
    n = 1 << 20
    keep, q = keep_mask((n,), p)
    assert keep.dtype == torch.bool and keep.shape == (n,)
    assert q == pytest.approx(1 - p, abs=1 / LEVELS)
    # each 64-bit word feeds 4 elements; a lane with a biased bit (e.g. the sign) would show here
    lanes = keep.view(-1, 4).float().mean(0)
    assert torch.allclose(lanes, torch.full((4,), q), atol=0.004), lanes  # 4 sd of a mean of 262,144 draws


def test_kept_elements_are_scaled_dropped_are_zero_and_the_mean_is_unbiased():
    torch.manual_seed(1)
    x = torch.rand(512, 1024) + 0.5  # no zeros in the input
    y = dropout(x, 0.25)
    kept = y != 0
    q = 1 - round(0.25 * LEVELS) / LEVELS
    torch.testing.assert_close(y[kept], x[kept] / q)
    assert abs(kept.float().mean().item() - q) < 0.005
    assert abs(y.mean().item() / x.mean().item() - 1) < 0.01


def test_gradient_is_the_same_mask_and_scale():
    torch.manual_seed(2)
    x = (torch.rand(64, 33) + 0.5).requires_grad_()  # odd sizes: the words do not divide the elements evenly
    y = dropout(x, 0.4)
    w = torch.randn_like(y)
    (y * w).sum().backward()
    q = 1 - round(0.4 * LEVELS) / LEVELS
    expected = torch.where(y != 0, w / q, torch.zeros_like(w))
    torch.testing.assert_close(x.grad, expected)


def test_non_contiguous_input_and_dtypes():
    torch.manual_seed(3)
    x = torch.rand(40, 30).t() + 1.0
    y = dropout(x, 0.5)
    assert y.shape == x.shape and ((y == 0) | torch.isclose(y, 2 * x)).all()
    half = dropout(torch.ones(100, dtype=torch.float16), 0.5)
    assert half.dtype == torch.float16


def test_seeded_masks_repeat_and_successive_masks_differ():
    x = torch.ones(1000)
    torch.manual_seed(4)
    a, b = dropout(x, 0.5), dropout(x, 0.5)
    torch.manual_seed(4)
    assert torch.equal(dropout(x, 0.5), a)
    assert not torch.equal(a, b)


def test_module_follows_train_and_eval_and_the_edge_probabilities():
    x = torch.rand(10, 10) + 0.1
    layer = Dropout(0.5)
    assert "p=0.5" in repr(layer)
    assert not torch.equal(layer(x), x)
    layer.eval()
    assert layer(x) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        Dropout(1.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        dropout(x, -0.1)


@pytest.mark.parametrize("p", [0.99999, 1.0 - 1e-9, 0.999995])
def test_drop_probabilities_that_round_to_one_drop_everything_without_dividing_by_zero(p):
    x = torch.ones(1000, requires_grad=True)
    y = dropout(x, p)
    assert torch.isfinite(y).all() and int((y != 0).sum()) <= 5
    y.sum().backward()
    assert torch.isfinite(x.grad).all()
