"""``seqmap.nn.multihead``: parity with ``torch.nn.MultiheadAttention``, the KV cache, grouped-query heads.

Warning at the border: torch's ``key_padding_mask`` / boolean ``attn_mask`` mean True = *ignore*;
seqmap's masks mean True = may attend, so every torch call below receives ``~mask``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import seqmap.nn.multihead as multihead
from seqmap.nn.attention import causal_mask, key_mask, padding_mask
from seqmap.nn.kv_cache import KVCache, reorder_caches
from seqmap.nn.multihead import MultiHeadAttention

B, T, S, D, H = 2, 6, 5, 16, 4
DH = D // H


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _pair(bias: bool = True) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    ours = MultiHeadAttention(D, H, bias=bias).eval()
    ref = nn.MultiheadAttention(D, H, bias=bias, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        if bias:
            ref.in_proj_bias.copy_(ours.in_proj.bias)
            ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ours, ref


def _close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


# -- parity with torch.nn.MultiheadAttention ----------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_with_key_padding_matches_torch(bias):
    ours, ref = _pair(bias)
    x = torch.randn(B, T, D)
    pad = padding_mask(torch.tensor([T, 3]), T)  # (B, T), True at real tokens
    out, w = ours.self_attention(x, key_mask(pad))
    expected, _ = ref(x, x, x, key_padding_mask=~pad, need_weights=False)
    assert w is None
    _close(out, expected)


@pytest.mark.parametrize("with_padding", [False, True])
def test_causal_self_attention_matches_torch(with_padding):
    ours, ref = _pair()
    x = torch.randn(B, T, D)
    pad = padding_mask(torch.tensor([T, 4]), T)
    out, _ = ours.self_attention(x, key_mask(pad) if with_padding else None, causal=True)
    expected, _ = ref(x, x, x, attn_mask=~causal_mask(T), key_padding_mask=~pad if with_padding else None,
                      need_weights=False)
    _close(out, expected)


def test_cross_attention_matches_torch():
    ours, ref = _pair()
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    src_pad = padding_mask(torch.tensor([S, 2]), S)
    out, _ = ours.cross_attention(x, ours.project_memory(memory), key_mask(src_pad))
    expected, _ = ref(x, memory, memory, key_padding_mask=~src_pad, need_weights=False)
    _close(out, expected)


def test_need_weights_returns_per_head_weights_like_torch():
    ours, ref = _pair()
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    pad, src_pad = padding_mask(torch.tensor([T, 4]), T), padding_mask(torch.tensor([S, 2]), S)

    out, w = ours.self_attention(x, key_mask(pad), causal=True, need_weights=True)
    exp_out, exp_w = ref(x, x, x, attn_mask=~causal_mask(T), key_padding_mask=~pad, average_attn_weights=False)
    assert w.shape == (B, H, T, T)
    _close(out, exp_out)
    _close(w, exp_w)

    out, w = ours.cross_attention(x, ours.project_memory(memory), key_mask(src_pad), need_weights=True)
    exp_out, exp_w = ref(x, memory, memory, key_padding_mask=~src_pad, average_attn_weights=False)
    assert w.shape == (B, H, T, S)
    _close(out, exp_out)
    _close(w, exp_w)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("n_kv_heads", [H, 2])
def test_rows_that_share_a_source_read_one_copy_of_its_keys_and_values(need_weights, n_kv_heads):
    """r decoder rows per source (beams) attend as r queries each: the same as r copies of the memory."""
    mha = MultiHeadAttention(D, H, n_kv_heads).eval()
    r = 3
    x, memory = torch.randn(B * r, T, D), torch.randn(B, S, D)
    src_pad = key_mask(padding_mask(torch.tensor([S, 2]), S))
    shared, shared_w = mha.cross_attention(x, mha.project_memory(memory), src_pad, need_weights=need_weights)
    copies = mha.project_memory(memory.repeat_interleave(r, 0))
    out, w = mha.cross_attention(x, copies, src_pad.repeat_interleave(r, 0), need_weights=need_weights)
    assert shared.shape == (B * r, T, D)
    _close(shared, out)
    if need_weights:
        assert shared_w.shape == w.shape == (B * r, H, T, S)
        _close(shared_w, w)
    with pytest.raises(AssertionError, match="equal blocks"):
        mha.cross_attention(x[:5], mha.project_memory(memory))


# -- invariants -----------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_padding_does_not_change_outputs_at_real_positions(causal):
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(B, T, D)
    x[1, 3:] = 1e3  # garbage in the padding of row 1
    pad = padding_mask(torch.tensor([T, 3]), T)
    out, _ = mha.self_attention(x, key_mask(pad), causal=causal)
    alone, _ = mha.self_attention(x[1:, :3], causal=causal)
    _close(out[1, :3], alone[0])


def test_future_tokens_do_not_change_past_outputs():
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(B, T, D)
    y = x.clone()
    y[:, 4:] = torch.randn(B, T - 4, D)
    out_x, _ = mha.self_attention(x, causal=True)
    out_y, _ = mha.self_attention(y, causal=True)
    _close(out_x[:, :4], out_y[:, :4])
    assert not torch.allclose(out_x[:, 4:], out_y[:, 4:])


def test_every_parameter_gets_a_finite_gradient():
    mha = MultiHeadAttention(D, H, dropout=0.1).train()
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    pad = key_mask(padding_mask(torch.tensor([T, 3]), T))
    src_pad = key_mask(padding_mask(torch.tensor([S, 2]), S))
    h, _ = mha.self_attention(x, pad, causal=True)
    out, _ = mha.cross_attention(h, mha.project_memory(memory), src_pad)
    out.square().sum().backward()
    for name, p in mha.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


class _SelfThenCross(nn.Module):
    """A forward() for ``torch.func.functional_call``: causal self-attention, then cross-attention."""

    def __init__(self, mha: MultiHeadAttention, pad: torch.Tensor):
        super().__init__()
        self.mha, self.pad = mha, pad

    def forward(self, x, memory):
        h, _ = self.mha.self_attention(x, self.pad, causal=True)
        return self.mha.cross_attention(h, self.mha.project_memory(memory))[0]


@pytest.mark.parametrize("n_kv_heads", [None, 1])
def test_gradcheck_float64(n_kv_heads):
    pad = key_mask(torch.tensor([[True, True, True], [True, True, False]]))
    model = _SelfThenCross(MultiHeadAttention(4, 2, n_kv_heads=n_kv_heads), pad).double().eval()
    names = [name for name, _ in model.named_parameters()]
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 2, 4, dtype=torch.float64, requires_grad=True)
    weights = [p.detach().clone().requires_grad_() for p in model.parameters()]

    def f(x, memory, *weights):
        return torch.func.functional_call(model, dict(zip(names, weights, strict=True)), (x, memory))

    assert torch.autograd.gradcheck(f, (x, memory, *weights))


# -- KV cache ---------------------------------------------------------------------------------------


def _decode(mha, x, steps, cache=None):
    """Feed x (B, T, D) through causal self-attention in chunks of the given sizes; concatenate outputs."""
    cache = KVCache() if cache is None else cache
    outs, start = [], 0
    for n in steps:
        out, _ = mha.self_attention(x[:, start:start + n], causal=True, offset=start, cache=cache)
        outs.append(out)
        start += n
    return torch.cat(outs, dim=1), cache


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1], ids=["multi-head", "grouped", "multi-query"])
def test_token_by_token_with_cache_equals_full_causal_call(n_kv_heads):
    mha = MultiHeadAttention(D, H, n_kv_heads=n_kv_heads).eval()
    x = torch.randn(B, T, D)
    full, _ = mha.self_attention(x, causal=True)
    stepped, cache = _decode(mha, x, [1] * T)
    assert stepped.shape == (B, T, D)
    assert cache.length == T and cache.k.shape[:2] == (B, n_kv_heads) and cache.k.shape[-1] == DH
    _close(stepped, full)


def test_chunked_prefill_then_steps_equals_full_causal_call():
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(B, T, D)
    full, _ = mha.self_attention(x, causal=True)
    chunked, _ = _decode(mha, x, [3, 1, 2])  # chunk 3 has T=2 queries over S=6 keys
    _close(chunked, full)


def test_cache_grows_past_its_initial_capacity():
    mha = MultiHeadAttention(D, H, n_kv_heads=2).eval()
    x = torch.randn(B, 40, D)
    full, _ = mha.self_attention(x, causal=True)
    cache = KVCache()
    stepped, _ = _decode(mha, x[:, :1], [1], cache)
    first_capacity = cache.k.size(2)
    assert first_capacity < 40
    outs, reallocations = [stepped], 0
    for i in range(1, 40):
        storage = cache.k.data_ptr()
        out, _ = mha.self_attention(x[:, i:i + 1], causal=True, offset=i, cache=cache)
        outs.append(out)
        reallocations += cache.k.data_ptr() != storage
    assert cache.length == 40 and cache.k.size(2) >= 40 > first_capacity
    assert 1 <= reallocations <= 2  # storage grows geometrically, not once per step
    _close(torch.cat(outs, dim=1), full)
    _close(cache.k[:, :, :40], mha.project_memory(x)[0])  # keys of a self-attention == projected memory keys


def test_cache_reorder_selects_batch_rows():
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(3, T, D)
    _, cache = _decode(mha, x[:, :-1], [1] * (T - 1))
    index = torch.tensor([2, 0, 2])
    cache.reorder(index)
    assert cache.k.size(0) == 3 and cache.length == T - 1
    last, _ = mha.self_attention(x[index, -1:], causal=True, offset=T - 1, cache=cache)
    full, _ = mha.self_attention(x[index], causal=True)
    _close(last[:, 0], full[:, -1])


# -- grouped-query and multi-query heads ------------------------------------------------------------


@pytest.mark.parametrize("n_kv_heads", [2, 1], ids=["grouped", "multi-query"])
def test_grouped_query_shapes_and_equivalent_multi_head(n_kv_heads):
    gqa = MultiHeadAttention(D, H, n_kv_heads=n_kv_heads).eval()
    assert gqa.in_proj.weight.shape == (D + 2 * n_kv_heads * DH, D)
    assert gqa.in_proj.bias.shape == (D + 2 * n_kv_heads * DH,)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    out, w = gqa.self_attention(x, causal=True, need_weights=True)
    assert out.shape == (B, T, D) and w.shape == (B, H, T, T)
    k, v = gqa.project_memory(memory)
    assert k.shape == v.shape == (B, n_kv_heads, S, DH)

    # the same layer as plain multi-head attention: each key/value head copied to its H // Hkv query heads
    mha = MultiHeadAttention(D, H).eval()
    q_rows, k_rows, v_rows = gqa.in_proj.weight.split((D, n_kv_heads * DH, n_kv_heads * DH))
    q_b, k_b, v_b = gqa.in_proj.bias.split((D, n_kv_heads * DH, n_kv_heads * DH))

    def widen(rows):
        return rows.unflatten(0, (n_kv_heads, DH)).repeat_interleave(H // n_kv_heads, dim=0).flatten(0, 1)

    with torch.no_grad():
        mha.in_proj.weight.copy_(torch.cat([q_rows, widen(k_rows), widen(v_rows)]))
        mha.in_proj.bias.copy_(torch.cat([q_b, widen(k_b), widen(v_b)]))
        mha.out_proj.load_state_dict(gqa.out_proj.state_dict())
    for mask in (None, key_mask(padding_mask(torch.tensor([T, 2]), T))):
        _close(gqa.self_attention(x, mask, causal=True)[0], mha.self_attention(x, mask, causal=True)[0])
    _close(gqa.cross_attention(x, gqa.project_memory(memory))[0], mha.cross_attention(x, mha.project_memory(memory))[0])


def test_unscaled_heads_of_their_own_width_match_the_formula():
    """``scale=1.0`` (no 1/sqrt(Dh): T5) and ``head_dim`` other than D / H (T5's d_kv): softmax(q k^T) v per head,
    over H * head_dim dimensions that out_proj maps back to D; cached steps give the full pass."""
    mha = MultiHeadAttention(D, 3, bias=False, scale=1.0, head_dim=5).eval()
    assert mha.in_proj.weight.shape == (45, D) and mha.out_proj.weight.shape == (D, 15)
    x, memory = torch.randn(B, T, D), torch.randn(B, S, D)
    q, k, v = (x @ mha.in_proj.weight.t()).view(B, T, 3, 3, 5).permute(2, 0, 3, 1, 4)  # each (B, 3, T, 5)
    scores = (q @ k.transpose(-2, -1)).masked_fill(~causal_mask(T), float("-inf"))
    expected = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, 15) @ mha.out_proj.weight.t()
    full, _ = mha.self_attention(x, causal=True)
    _close(full, expected)
    _close(_decode(mha, x, [2, 1, 3])[0], full)
    q = (x @ mha.in_proj.weight[:15].t()).view(B, T, 3, 5).transpose(1, 2)
    k, v = (memory @ mha.in_proj.weight[15:].t()).view(B, S, 2, 3, 5).permute(2, 0, 3, 1, 4)
    expected = ((q @ k.transpose(-2, -1)).softmax(-1) @ v).transpose(1, 2).reshape(B, T, 15) @ mha.out_proj.weight.t()
    _close(mha.cross_attention(x, mha.project_memory(memory))[0], expected)


@pytest.mark.parametrize(
    ("d_model", "n_heads", "n_kv_heads", "message"),
    [(10, 4, None, "d_model=10"), (16, 4, 3, "n_kv_heads=3"), (16, 4, 8, "n_kv_heads=8")],
)
def test_bad_head_counts_raise_value_error(d_model, n_heads, n_kv_heads, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(d_model, n_heads, n_kv_heads=n_kv_heads)


@pytest.mark.parametrize(("many", "whole"), [(False, False), (True, False), (True, True)],
                         ids=["general-path", "decoding-path-slots-in-use", "decoding-path-whole-storage"])
def test_cache_reorders_copy_the_slots_in_use_and_keep_decoding_exact(monkeypatch, many, whole):
    """Beam-style reorders (same batch size, in place) and a shrink (rows dropped) leave a cache whose next
    steps equal a full recomputation over the reordered histories. Garbage in the unused capacity never
    shows: steps over the slots in use never read it, and steps that read the whole storage
    (``KVCache.whole``, the decoding path for many rows on CPUs other than Intel's) zero it first and give
    it no weight."""
    monkeypatch.setattr(multihead, "MANY_ROWS", 1 if many else 10**9)
    monkeypatch.setattr(multihead, "WHOLE_STORAGE_READS", whole)
    calls = []
    real_whole = KVCache.whole
    monkeypatch.setattr(KVCache, "whole", lambda self: calls.append(1) or real_whole(self))
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(4, 9, D)
    history = x[:, :3]
    with torch.no_grad():  # inference
        _, cache = _decode(mha, history, [1, 1, 1])
    assert cache.k.size(2) > cache.length  # spare capacity exists
    for step, index in enumerate([torch.tensor([1, 1, 3, 0]), torch.tensor([0, 2, 2, 3]), torch.tensor([3, 1])]):
        cache.reorder(index)
        with torch.no_grad():
            cache.k[:, :, cache.length:] = float("nan")  # garbage in the unused slots (a new storage's memory)
            cache.v[:, :, cache.length:] = float("nan")
            cache._tail_zeroed = False
        history = torch.cat([history[index], x[: index.numel(), 3 + step : 4 + step]], dim=1)
        with torch.no_grad():
            last, _ = mha.self_attention(history[:, -1:], causal=True, offset=history.size(1) - 1, cache=cache)
            full, _ = mha.self_attention(history, causal=True)
        _close(last[:, 0], full[:, -1])
        unused = cache.k[:, :, cache.length:], cache.v[:, :, cache.length:]
        assert all(not u.any() for u in unused) if whole else all(u.isnan().all() for u in unused)
    assert cache.k.size(0) == 2 and cache.length == 6
    assert len(calls) == (6 if whole else 0)  # the three steps of _decode and the three above


def test_cache_reorder_keeps_gradients_when_training():
    mha = MultiHeadAttention(D, H)
    x = torch.randn(3, 4, D, requires_grad=True)
    _, cache = _decode(mha, x[:, :3], [1, 1, 1])
    cache.reorder(torch.tensor([2, 0, 0]))
    out, _ = mha.self_attention(x[:, 3:], causal=True, offset=3, cache=cache)
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert x.grad[1, :3].abs().sum() == 0  # row 1's past was dropped


def test_beams_in_blocks_read_their_shared_prefix_once_and_decode_exactly(monkeypatch):
    """Rows in blocks of r (beams of a sentence) reordered within their block: the cache keeps the slots
    each block has in common once (``KVCache.prefix``, found from the lineage, never more than the rows'
    keys share), through growths of the cache and a change of blocks, and steps attending through it
    equal a full recomputation of each history."""
    monkeypatch.setattr(multihead, "SHARED_PREFIX_MIN", 2)
    monkeypatch.setattr(multihead, "MANY_ROWS", 1)  # a few rows here; the CPU path wants many
    calls = []
    real = multihead.shared_prefix_attention
    monkeypatch.setattr(multihead, "shared_prefix_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    mha = MultiHeadAttention(D, H).eval()
    gen = torch.Generator().manual_seed(0)
    rows, steps = 6, 24
    x = torch.randn(rows, steps + 2, D, generator=gen)
    history = x[:, :2]
    with torch.no_grad():
        _, cache = _decode(mha, history, [1, 1])
    for step in range(steps):
        r = 3 if step < 18 else 2  # blocks of 3 rows, then of 2
        if step % 3 == 2:  # every row of a block follows the block's first: the histories become one
            index = torch.arange(rows) // r * r
        else:
            index = torch.randint(0, r, (rows,), generator=gen) + torch.arange(rows) // r * r
        reorder_caches([cache], index, blocks=r)
        history = history[index]
        common = cache.k[:, :, : cache.shared].reshape(rows // r, r, -1)
        assert torch.equal(common, common[:, :1].expand(-1, r, -1))  # never claims more than the keys share
        if step % 3 == 2:
            assert cache.shared == cache.length  # everything is shared right after the blocks collapse
        if cache.shared:
            assert torch.equal(cache.prefix[0], cache.k[::r, :, : cache.shared])
            assert torch.equal(cache.prefix[1], cache.v[::r, :, : cache.shared])
        history = torch.cat([history, x[:, 2 + step : 3 + step]], dim=1)
        with torch.no_grad():
            last, _ = mha.self_attention(history[:, -1:], causal=True, offset=history.size(1) - 1, cache=cache)
            full, _ = mha.self_attention(history, causal=True)
        _close(last[:, 0], full[:, -1])
    assert cache.k.size(2) == 32 and len(calls) >= 12  # grown past 16 slots; the shared path served the steps
