"""Invariants of ``seqmap.nn.attention``: masks, weights, the two paths and their gradients.

Shapes follow the package legend (B, H, Hkv, T, S, Dh); masks are boolean, True = may attend.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqmap.nn.attention import (
    SCALAR_BMM_BELOW,
    causal_mask,
    key_mask,
    mix_values,
    padding_mask,
    scaled_dot_product_attention,
    shared_prefix_attention,
)

B, H, T, S, DH = 2, 4, 5, 7, 8


def _qkv(t=T, s=S, h=H, hkv=H, dtype=torch.float32, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, h, t, DH, generator=g, dtype=dtype)
    k = torch.randn(B, hkv, s, DH, generator=g, dtype=dtype)
    v = torch.randn(B, hkv, s, DH, generator=g, dtype=dtype)
    return [x.requires_grad_(grad) for x in (q, k, v)]


def _lengths_mask(s=S):
    return key_mask(padding_mask(torch.tensor([s, 3]), s))  # (B, 1, 1, S): row 1 has 3 real keys


def _both(q, k, v, mask=None, bias=None, *, causal=False):
    """(explicit output, explicit weights, fused output) for the same inputs."""
    out_e, w = scaled_dot_product_attention(q, k, v, mask, bias, causal=causal, need_weights=True)
    out_f, none = scaled_dot_product_attention(q, k, v, mask, bias, causal=causal, need_weights=False)
    assert none is None
    return out_e, w, out_f


# -- mask helpers: golden values written out by hand -------------------------------------------


def test_causal_mask_square_is_lower_triangular():
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(3), expected)


def test_causal_mask_aligns_queries_to_the_end_of_the_keys():
    # 2 queries after 2 cached keys sit at absolute positions 2 and 3
    expected = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(2, 4), expected)
    assert causal_mask(1, 4).all()


def test_padding_mask_from_lengths():
    expected = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.equal(padding_mask(torch.tensor([2, 0, 3])), expected)
    assert padding_mask(torch.tensor([1, 2]), max_len=4).shape == (2, 4)
    assert key_mask(expected).shape == (3, 1, 1, 3)


# -- weights ------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_weights_sum_to_one_and_are_exactly_zero_at_masked_keys(causal):
    q, k, v = _qkv(t=S)
    mask = _lengths_mask()
    _, w = scaled_dot_product_attention(q, k, v, mask, causal=causal, need_weights=True)
    allowed = mask & causal_mask(S) if causal else mask.expand(B, H, S, S)
    assert w.shape == (B, H, S, S)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, S), atol=1e-6, rtol=0)
    assert (w[~allowed.expand_as(w)] == 0).all()
    assert (w[allowed.expand_as(w)] > 0).all()


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_masked_keys_lose_even_against_very_negative_scores(need_weights):
    # a large finite fill value (instead of -inf) would win here; masking must be absolute.
    # float64, so that -1e5 + score keeps the score's digits
    q, k, v = _qkv(dtype=torch.float64)
    mask = _lengths_mask()
    bias = torch.full((1, 1, T, S), -1e5, dtype=torch.float64)
    out, _ = scaled_dot_product_attention(q, k, v, mask, bias, need_weights=need_weights)
    ref, _ = scaled_dot_product_attention(q[1:], k[1:, :, :3], v[1:, :, :3], need_weights=True)
    torch.testing.assert_close(out[1:], ref, atol=1e-5, rtol=1e-5)


def test_output_equals_weights_times_values():
    q, k, v = _qkv()
    out, w = scaled_dot_product_attention(q, k, v, _lengths_mask(), causal=True, need_weights=True)
    torch.testing.assert_close(out, w @ v, atol=1e-6, rtol=1e-6)


def test_weights_match_a_softmax_written_out():
    q, k, v = _qkv()
    bias = torch.randn(H, T, S)
    _, w = scaled_dot_product_attention(q, k, v, bias=bias, scale=0.3, need_weights=True)
    torch.testing.assert_close(w, torch.softmax(q @ k.transpose(-2, -1) * 0.3 + bias, dim=-1))


# -- fully masked query rows: zero, never NaN ---------------------------------------------------


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["mask", "mask+bias"])
def test_fully_masked_row_gives_zero_output_and_finite_gradients(need_weights, with_bias):
    q, k, v = _qkv(grad=True)
    mask = torch.ones(B, 1, T, S, dtype=torch.bool)
    mask[0, :, 1] = False  # query 1 of batch row 0 may attend nothing
    mask[1, :, :, 4:] = False
    bias = torch.randn(B, H, T, S) if with_bias else None
    out, w = scaled_dot_product_attention(q, k, v, mask, bias, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert (out[0, :, 1] == 0).all()
    assert out[0, :, 0].abs().sum() > 0
    if need_weights:
        assert (w[0, :, 1] == 0).all() and torch.isfinite(w).all()
    out.square().sum().backward()
    for x in (q, k, v):
        assert torch.isfinite(x.grad).all()
    assert (q.grad[0, :, 1] == 0).all()  # the empty row does not depend on its query


# -- explicit (reference) vs fused path -------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    ["none", "padding", "causal_square", "causal_T<S", "causal+padding", "bias", "bias+mask", "bias+causal"],
)
def test_explicit_and_fused_paths_agree(case):
    t = S if case == "causal_square" else T
    q, k, v = _qkv(t=t)
    mask = _lengths_mask() if case in ("padding", "causal+padding", "bias+mask") else None
    bias = torch.randn(1, H, t, S) if case.startswith("bias") else None
    causal = "causal" in case
    out_e, _, out_f = _both(q, k, v, mask, bias, causal=causal)
    torch.testing.assert_close(out_f, out_e, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("hkv", [2, 1], ids=["grouped", "multi-query"])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_paths_agree_and_equal_repeated_heads(hkv, causal):
    q, k, v = _qkv(hkv=hkv)
    mask = _lengths_mask()
    out_e, w, out_f = _both(q, k, v, mask, causal=causal)
    torch.testing.assert_close(out_f, out_e, atol=1e-5, rtol=1e-5)
    # each key/value head serves H // Hkv consecutive query heads
    k_full, v_full = (x.repeat_interleave(H // hkv, dim=1) for x in (k, v))
    out_ref, w_ref = scaled_dot_product_attention(q, k_full, v_full, mask, causal=causal, need_weights=True)
    torch.testing.assert_close(out_e, out_ref)
    torch.testing.assert_close(w, w_ref)


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_causal_with_fewer_queries_equals_the_last_rows_of_the_full_square(need_weights):
    # cache alignment: query i of T sits at absolute position S - T + i
    q, k, v = _qkv(t=S)
    full, _ = scaled_dot_product_attention(q, k, v, causal=True, need_weights=True)
    tail, _ = scaled_dot_product_attention(q[:, :, -T:], k, v, causal=True, need_weights=need_weights)
    torch.testing.assert_close(tail, full[:, :, -T:], atol=1e-5, rtol=1e-5)


def test_causal_ignores_future_keys():
    q, k, v = _qkv(t=S)
    out, _ = scaled_dot_product_attention(q, k, v, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 4:] += 10.0
    v2[:, :, 4:] -= 10.0
    out2, _ = scaled_dot_product_attention(q, k2, v2, causal=True)
    torch.testing.assert_close(out2[:, :, :4], out[:, :, :4])
    assert not torch.allclose(out2[:, :, 4:], out[:, :, 4:])


def test_padded_keys_do_not_change_the_output():
    q, k, v = _qkv()
    mask = _lengths_mask()
    for need_weights in (True, False):
        out, _ = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
        k2, v2 = k.clone(), v.clone()
        k2[1, :, 3:], v2[1, :, 3:] = 100.0, -100.0
        out2, _ = scaled_dot_product_attention(q, k2, v2, mask, need_weights=need_weights)
        torch.testing.assert_close(out2, out)


# -- gradients ----------------------------------------------------------------------------------


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_float64(need_weights, causal):
    q, k, v = (x[:, :2, :3, :4].detach().clone().requires_grad_() for x in _qkv(dtype=torch.float64))
    mask = key_mask(torch.tensor([[True, True, False], [True, False, True]]))  # (B, 1, 1, S=3)

    def f(q, k, v):
        return scaled_dot_product_attention(q, k, v, mask, causal=causal, need_weights=need_weights)[0]

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_gradcheck_float64_with_bias_and_empty_row():
    q, k, v = (x[:, :2, :3, :4].detach().clone().requires_grad_() for x in _qkv(dtype=torch.float64))
    bias = torch.randn(1, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(B, 1, 3, 3, dtype=torch.bool)
    mask[0, 0, 2] = False  # an empty row

    for need_weights in (True, False):
        def f(q, k, v, bias, need_weights=need_weights):
            return scaled_dot_product_attention(q, k, v, mask, bias, need_weights=need_weights)[0]

        assert torch.autograd.gradcheck(f, (q, k, v, bias))


def test_few_queries_over_many_rows_take_the_explicit_path_on_the_cpu(monkeypatch):
    """Decoding steps of a batch (T <= FEW_QUERIES, B H >= MANY_ROWS) skip the fused kernel; same outputs,
    fully masked rows included. One sentence, or many queries, still take the fused kernel."""
    from seqmap.nn import attention

    calls = []
    fused = F.scaled_dot_product_attention
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or fused(*a, **k))
    rows = attention.MANY_ROWS // H
    q, k, v = torch.randn(rows, H, 1, DH), torch.randn(rows, H, S, DH), torch.randn(rows, H, S, DH)
    mask = torch.ones(rows, 1, 1, S, dtype=torch.bool)
    mask[0] = False  # a row with no key: zero output, as on every path
    mask[1, ..., 2:] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert calls == [] and weights is None
    reference = attention._fused(q, k, v, mask, None, False, 0.0, DH**-0.5)
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)
    assert out[0].abs().sum() == 0
    calls.clear()  # the reference called the fused kernel
    scaled_dot_product_attention(q[:1], k[:1], v[:1], mask[:1])  # one sentence: B H < MANY_ROWS
    scaled_dot_product_attention(torch.randn(rows, H, attention.FEW_QUERIES + 1, DH), k, v, mask)
    assert len(calls) == 2


def test_shared_prefix_attention_equals_attention_over_each_rows_whole_history():
    """Blocks of r rows sharing their first P keys/values, read once per block, give what each row's own
    attention over the prefix (repeated) and its own keys gives."""
    g, r, h, p, own, dh = 3, 4, 2, 5, 3, 8
    q = torch.randn(g * r, h, 1, dh)
    prefix_k, prefix_v = torch.randn(g, h, p, dh), torch.randn(g, h, p, dh)
    k, v = torch.randn(g * r, h, own, dh), torch.randn(g * r, h, own, dh)
    whole_k = torch.cat([prefix_k.repeat_interleave(r, dim=0), k], dim=2)
    whole_v = torch.cat([prefix_v.repeat_interleave(r, dim=0), v], dim=2)
    expected, _ = scaled_dot_product_attention(q, whole_k, whole_v, need_weights=True)
    got = shared_prefix_attention(q, prefix_k, prefix_v, k, v)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    # a row's output depends on its own block's prefix only
    moved = prefix_k.clone()
    moved[1] += 1.0
    changed = shared_prefix_attention(q, moved, prefix_v, k, v)
    assert torch.equal(changed[:r], got[:r]) and torch.equal(changed[2 * r:], got[2 * r:])
    assert not torch.allclose(changed[r: 2 * r], got[r: 2 * r])


@pytest.mark.parametrize("keys", [1, 5, 12, 13, 40])
def test_mixing_values_for_one_query_equals_the_matrix_product(keys):
    """``mix_values`` sums products over the keys where ATen's bmm would take its scalar loop (fewer than
    SCALAR_BMM_BELOW multiply-adds per product), and is the matrix product itself everywhere else."""
    g = torch.Generator().manual_seed(keys)
    weights = torch.softmax(torch.randn(6, 4, 1, keys, generator=g), dim=-1)
    values = torch.randn(6, 4, keys + 3, 32, generator=g)[:, :, :keys]  # a cache's slots in use: not contiguous
    with torch.no_grad():
        mixed = mix_values(weights, values)
    torch.testing.assert_close(mixed, torch.matmul(weights, values), rtol=0, atol=1e-6)
    assert mixed.shape == (6, 4, 1, 32)
    if keys * 32 >= SCALAR_BMM_BELOW:  # the matrix product, bit for bit
        assert torch.equal(mixed, torch.matmul(weights, values))
    two = torch.cat([weights, weights.flip(-1)], dim=2)  # two queries: always the matrix product
    assert torch.equal(mix_values(two, values), torch.matmul(two, values))
    trained = weights.clone().requires_grad_()  # training keeps the matrix product (and its gradient)
    assert torch.equal(mix_values(trained, values), torch.matmul(trained, values))


def test_cudnns_attention_is_taken_out_of_the_fused_kernels_process_wide(monkeypatch):
    """Where seqmap puts a model on a GPU it calls this: cuDNN's kernel builds a plan per new shape.
    SEQMAP_CUDNN_ATTENTION=1 leaves torch's order alone (to measure both)."""
    from seqmap.nn.attention import CUDNN_ATTENTION_VARIABLE, avoid_cudnn_attention

    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        monkeypatch.setenv(CUDNN_ATTENTION_VARIABLE, "1")
        avoid_cudnn_attention()
        assert torch.backends.cuda.cudnn_sdp_enabled()
        monkeypatch.delenv(CUDNN_ATTENTION_VARIABLE)
        avoid_cudnn_attention()
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
