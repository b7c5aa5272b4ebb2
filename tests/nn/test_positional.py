"""Invariants of the positional schemes in ``seqmap.nn.positional``.

Absolute schemes: known values, shifts as rotations. Relative schemes: biases
depend on the offset j - i only. Every scheme: runs past the length it was
built for (learned raises a clear error), and cached token-by-token attention
equals the full-sequence call, which is what incremental decoding relies on.
"""

import math

import pytest
import torch

from seqmap.nn.kv_cache import KVCache
from seqmap.nn.multihead import MultiHeadAttention
from seqmap.nn.positional import (
    POSITIONAL_KINDS,
    ALiBiPositional,
    LearnedPositional,
    NoPositional,
    RelativeContentPosition,
    RelativePositional,
    RotaryPositional,
    SinusoidalPositional,
    T5RelativeBias,
    alibi_slopes,
    build_positional,
    sinusoidal_table,
    t5_buckets,
)

D, H, DH = 16, 4, 4
# every kind, plus Shaw's relative values (the only scheme that needs the weights)
VARIANTS = [(kind, {}) for kind in POSITIONAL_KINDS] + [("relative", {"relative_values": True})]
VARIANT_IDS = [kind for kind in POSITIONAL_KINDS] + ["relative_values"]


def make(kind, max_len=8, causal=True, **kwargs):
    """A small scheme whose learned tables are randomised (a zero table would hide position bugs)."""
    torch.manual_seed(0)
    pe = build_positional(kind, d_model=D, n_heads=H, max_len=max_len, causal=causal, relative_clip=3,
                          t5_buckets=8, t5_max_distance=16, **kwargs)
    for p in pe.parameters():
        torch.nn.init.normal_(p)
    return pe


def positions(start, length):
    return torch.arange(start, start + length)


# -- sinusoidal -----------------------------------------------------------------
def test_sinusoidal_known_values():
    d = 8
    table = sinusoidal_table(40, d)
    assert torch.equal(table[0], torch.tensor([0.0, 1.0] * (d // 2)))
    for pos, i in [(1, 0), (3, 1), (17, 2), (39, 3)]:
        angle = pos / 10000 ** (2 * i / d)
        assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoidal_shift_is_one_rotation_per_frequency_pair():
    """PE(pos + k) = R(k, i) PE(pos) on each (sin, cos) pair i, one matrix for every pos."""
    d, length = 8, 64
    table = sinusoidal_table(length + 20, d).double()
    for k in (1, 5, 20):
        for i in range(d // 2):
            now, later = table[:length, 2 * i: 2 * i + 2], table[k: length + k, 2 * i: 2 * i + 2]  # (N, 2)
            fitted = torch.linalg.lstsq(now, later).solution.T  # later[p] = fitted @ now[p], least squares
            assert torch.allclose(now @ fitted.T, later, atol=1e-5)  # one matrix fits every position
            a = k / 10000 ** (2 * i / d)
            rotation = torch.tensor([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]], dtype=torch.float64)
            assert torch.allclose(fitted, rotation, atol=1e-5)


def test_sinusoidal_embed_uses_offset_and_grows():
    pe = SinusoidalPositional(D, max_len=4)
    x = torch.randn(2, 3, D)
    assert torch.allclose(pe.embed(x, offset=10) - x, sinusoidal_table(13, D)[10:13], atol=1e-6)
    assert pe.table.size(0) >= 13


# -- learned ----------------------------------------------------------------------
def test_learned_adds_its_table_rows_at_the_offset():
    pe = make("learned")
    x = torch.randn(2, 3, D)
    assert torch.allclose(pe.embed(x, offset=5) - x, pe.table.weight[5:8].expand(2, -1, -1), atol=1e-6)


def test_learned_past_max_len_raises_naming_the_option():
    pe = LearnedPositional(max_len=8, d_model=D)
    pe.embed(torch.randn(1, 8, D))  # exactly max_len positions fit
    with pytest.raises(ValueError, match=r"model\.max_len=8.*(raise|extrapolates)"):
        pe.embed(torch.randn(1, 1, D), offset=8)


# -- RoPE ---------------------------------------------------------------------------
@pytest.mark.parametrize("base", [0.0, -2.0, 1.0, 0.5, float("nan")])
def test_rope_refuses_a_base_that_gives_no_usable_angles(base):
    """base <= 0 made NaN angles, which the fused attention kernel turned into finite but meaningless outputs."""
    with pytest.raises(ValueError, match=rf"rope_base={base} must be > 1 \(10000 in the paper\)"):
        RotaryPositional(8, max_len=4, base=base)
    assert RotaryPositional(8, max_len=4, base=1.0001).cos.isfinite().all()


def test_rope_rotates_pair_i_by_pos_times_theta_i():
    """Half-split: dim i pairs with dim i + Dh/2 and turns by pos * base^(-2i/Dh)."""
    dh, base = 8, 10000.0
    rope = RotaryPositional(dh, max_len=4, base=base)
    for i in range(dh // 2):
        x = torch.zeros(1, 1, 1, dh)
        x[..., i] = 1.0
        for pos in (0, 3, 50):
            out = rope.rotate(x, torch.tensor([pos]))[0, 0, 0]
            angle = pos * base ** (-2 * i / dh)
            expected = torch.zeros(dh)
            expected[i], expected[i + dh // 2] = math.cos(angle), math.sin(angle)
            assert torch.allclose(out, expected, atol=1e-5)


def test_rope_dot_product_depends_only_on_offset():
    rope = RotaryPositional(DH * 2, max_len=8)
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, 1, DH * 2)  # one query and one key vector, each (1, 1, 1, Dh)

    def dot(i, j):
        return (rope.rotate(q, torch.tensor([i])) * rope.rotate(k, torch.tensor([j]))).sum()

    for i, j in [(0, 0), (2, 5), (7, 1), (3, 3)]:
        for c in (1, 6, 100):  # 100: past the cached tables
            assert torch.allclose(dot(i, j), dot(i + c, j + c), atol=1e-4)
    assert not torch.allclose(dot(0, 1), dot(0, 3), atol=1e-3)  # the offset does matter


def test_rope_preserves_norms():
    rope = RotaryPositional(DH * 2, max_len=8)
    x = torch.randn(2, H, 30, DH * 2)
    rotated = rope.rotate(x, positions(5, 30))
    assert not torch.allclose(rotated, x)
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-5)


def test_rope_rejects_odd_head_width():
    with pytest.raises(ValueError, match="even head width"):
        RotaryPositional(5)


# -- biases: ALiBi, T5, Shaw ------------------------------------------------------------
@pytest.mark.parametrize("kind,causal,kwargs", [
    ("alibi", True, {}), ("alibi", False, {}), ("t5", True, {}), ("t5", False, {}), ("relative", True, {}),
    ("relative_cp", True, {}),
], ids=["alibi-causal", "alibi-bidirectional", "t5-unidirectional", "t5-bidirectional", "relative", "relative_cp"])
def test_bias_depends_only_on_offset(kind, causal, kwargs):
    pe = make(kind, causal=causal, **kwargs)
    t = 24  # past relative_clip=3 and into T5's logarithmic buckets (max_distance=16)
    q, k = (torch.randn(2, H, 1, DH).expand(-1, -1, t, -1) for _ in range(2))  # the same query and key everywhere
    bias = pe.score_bias(q, k, positions(0, t), positions(0, t)).expand(2, H, t, t)
    for c in (1, 5):
        assert torch.allclose(bias[..., c:, c:], bias[..., :-c, :-c])  # bias[i, j] == bias[i + c, j + c]
    shifted = pe.score_bias(q, k, positions(1000, t), positions(1000, t)).expand(2, H, t, t)  # far past max_len
    assert torch.allclose(shifted, bias, atol=1e-5)
    assert not torch.allclose(bias[..., -1, :-1], bias[..., -1, -1:])  # the last query tells its keys apart


def test_relative_bias_is_q_dot_clipped_key_embedding_over_sqrt_dh():
    pe = make("relative")
    q = torch.randn(1, H, 5, DH)
    q_pos, k_pos = positions(0, 5), positions(0, 5)
    bias = pe.score_bias(q, None, q_pos, k_pos)
    for i in range(5):
        for j in range(5):
            a = pe.key_table.weight[max(-3, min(3, j - i)) + 3]
            assert torch.allclose(bias[0, :, i, j], q[0, :, i] @ a / math.sqrt(DH), atol=1e-5)


def test_relative_value_term_is_weighted_sum_of_clipped_value_embeddings():
    pe = make("relative", relative_values=True)
    assert pe.needs_weights and not make("relative").needs_weights
    weights = torch.softmax(torch.randn(2, H, 4, 9), dim=-1)
    q_pos, k_pos = positions(5, 4), positions(0, 9)
    out = pe.value_term(weights, q_pos, k_pos)
    index = (k_pos[None, :] - q_pos[:, None]).clamp(-3, 3) + 3  # (T, S)
    expected = torch.einsum("bhts,tsd->bhtd", weights, pe.value_table.weight[index])
    assert out.shape == (2, H, 4, DH)
    assert torch.allclose(out, expected, atol=1e-5)
    assert make("relative").value_term(weights, q_pos, k_pos) is None


@pytest.mark.parametrize("n_heads,log2_slopes", [
    (8, [-1, -2, -3, -4, -5, -6, -7, -8]),
    (4, [-2, -4, -6, -8]),
    # not a power of two: the 4-head slopes, then every other 8-head slope (Press et al. 2022, section 3)
    (6, [-2, -4, -6, -8, -1, -3]),
])
def test_alibi_slopes(n_heads, log2_slopes):
    assert torch.allclose(alibi_slopes(n_heads).log2(), torch.tensor(log2_slopes, dtype=torch.float32))


def test_alibi_bias_is_minus_slope_times_distance():
    pe = ALiBiPositional(8)
    q_pos, k_pos = positions(3, 4), positions(0, 7)
    bias = pe.score_bias(torch.randn(1, 8, 4, DH), None, q_pos, k_pos)
    distance = (q_pos[:, None] - k_pos[None, :]).abs().float()
    assert torch.allclose(bias[0], -alibi_slopes(8)[:, None, None] * distance)


def test_t5_unidirectional_puts_every_future_key_in_the_bucket_of_offset_zero():
    offsets = torch.arange(-40, 41)
    buckets = t5_buckets(offsets, 8, 16, bidirectional=False)
    past, future = buckets[offsets < 0], buckets[offsets >= 0]
    assert (future == future[0]).all() and (past != future[0]).all()
    assert torch.equal(buckets[offsets <= 0].flip(0)[:4], torch.arange(4))  # exact buckets for small distances
    assert buckets.max() == 7  # far distances share the last bucket


def test_t5_bidirectional_tells_left_from_right():
    offsets = torch.arange(1, 40)
    left = t5_buckets(-offsets, 8, 16, bidirectional=True)
    right = t5_buckets(offsets, 8, 16, bidirectional=True)
    assert set(left.tolist()).isdisjoint(right.tolist())
    assert t5_buckets(torch.tensor([0]), 8, 16, bidirectional=True).item() == 0
    assert left.max() < 4 <= right.min() and right.max() == 7


def test_t5_buckets_golden_values():
    """T5's defaults (32 buckets, max_distance 128): 8 exact, then 8 logarithmic per side.

    Worked by hand from the paper's rule: distance d >= 8 goes to 8 + floor(8 * log(d / 8) / log(16)).
    """
    distances = torch.tensor([0, 1, 7, 8, 16, 32, 64, 127, 128, 10_000])
    expected = torch.tensor([0, 1, 7, 8, 10, 12, 14, 15, 15, 15])
    assert torch.equal(t5_buckets(-distances, 32, 128, bidirectional=True), expected)
    assert torch.equal(t5_buckets(distances[1:], 32, 128, bidirectional=True), 16 + expected[1:])


def test_build_positional_t5_direction_follows_causal():
    assert make("t5", causal=True).bidirectional is False
    assert make("t5", causal=False).bidirectional is True


# -- every scheme -----------------------------------------------------------------------
def attention(n_kv_heads=H):
    torch.manual_seed(1)
    return MultiHeadAttention(D, H, n_kv_heads).eval()


@pytest.mark.parametrize("kind,kwargs", VARIANTS, ids=VARIANT_IDS)
def test_runs_past_the_length_it_was_built_for(kind, kwargs):
    pe, mha = make(kind, max_len=8, **kwargs), attention()
    x = torch.randn(2, 20, D)
    if kind == "learned":
        with pytest.raises(ValueError, match=r"model\.max_len"):
            pe.embed(x)
        return
    out, _ = mha.self_attention(pe.embed(x), causal=True, positional=pe)
    assert out.shape == x.shape and torch.isfinite(out).all()


@pytest.mark.parametrize("kind,kwargs", [("learned", {}), ("relative", {"relative_values": True}), ("t5", {}),
                                         ("relative_cp", {})], ids=["learned", "relative_values", "t5", "relative_cp"])
def test_gradient_reaches_learned_tables(kind, kwargs):
    pe, mha = make(kind, **kwargs), attention()
    out, _ = mha.self_attention(pe.embed(torch.randn(2, 8, D)), causal=True, positional=pe)
    out.square().sum().backward()
    params = dict(pe.named_parameters())
    assert params
    for name, p in params.items():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("n_kv_heads", [H, 2], ids=["multi-head", "grouped-query"])
@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 3, 1]], ids=["token-by-token", "chunks"])
@pytest.mark.parametrize("kind,kwargs", VARIANTS, ids=VARIANT_IDS)
def test_cached_incremental_attention_equals_full_sequence(kind, kwargs, chunks, n_kv_heads):
    pe, mha = make(kind, max_len=16, **kwargs), attention(n_kv_heads)
    x = torch.randn(2, sum(chunks), D)
    with torch.no_grad():
        full, _ = mha.self_attention(pe.embed(x), causal=True, positional=pe)
        cache, steps, offset = KVCache(), [], 0
        for size in chunks:
            piece = pe.embed(x[:, offset: offset + size], offset)
            out, _ = mha.self_attention(piece, causal=True, positional=pe, cache=cache, offset=offset)
            steps.append(out)
            offset += size
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_build_positional_builds_every_kind():
    expected = {"sinusoidal": SinusoidalPositional, "learned": LearnedPositional, "relative": RelativePositional,
                "relative_cp": RelativeContentPosition, "t5": T5RelativeBias, "rope": RotaryPositional,
                "alibi": ALiBiPositional, "none": NoPositional}
    assert set(expected) == set(POSITIONAL_KINDS)
    for kind, cls in expected.items():
        assert type(make(kind)) is cls


def test_build_positional_rejects_unknown_kind_listing_valid_ones():
    with pytest.raises(ValueError, match="rotary") as error:
        build_positional("rotary", d_model=D, n_heads=H, max_len=8, causal=True)
    assert all(kind in str(error.value) for kind in POSITIONAL_KINDS)
