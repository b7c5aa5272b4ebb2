"""Label-smoothed NLL: parity with F.cross_entropy, padding is inert, a hand-computed value, stable gradients."""

import math

import pytest
import torch
import torch.nn.functional as F

from seqmap.training.loss import label_smoothed_nll

PAD = 0


def example(seed: int = 0, B: int = 3, T: int = 5, V: int = 11):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g) * 3
    target = torch.randint(1, V, (B, T), generator=g)
    target[0, 3:] = PAD
    target[2, 1:] = PAD
    return logits, target


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.4])
def test_matches_torch_cross_entropy(smoothing):
    logits, target = example()
    loss, nll, n = label_smoothed_nll(logits, target, pad_id=PAD, smoothing=smoothing)
    flat = logits.reshape(-1, logits.size(-1)), target.reshape(-1)
    expected = F.cross_entropy(*flat, ignore_index=PAD, reduction="sum", label_smoothing=smoothing)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert nll.item() == pytest.approx(F.cross_entropy(*flat, ignore_index=PAD, reduction="sum").item(), rel=1e-6)
    assert n == int((target != PAD).sum()) == 9
    assert not nll.requires_grad


def test_hand_computed_smoothing():
    # p = (1/4, 1/2, 1/4), target 1, eps = 0.3, eps/V on every class:
    # 0.7 * ln 2 + 0.3 * mean(ln 4, ln 2, ln 4) = 0.7 ln 2 + 0.3 * (5/3) ln 2 = 1.2 ln 2
    # (fairseq's eps/(V-1) on the other classes would give 0.7 ln 2 + 0.3 * ln 4 = 1.3 ln 2)
    logits = torch.log(torch.tensor([[[1.0, 2.0, 1.0]]]))
    loss, nll, n = label_smoothed_nll(logits, torch.tensor([[1]]), pad_id=PAD, smoothing=0.3)
    assert loss.item() == pytest.approx(1.2 * math.log(2), rel=1e-6)
    assert nll.item() == pytest.approx(math.log(2), rel=1e-6)
    assert n == 1


def test_padding_contributes_exactly_zero():
    logits, target = example()
    logits.requires_grad_(True)
    loss, nll, n = label_smoothed_nll(logits, target, pad_id=PAD, smoothing=0.1)
    loss.backward()
    # append padded positions with wild logits (inf, nan): nothing may change
    extra = torch.full((3, 4, logits.size(-1)), float("nan"))
    extra[:, :, 0] = float("inf")
    padded_logits = torch.cat([logits.detach(), extra], dim=1).requires_grad_(True)
    padded_target = torch.cat([target, torch.full((3, 4), PAD)], dim=1)
    loss2, nll2, n2 = label_smoothed_nll(padded_logits, padded_target, pad_id=PAD, smoothing=0.1)
    loss2.backward()
    assert loss2.item() == loss.item() and nll2.item() == nll.item() and n2 == n
    assert torch.equal(padded_logits.grad[:, 5:], torch.zeros(3, 4, logits.size(-1)))
    assert torch.equal(padded_logits.grad[:, :5], logits.grad)
    assert torch.equal(logits.grad[target == PAD], torch.zeros_like(logits.grad[target == PAD]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits_are_stable(dtype):
    logits, target = example()
    big = (logits * 1000).to(dtype).requires_grad_(True)  # would overflow a half-precision softmax
    loss, nll, _ = label_smoothed_nll(big, target, pad_id=PAD, smoothing=0.1)
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and torch.isfinite(nll)
    reference, _, _ = label_smoothed_nll(big.detach().float(), target, pad_id=PAD, smoothing=0.1)
    assert loss.item() == pytest.approx(reference.item(), rel=1e-6)
    loss.backward()
    assert torch.isfinite(big.grad).all()


def test_gradient_is_finite_and_correct():
    logits, target = example()
    logits.requires_grad_(True)
    loss, _, _ = label_smoothed_nll(logits, target, pad_id=PAD, smoothing=0.0)
    loss.backward()
    assert torch.isfinite(logits.grad).all()
    real = target != PAD
    expected = torch.softmax(logits.detach(), -1) - F.one_hot(target, logits.size(-1)).float()
    torch.testing.assert_close(logits.grad[real], expected[real])


def test_errors():
    logits, target = example()
    with pytest.raises(ValueError, match="smoothing"):
        label_smoothed_nll(logits, target, smoothing=1.0)
    with pytest.raises(ValueError, match="vocabulary axis"):
        label_smoothed_nll(logits, target[:, :-1])


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.4])
def test_hand_written_gradient_matches_autograd_of_the_formula(smoothing):
    """The closed-form backward equals autograd through log_softmax (float64 gradcheck, and by value)."""
    logits, target = example(seed=3)
    logits64 = logits.double().requires_grad_(True)
    torch.autograd.gradcheck(lambda x: label_smoothed_nll(x, target, pad_id=PAD, smoothing=smoothing)[0],
                             (logits64,))
    x = logits.clone().requires_grad_(True)
    label_smoothed_nll(x, target, pad_id=PAD, smoothing=smoothing)[0].backward()
    y = logits.clone().requires_grad_(True)
    flat = y.reshape(-1, y.size(-1)), target.reshape(-1)
    F.cross_entropy(*flat, ignore_index=PAD, reduction="sum", label_smoothing=smoothing).backward()
    torch.testing.assert_close(x.grad, y.grad, rtol=1e-5, atol=1e-6)
