"""Label-smoothed NLL: parity with F.cross_entropy, padding is inert, a hand-computed value, stable gradients."""

import math

import pytest
import torch
import torch.nn.functional as F

from seqmap.training.loss import label_smoothed_nll, output_nll

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


def test_a_second_backward_through_the_same_loss_is_refused_with_the_fix():
    logits, target = example()
    logits.requires_grad_(True)
    loss, _, _ = label_smoothed_nll(logits * 1.0, target, pad_id=PAD, smoothing=0.1)
    loss.backward(retain_graph=True)
    first = logits.grad.clone()
    with pytest.raises(RuntimeError, match="compute the loss again"):
        loss.backward()
    logits.grad = None
    label_smoothed_nll(logits * 1.0, target, pad_id=PAD, smoothing=0.1)[0].backward()
    torch.testing.assert_close(logits.grad, first)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.4])
def test_hand_written_gradient_matches_autograd_of_the_formula(smoothing):
    """The closed-form backward equals autograd through log_softmax (float64 to 1e-12, and float32 by value).

    (Not ``gradcheck``: it back-propagates twice through one forward, which the in-place backward refuses.)
    """
    logits, target = example(seed=3)
    a = logits.double().requires_grad_(True)
    label_smoothed_nll(a, target, pad_id=PAD, smoothing=smoothing)[0].backward()
    b = logits.double().requires_grad_(True)
    F.cross_entropy(b.reshape(-1, b.size(-1)), target.reshape(-1), ignore_index=PAD, reduction="sum",
                    label_smoothing=smoothing).backward()
    assert a.grad.dtype == torch.float64
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12)
    # and against finite differences of the loss itself in a few coordinates
    with torch.no_grad():
        for index in [(0, 0, 0), (0, 2, 5), (1, 4, 10), (2, 0, 3)]:
            step = torch.zeros_like(a)
            step[index] = 1e-6
            up = label_smoothed_nll(a + step, target, pad_id=PAD, smoothing=smoothing)[0]
            down = label_smoothed_nll(a - step, target, pad_id=PAD, smoothing=smoothing)[0]
            assert abs(((up - down) / 2e-6).item() - a.grad[index].item()) < 1e-6
    x = logits.clone().requires_grad_(True)
    label_smoothed_nll(x, target, pad_id=PAD, smoothing=smoothing)[0].backward()
    y = logits.clone().requires_grad_(True)
    flat = y.reshape(-1, y.size(-1)), target.reshape(-1)
    F.cross_entropy(*flat, ignore_index=PAD, reduction="sum", label_smoothing=smoothing).backward()
    torch.testing.assert_close(x.grad, y.grad, rtol=1e-5, atol=1e-6)


# -- output_nll: the output layer and the loss in one chunked pass ------------------------------------------


def output_example(seed: int = 5, bias: bool = True, V: int = 13, D: int = 6):
    torch.manual_seed(seed)
    output = torch.nn.Linear(D, V, bias=bias)
    features = torch.randn(3, 7, D) * 2
    target = torch.randint(1, V, (3, 7))
    target[0, 4:] = PAD
    target[2, 1:] = PAD
    return features, output, target


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("chunk_elements", [13 * 4, 13 * 5, 1 << 22])  # 4 and 5 rows (uneven), all 21 at once
def test_output_nll_equals_the_output_layer_then_the_loss(smoothing, bias, chunk_elements):
    features, output, target = output_example(bias=bias)
    a = features.clone().requires_grad_(True)
    loss, nll, n = output_nll(a, output, target, PAD, smoothing, chunk_elements=chunk_elements)
    (loss * 0.5).backward()
    fused = [a.grad] + [p.grad.clone() for p in output.parameters()]
    output.zero_grad()
    b = features.clone().requires_grad_(True)
    ref_loss, ref_nll, ref_n = label_smoothed_nll(output(b), target, PAD, smoothing)
    (ref_loss * 0.5).backward()
    reference = [b.grad] + [p.grad for p in output.parameters()]
    assert n == ref_n == int((target != PAD).sum())
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(nll, ref_nll)
    assert not nll.requires_grad
    for got, want in zip(fused, reference, strict=True):
        torch.testing.assert_close(got, want)
    assert (a.grad[target == PAD] == 0).all()


def test_output_nll_tied_weight_sums_both_uses_and_padding_rows_do_not_count():
    features, output, target = output_example(bias=False)
    embedding = torch.nn.Embedding(13, 6)
    output.weight = embedding.weight  # tied: the table is also read by a lookup
    ids = torch.tensor([[1, 2, 3]])
    feats = features.clone()
    feats[2, 5] = 1e4  # a padding position: whatever is there changes nothing
    loss, _, _ = output_nll(feats, output, target, PAD, 0.1)
    (loss + embedding(ids).sum()).backward()
    fused = embedding.weight.grad.clone()
    embedding.weight.grad = None
    keep = target != PAD
    ref, _, _ = label_smoothed_nll(output(features)[keep], target[keep], PAD, 0.1)  # padding rows dropped
    (ref + embedding(ids).sum()).backward()
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(fused, embedding.weight.grad)


def test_output_nll_without_gradients_and_its_errors():
    features, output, target = output_example()
    with torch.no_grad():
        loss, nll, _ = output_nll(features, output, target, PAD, 0.1)
        ref, ref_nll, _ = label_smoothed_nll(output(features), target, PAD, 0.1)
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(nll, ref_nll)
    with pytest.raises(ValueError, match="feature axis"):
        output_nll(features, output, target[:, :-1])
    with pytest.raises(ValueError, match="smoothing"):
        output_nll(features, output, target, smoothing=1.0)
    with pytest.raises(ValueError, match="label_smoothed_nll on the logits"):
        output_nll(features.double(), output.double(), target)


def test_output_nll_makes_no_gradient_under_no_grad(monkeypatch):
    """Evaluation under torch.no_grad() must not pay for the gradients the training pass makes in forward."""
    from seqmap.training import loss as loss_module

    calls = []
    real = loss_module._gradient_in_place
    monkeypatch.setattr(loss_module, "_gradient_in_place", lambda *a: calls.append(1) or real(*a))
    features, output, target = output_example()
    features.requires_grad_(True)
    with torch.no_grad():
        output_nll(features, output, target, PAD, 0.1)
    assert calls == []
    loss, _, _ = output_nll(features, output, target, PAD, 0.1)
    assert calls  # with gradients on, it does
    loss.backward()
    assert features.grad is not None and torch.isfinite(features.grad).all()


@pytest.mark.parametrize("family", ["transformer", "lm", "rnn"])
def test_summed_nll_scores_through_the_fused_output_layer_where_a_model_has_one(family, monkeypatch):
    """Validation's NLL runs the output layer with the loss in chunks (never a batch's logits) where the model
    offers a float32 ``output_layer``, and equals the logits path's to rounding; an RNN takes the logits path."""
    from seqmap.config import ModelConfig
    from seqmap.data.batching import collate_pairs
    from seqmap.models.builder import build_model
    from seqmap.training import validate

    torch.manual_seed(0)
    model = build_model(ModelConfig(family=family, src_vocab=0 if family == "lm" else 30, tgt_vocab=30,
                                    d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=1)).eval()
    g = torch.Generator().manual_seed(1)
    pairs = [(torch.randint(4, 30, (n,), generator=g).tolist(), torch.randint(4, 30, (m,), generator=g).tolist())
             for n, m in [(5, 7), (3, 2), (8, 6)]]
    batches = [collate_pairs(pairs[:2]), collate_pairs(pairs[2:])]
    output = getattr(model, "output_layer", None)
    logits_calls = []
    if output is not None:
        output.register_forward_hook(lambda *_: logits_calls.append(1))
    nll, n = validate.summed_nll(model, batches, torch.device("cpu"))
    monkeypatch.setattr(validate, "fused_output_layer", lambda model: None)
    ref_nll, ref_n = validate.summed_nll(model, batches, torch.device("cpu"))
    assert n == ref_n == sum(len(t) + 1 for _, t in pairs)
    assert nll == pytest.approx(ref_nll, rel=1e-5)
    assert (family == "rnn") == (output is None)
    assert logits_calls == ([] if output is None else [1, 1])  # the fused path called the layer for no logits
