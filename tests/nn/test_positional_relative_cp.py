"""Relative attention with content-position terms (``RelativeContentPosition``) against its formula, pair by pair.

    a^K_ij = x_i^T W_Q^T W_K x_j + x_i^T W_Q^T u^K + v^K^T W_K x_j + b^K
    a^V_ij = x_i^T W_Q^T W_V x_j + x_i^T W_Q^T u^V + v^V^T W_V x_j + b^V

``per_pair_attention`` computes both logits with plain loops over i and j (u, v, b the rows of the clipped
offset j - i and the head), takes a softmax of each over the allowed keys and mixes the values with their
mean. The module's scores, weights and outputs must equal it: explicit and fused paths, grouped key heads,
padding and causal masks, and through the key/value cache. tests/models/test_relative_cp.py checks the same
formula inside each Transformer family.
"""

import math

import pytest
import torch

from seqmap.nn.attention import causal_mask
from seqmap.nn.kv_cache import KVCache
from seqmap.nn.multihead import MultiHeadAttention
from seqmap.nn.positional import RelativeContentPosition, build_positional

D, H, DH, CLIP = 8, 2, 4, 2
T = 6  # offsets reach past the clip on both sides


def scheme() -> RelativeContentPosition:
    """A randomised scheme (a small table would hide a wrong row)."""
    pe = build_positional("relative_cp", d_model=D, n_heads=H, max_len=8, causal=True, relative_clip=CLIP)
    for p in pe.parameters():
        torch.nn.init.normal_(p)
    return pe


def attention(n_kv_heads: int = H, bias: bool = False) -> MultiHeadAttention:
    """bias=False: the projections are the formula's W_Q, W_K, W_V exactly."""
    mha = MultiHeadAttention(D, H, n_kv_heads, bias=bias).eval()
    for p in mha.parameters():
        torch.nn.init.normal_(p, std=0.5)
    return mha


def per_pair_attention(mha: MultiHeadAttention, pe: RelativeContentPosition, x: torch.Tensor, allowed: torch.Tensor):
    """The formula, one pair (i, j) at a time, in float64.

    x (B, T, D) is a self-attention's input at positions 0..T-1 (cached ones included); allowed (B, T, T)
    whether query i may attend key j. Returns the scaled logits a^K / sqrt(Dh) and a^V / sqrt(Dh)
    (B, H, T, T) (-inf where not allowed), the weights (B, H, T, T) (the mean of the two softmaxes) and
    the layer's output (B, T, D).
    """
    x = x.double()
    heads, dh, groups = mha.n_heads, mha.head_dim, mha.n_heads // mha.n_kv_heads
    w = mha.in_proj.weight.double()
    b_in = mha.in_proj.bias.double() if mha.in_proj.bias is not None else torch.zeros(w.size(0), dtype=torch.float64)
    starts = {"q": 0, "k": mha.d_model, "v": mha.d_model + mha.kv_width}

    def project(which: str, head: int, xj: torch.Tensor) -> torch.Tensor:  # head's rows of W x + b
        rows = slice(starts[which] + head * dh, starts[which] + (head + 1) * dh)
        return w[rows] @ xj + b_in[rows]

    key, value = pe.key_terms, pe.value_terms
    u_k, v_k, b_k = key.u.double(), key.v.double(), key.b.double()
    u_v, v_v, b_v = value.u.double(), value.v.double(), value.b.double()
    batch, length = x.shape[:2]
    logits_k = torch.full((batch, heads, length, length), -math.inf, dtype=torch.float64)
    logits_v = logits_k.clone()
    weights = torch.zeros_like(logits_k)
    z = torch.zeros(batch, length, mha.d_model, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                q = project("q", h, x[b, i])
                values = {}
                for j in range(length):
                    if not allowed[b, i, j]:
                        continue
                    r = max(-pe.clip, min(pe.clip, j - i)) + pe.clip
                    k, v = project("k", h // groups, x[b, j]), project("v", h // groups, x[b, j])
                    logits_k[b, h, i, j] = (q @ k + q @ u_k[r, h] + v_k[r, h] @ k + b_k[r, h]) / math.sqrt(dh)
                    logits_v[b, h, i, j] = (q @ v + q @ u_v[r, h] + v_v[r, h] @ v + b_v[r, h]) / math.sqrt(dh)
                    values[j] = v
                if values:
                    weights[b, h, i] = (logits_k[b, h, i].softmax(-1) + logits_v[b, h, i].softmax(-1)) / 2
                    z[b, i, h * dh:(h + 1) * dh] = sum(weights[b, h, i, j] * v for j, v in values.items())
    out = z @ mha.out_proj.weight.double().t()
    if mha.out_proj.bias is not None:
        out = out + mha.out_proj.bias.double()
    return logits_k, logits_v, weights, out


def heads(mha: MultiHeadAttention, x: torch.Tensor):
    """The module's own q (B, H, T, Dh), k and v (B, Hkv, T, Dh)."""
    q, k, v = mha.in_proj(x).split((mha.d_model, mha.kv_width, mha.kv_width), dim=-1)
    return (t.unflatten(-1, (-1, mha.head_dim)).transpose(1, 2) for t in (q, k, v))


def padded_inputs():
    """Two rows; row 1 ends in two padding positions. (x (2, T, D), key mask (2, T))."""
    x = torch.randn(2, T, D)
    keys = torch.ones(2, T, dtype=torch.bool)
    keys[1, T - 2:] = False
    return x, keys


@pytest.mark.parametrize("n_kv_heads", [H, 1], ids=["multi-head", "multi-query"])
def test_both_logits_are_the_formula_pair_by_pair(n_kv_heads):
    pe, mha = scheme(), attention(n_kv_heads)
    x = torch.randn(2, T, D)
    pos = torch.arange(T)
    logits_k, logits_v, _, _ = per_pair_attention(mha, pe, x, torch.ones(2, T, T, dtype=torch.bool))
    q, k, v = heads(mha, x)
    groups = H // n_kv_heads
    with torch.no_grad():
        scores_k = q @ k.repeat_interleave(groups, 1).transpose(-2, -1) / math.sqrt(DH) + pe.score_bias(q, k, pos, pos)
        scores_v = (q @ v.repeat_interleave(groups, 1).transpose(-2, -1) / math.sqrt(DH)
                    + pe.value_score_bias(q, v, pos, pos))
    torch.testing.assert_close(scores_k.double(), logits_k, rtol=0, atol=1e-5)
    torch.testing.assert_close(scores_v.double(), logits_v, rtol=0, atol=1e-5)


@pytest.mark.parametrize("explicit", [True, False], ids=["explicit", "fused"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional-padded"])
@pytest.mark.parametrize("n_kv_heads", [H, 1], ids=["multi-head", "multi-query"])
def test_weights_and_output_are_the_formula_pair_by_pair(explicit, causal, n_kv_heads):
    """The explicit path (which returns the weights) and the fused kernel (needs_weights is False: it takes
    both softmaxes) give the per-pair output; projection biases included, as the layers have them."""
    pe, mha = scheme(), attention(n_kv_heads, bias=True)
    assert not pe.needs_weights
    x, keys = padded_inputs()
    mask = None if causal else keys[:, None, None, :]
    allowed = causal_mask(T).expand(2, T, T) if causal else keys[:, None, :].expand(2, T, T)
    _, _, weights, out = per_pair_attention(mha, pe, x, allowed)
    with torch.no_grad():
        got, got_weights = mha.self_attention(x, mask, causal=causal, positional=pe, need_weights=explicit)
    torch.testing.assert_close(got.double(), out, rtol=0, atol=1e-5)
    if explicit:
        torch.testing.assert_close(got_weights.double(), weights, rtol=0, atol=1e-5)
        assert torch.all(got_weights.masked_select(~allowed[:, None]) == 0)  # exactly zero, not merely small
        torch.testing.assert_close(got_weights.sum(-1), torch.ones(2, H, T))


@pytest.mark.parametrize("chunks", [[1] * T, [3, 1, 2]], ids=["token-by-token", "chunks"])
@pytest.mark.parametrize("n_kv_heads", [H, 1], ids=["multi-head", "multi-query"])
def test_cached_steps_are_the_formula_pair_by_pair(chunks, n_kv_heads):
    """Each step's queries sit at the cache length and read every cached key: the per-pair causal formula."""
    pe, mha = scheme(), attention(n_kv_heads, bias=True)
    x = torch.randn(2, T, D)
    _, _, weights, out = per_pair_attention(mha, pe, x, causal_mask(T).expand(2, T, T))
    cache, start = KVCache(), 0
    with torch.no_grad():
        for n in chunks:
            got, got_weights = mha.self_attention(x[:, start:start + n], causal=True, positional=pe, cache=cache,
                                                  offset=start, need_weights=True)
            torch.testing.assert_close(got.double(), out[:, start:start + n], rtol=0, atol=1e-5)
            torch.testing.assert_close(got_weights.double(), weights[:, :, start:start + n, :start + n],
                                       rtol=0, atol=1e-5)
            start += n


def test_padding_keys_change_no_real_output():
    """Row 1 alone (its 4 real positions) gives what it gives inside the padded batch, weights included."""
    pe, mha = scheme(), attention(bias=True)
    x, keys = padded_inputs()
    with torch.no_grad():
        batch, batch_weights = mha.self_attention(x, keys[:, None, None, :], positional=pe, need_weights=True)
        alone, alone_weights = mha.self_attention(x[1:, :T - 2], positional=pe, need_weights=True)
    torch.testing.assert_close(batch[1, :T - 2], alone[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(batch_weights[1, :, :T - 2, :T - 2], alone_weights[0], rtol=0, atol=1e-5)
    assert torch.all(batch_weights[1, ..., T - 2:] == 0)


def test_the_value_side_is_its_own_softmax():
    """The weights are the mean of two softmaxes, not the key side's alone: the value logits move them."""
    pe, mha = scheme(), attention(bias=True)
    x = torch.randn(1, T, D)
    pos = torch.arange(T)
    q, k, _ = heads(mha, x)
    with torch.no_grad():
        _, weights = mha.self_attention(x, positional=pe, need_weights=True)
        key_side = (q @ k.transpose(-2, -1) / math.sqrt(DH) + pe.score_bias(q, k, pos, pos)).softmax(-1)
    assert not torch.allclose(weights, key_side, atol=1e-3)


def test_clip_is_checked_and_the_tables_are_per_head_and_offset():
    with pytest.raises(ValueError, match=r"^relative_clip=-1 must be >= 0"):
        RelativeContentPosition(H, DH, clip=-1)
    pe = RelativeContentPosition(H, DH, clip=CLIP)
    shapes = {name: tuple(p.shape) for name, p in pe.named_parameters()}
    rows = 2 * CLIP + 1
    assert shapes == {f"{side}.{name}": shape for side in ("key_terms", "value_terms")
                      for name, shape in (("u", (rows, H, DH)), ("v", (rows, H, DH)), ("b", (rows, H)))}
