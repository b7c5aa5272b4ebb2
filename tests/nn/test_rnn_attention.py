"""Invariants of the RNN attention scores (dot, general, concat, additive) and ``attend``.

Weights are a distribution over real keys, masked keys get exactly zero, a fully
masked row gives zeros (and zero, finite gradients), the modules' precomputed
key projections give the literal formulas, and gradcheck passes in float64.
"""

import pytest
import torch
from torch.func import functional_call

from seqmap.nn.attention import scaled_dot_product_attention
from seqmap.nn.rnn_attention import (
    AdditiveAttention,
    ConcatAttention,
    DotAttention,
    GeneralAttention,
    additive_scores,
    attend,
    concat_scores,
    dot_scores,
    general_scores,
)

B, T, S = 3, 2, 5


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster


def make(kind: str, dq: int = 4, dk: int = 6, da: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "dot":
        return DotAttention(dk, dk)
    if kind == "general":
        return GeneralAttention(dq, dk)
    if kind == "concat":
        return ConcatAttention(dq, dk, da)
    return AdditiveAttention(dq, dk, da)


KINDS = ["dot", "general", "concat", "additive"]


def inputs(kind: str, dq: int = 4, dk: int = 6, dtype=torch.float32):
    """Queries, keys and a mask: row 0 has 3 real keys, row 1 all 5, row 2 none."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, T, dk if kind == "dot" else dq, generator=g, dtype=dtype)
    k = torch.randn(B, S, dk, generator=g, dtype=dtype)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    return q, k, mask


@pytest.mark.parametrize("kind", KINDS)
def test_weights_are_a_distribution_over_real_keys(kind):
    q, k, mask = inputs(kind)
    context, weights = make(kind)(q, k, mask)
    assert context.shape == (B, T, k.size(-1)) and weights.shape == (B, T, S)
    torch.testing.assert_close(weights[:2].sum(-1), torch.ones(2, T))
    assert (weights[0, :, 3:] == 0).all()
    assert (weights[0, :, :3] > 0).all()
    assert (weights[2] == 0).all() and (context[2] == 0).all()
    assert torch.isfinite(context).all()


@pytest.mark.parametrize("kind", KINDS)
def test_fully_masked_row_has_zero_finite_gradients(kind):
    q, k, mask = inputs(kind)
    q.requires_grad_(True)
    k.requires_grad_(True)
    module = make(kind)
    context, weights = module(q, k, mask)
    (context.square().sum() + weights.square().sum()).backward()
    grads = [q.grad, k.grad] + [p.grad for p in module.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert (q.grad[2] == 0).all() and (k.grad[2] == 0).all()
    assert (k.grad[0, 3:] == 0).all()  # masked keys are not looked at (values or scores)


@pytest.mark.parametrize("kind", KINDS)
def test_context_is_weights_times_values(kind):
    q, k, mask = inputs(kind)
    context, weights = make(kind)(q, k, mask)
    torch.testing.assert_close(context, weights @ k)


@pytest.mark.parametrize("kind", KINDS)
def test_one_step_query_matches_several_step_query(kind):
    q, k, mask = inputs(kind)
    module = make(kind)
    context, weights = module(q, k, mask)
    c1, w1 = module(q[:, 1], k, mask)
    assert c1.shape == (B, k.size(-1)) and w1.shape == (B, S)
    torch.testing.assert_close(c1, context[:, 1])
    torch.testing.assert_close(w1, weights[:, 1])


@pytest.mark.parametrize("kind", KINDS)
def test_precomputed_keys_are_reused(kind):
    q, k, mask = inputs(kind)
    module = make(kind)
    projected = module.precompute(k)
    torch.testing.assert_close(module(q, k, mask, projected), module(q, k, mask))
    # the step really reads `projected`: a different projection changes the weights
    _, w = module(q, k, mask, torch.randn(projected.shape, generator=torch.Generator().manual_seed(5)))
    assert not torch.allclose(w[:2], module(q, k, mask)[1][:2])


def test_dot_scores_by_hand():
    q, k, _ = inputs("dot")
    expected = torch.empty(B, T, S)
    for b in range(B):
        for t in range(T):
            for s in range(S):
                expected[b, t, s] = sum(q[b, t, i] * k[b, s, i] for i in range(k.size(-1)))
    torch.testing.assert_close(dot_scores(q, k), expected)


def test_dot_attention_matches_scaled_dot_product_attention_with_scale_one():
    q, k, mask = inputs("dot")
    context, weights = DotAttention(6, 6)(q, k, mask)
    ref, ref_w = scaled_dot_product_attention(q[:, None], k[:, None], k[:, None], mask[:, None, None, :],
                                              need_weights=True, scale=1.0)
    torch.testing.assert_close(context, ref[:, 0])
    torch.testing.assert_close(weights, ref_w[:, 0])


def test_general_module_is_q_w_k():
    q, k, _ = inputs("general")
    module = make("general")
    expected = torch.einsum("btq,qk,bsk->bts", q, module.weight, k)
    torch.testing.assert_close(module.score(q, module.precompute(k)), expected)
    torch.testing.assert_close(general_scores(q, k, module.weight), expected)


def test_concat_module_matches_literal_concatenation():
    q, k, _ = inputs("concat")
    module = make("concat")
    literal = concat_scores(q, k, module.proj.weight, module.v.weight[0])
    torch.testing.assert_close(module.score(q, module.precompute(k)), literal)
    # and the literal formula by hand for one pair
    b, t, s = 1, 1, 2
    by_hand = module.v.weight[0] @ torch.tanh(module.proj.weight @ torch.cat([q[b, t], k[b, s]]))
    torch.testing.assert_close(literal[b, t, s], by_hand)


def test_additive_module_by_hand():
    q, k, _ = inputs("additive")
    m = make("additive")
    b, t, s = 2, 0, 4
    by_hand = m.v.weight[0] @ torch.tanh(m.query_proj.weight @ q[b, t] + m.key_proj.weight @ k[b, s])
    torch.testing.assert_close(m.score(q, m.precompute(k))[b, t, s], by_hand)


def test_dot_width_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="general, concat or additive"):
        DotAttention(4, 6)
    with pytest.raises(ValueError, match="one width"):
        dot_scores(torch.zeros(1, 1, 4), torch.zeros(1, 2, 6))


def test_attend_without_mask_is_a_plain_softmax():
    scores = torch.randn(B, T, S, generator=torch.Generator().manual_seed(3))
    values = torch.randn(B, S, 2)
    context, weights = attend(scores, values)
    torch.testing.assert_close(weights, torch.softmax(scores, -1))
    torch.testing.assert_close(context, torch.softmax(scores, -1) @ values)


# -- gradcheck (float64) ------------------------------------------------------

def _d(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)


def test_gradcheck_score_functions():
    q, k = _d(2, 2, 3, seed=1), _d(2, 4, 3, seed=2)
    assert torch.autograd.gradcheck(dot_scores, (q, k))
    q4, k5 = _d(2, 2, 4, seed=3), _d(2, 3, 5, seed=4)
    assert torch.autograd.gradcheck(general_scores, (q4, k5, _d(4, 5, seed=5)))
    assert torch.autograd.gradcheck(concat_scores, (q4, k5, _d(3, 9, seed=6), _d(3, seed=7)))
    assert torch.autograd.gradcheck(additive_scores, (_d(2, 2, 3, seed=8), _d(2, 4, 3, seed=9), _d(3, seed=10)))


def test_gradcheck_attend_with_partial_and_empty_rows():
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda s, v: attend(s, v, mask), (_d(2, 3, 4, seed=1), _d(2, 4, 2, seed=2)))


@pytest.mark.parametrize("kind", KINDS)
def test_gradcheck_modules_inputs_and_parameters(kind):
    module = make(kind).double()
    q, k, mask = inputs(kind, dtype=torch.float64)
    mask = mask[:2]
    names = [n for n, _ in module.named_parameters()]
    params = [p.detach().clone().requires_grad_(True) for p in module.parameters()]

    def run(q, k, *params):
        return functional_call(module, dict(zip(names, params, strict=True)), (q, k, mask))

    args = (q[:2].requires_grad_(True), k[:2].requires_grad_(True), *params)
    assert torch.autograd.gradcheck(run, args)
