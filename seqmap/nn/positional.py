"""Positional encodings: how a Transformer knows where a token is.

Every scheme implements the same five hooks, so attention and the layer stacks
never ask which scheme they hold:

- ``embed(x, offset, positions=None)``: absolute schemes add a vector to the token
  embeddings (sinusoidal, learned); ``offset`` is the position of x's first token,
  or ``positions`` (B, T) gives every row its own positions.
- ``rotate(x, pos)``: rotary (RoPE) rotates queries and keys (B, H, T, Dh) at
  positions (T,), or (B, T) per row.
- ``score_bias(q, k, q_pos, k_pos)``: relative schemes add a bias to the scaled
  scores, broadcastable to (B, H, T, S) (ALiBi, T5 buckets, Shaw keys); k (B, Hkv, S, Dh)
  are the keys scored, for a term that reads them (content-position terms).
- ``value_score_bias(q, v, q_pos, k_pos)``: the bias of a second softmax that
  scores the queries against the values v, whose output attention averages with
  the first's (content-position terms); None for every other scheme.
- ``value_term(weights, q_pos, k_pos)``: Shaw et al.'s relative values,
  added to the attention output (B, H, T, Dh); needs the weights.

Positions are absolute integer positions, (T,) for queries and (S,) for keys.
Rows of a batch that sit at different positions (prompts of unequal length, left
padded) give per-row positions (B, T) to ``embed`` and ``rotate``; the relative
hooks need none, as they see only differences, which padding on the left does
not change. Hooks are applied in self-attention only; cross-attention has no
positions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class PositionalEncoding(nn.Module):
    """Base class: every hook does nothing. Subclasses override what they use."""

    needs_weights: bool = False  # True if value_term needs the attention weights
    in_attention: bool = False  # True if rotate or score_bias act inside attention (else attention skips them)

    def embed(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        return x

    def rotate(self, x: Tensor, pos: Tensor) -> Tensor:
        return x

    def score_bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        return None

    def value_score_bias(self, q: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        return None

    def value_term(self, weights: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        return None


class NoPositional(PositionalEncoding):
    """No position information at all (a bag of tokens; causal LMs still learn some)."""


SINUSOIDAL_LAYOUTS = ("interleaved", "split")


def sinusoidal_table(length: int, d_model: int, base: float = 10000.0, layout: str = "interleaved") -> Tensor:
    """(length, D) table of sines and cosines at the frequencies w_i = base^(-2i/D), 0 <= i < D/2.

    ``interleaved`` (Vaswani et al. 2017): PE(pos, 2i) = sin(pos w_i), PE(pos, 2i+1) = cos(pos w_i).
    ``split`` (the layout of tensor2tensor, fairseq and Marian): the sines fill the first half of
    the dimensions and the cosines the second, PE(pos, i) = sin(pos w_i), PE(pos, D/2 + i) =
    cos(pos w_i). The two are the same columns in another order. ``split`` equals Hugging Face's
    ``MarianMTModel`` table; fairseq and tensor2tensor also space their frequencies differently
    (w_i = base^(-i/(D/2 - 1))), so they match it in layout only.
    """
    if layout not in SINUSOIDAL_LAYOUTS:
        raise ValueError(f"unknown sinusoidal layout {layout!r}; choose one of {', '.join(SINUSOIDAL_LAYOUTS)}")
    pos = torch.arange(length, dtype=torch.float64)[:, None]  # float64 angles: exact at large positions
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)[:, : d_model // 2]
    if layout == "split":  # odd D: ceil(D/2) sines, then floor(D/2) cosines
        table = torch.cat((table[:, 0::2], table[:, 1::2]), dim=1)
    return table.float()


class SinusoidalPositional(PositionalEncoding):
    """Vaswani et al. (2017): fixed sines and cosines added to the embeddings.

    The table is cached up to ``max_len`` and rebuilt larger on demand, so any
    length works (extrapolation past the training length never errors). ``layout``
    orders its columns, see ``sinusoidal_table``.
    """

    def __init__(self, d_model: int, max_len: int = 1024, layout: str = "interleaved"):
        super().__init__()
        self.d_model, self.layout = d_model, layout
        self.register_buffer("table", sinusoidal_table(max_len, d_model, layout=layout), persistent=False)

    def embed(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """x (B, T, D) + the rows of positions offset.. (or of ``positions`` (B, T), one row each)."""
        end = offset + x.size(1) if positions is None else int(positions.max()) + 1
        if end > self.table.size(0):
            length = max(end, 2 * self.table.size(0))
            with torch.inference_mode(False):  # kept for training too (seqmap.decoding.inference)
                self.table = sinusoidal_table(length, self.d_model, layout=self.layout).to(self.table.device)
        table = self.table[offset:end] if positions is None else self.table[positions]  # (T, D) or (B, T, D)
        return x + table.to(x.dtype)


_INIT_STD = 0.02  # learned tables start small, so a fresh model is nearly position-agnostic


class LearnedPositional(PositionalEncoding):
    """Learned absolute positions (Gehring et al. 2017; Vaswani et al. 2017, section 3.5).

        embed(x)_t = x_t + P[offset + t],   P a trained (max_len, D) table

    There is no row for a position at or past ``max_len``: such inputs raise
    instead of silently reusing rows (use a scheme that extrapolates).
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.table.weight, std=_INIT_STD)

    def embed(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """x (B, T, D) + the rows of positions offset.. (or of ``positions`` (B, T), one row each)."""
        end = offset + x.size(1) if positions is None else int(positions.max()) + 1
        if end > self.max_len:
            raise ValueError(
                f"learned positions stop at model.max_len={self.max_len}, but position {end - 1} was asked for; "
                "raise model.max_len or choose a positional scheme that extrapolates "
                "(sinusoidal, rope, alibi, t5, relative, relative_cp)"
            )
        pos = torch.arange(offset, end, device=x.device) if positions is None else positions
        return x + self.table(pos).to(x.dtype)


def relative_offsets(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """(T, S) offsets j - i of key position j from query position i (positive: the key is later)."""
    return k_pos[None, :] - q_pos[:, None]


def clipped_rows(q_pos: Tensor, k_pos: Tensor, clip: int) -> Tensor:
    """(T, S) table row of each offset j - i clipped to [-clip, clip]: the row in [0, 2 clip]."""
    return relative_offsets(q_pos, k_pos).clamp(-clip, clip) + clip


class RelativePositional(PositionalEncoding):
    """Shaw et al. (2018), "Self-Attention with Relative Position Representations".

    The offset of key j from query i is clipped, r = clip(j - i, -k, k), and picks
    learned vectors a^K_r and a^V_r of width Dh, shared by all heads and layers:

        e_ij = q_i . (k_j + a^K_r) / sqrt(Dh)  ->  score_bias = q_i . a^K_r / sqrt(Dh)
        z_i  = sum_j w_ij (v_j + a^V_r)        ->  value_term = sum_j w_ij a^V_r  (if ``values``)

    Only 2k + 1 vectors exist, so any length works. The bias is q @ A^K (B, H, T, 2k+1)
    gathered to (B, H, T, S); the value term sums the weights into the 2k + 1 offsets
    first, then takes one product with A^V, so no (T, S, Dh) tensor is ever built.
    """

    in_attention = True

    def __init__(self, head_dim: int, clip: int = 16, values: bool = False):
        super().__init__()
        if clip < 0:
            raise ValueError(f"relative_clip={clip} must be >= 0 (offsets are clipped to [-clip, clip])")
        self.clip = clip
        self.key_table = nn.Embedding(2 * clip + 1, head_dim)
        self.value_table = nn.Embedding(2 * clip + 1, head_dim) if values else None
        for table in (self.key_table, self.value_table):
            if table is not None:
                nn.init.normal_(table.weight, std=_INIT_STD)
        self.needs_weights = values

    def score_bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        per_offset = torch.matmul(q, self.key_table.weight.to(q.dtype).t()) * q.size(-1) ** -0.5  # (B, H, T, 2k+1)
        index = clipped_rows(q_pos, k_pos, self.clip).expand(q.size(0), q.size(1), -1, -1)  # (B, H, T, S)
        return per_offset.gather(-1, index)

    def value_term(self, weights: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        if self.value_table is None:
            return None
        index = clipped_rows(q_pos, k_pos, self.clip).expand_as(weights)  # (B, H, T, S)
        per_offset = weights.new_zeros(*weights.shape[:-1], 2 * self.clip + 1).scatter_add(-1, index, weights)
        return torch.matmul(per_offset, self.value_table.weight.to(weights.dtype))  # (B, H, T, Dh)


class _ContentPositionTerms(nn.Module):
    """One side's learned u, v (2c+1, H, Dh) and b (2c+1, H), a row per clipped offset and head, and the
    terms they add to that side's logit: q_i . u_r + v_r . k_j + b_r (k_j the keys, or the values)."""

    def __init__(self, offsets: int, n_heads: int, head_dim: int):
        super().__init__()
        self.u = nn.Parameter(torch.randn(offsets, n_heads, head_dim) * _INIT_STD)
        self.v = nn.Parameter(torch.randn(offsets, n_heads, head_dim) * _INIT_STD)
        self.b = nn.Parameter(torch.randn(offsets, n_heads) * _INIT_STD)

    def forward(self, q: Tensor, k: Tensor, index: Tensor) -> Tensor:
        """q (B, H, T, Dh), k (B, Hkv, S, Dh), index (T, S) rows in [0, 2c] -> the unscaled terms (B, H, T, S)."""
        batch, heads = q.size(0), q.size(1)
        k = k.repeat_interleave(heads // k.size(1), dim=1)  # (B, H, S, Dh): a grouped key head serves its queries
        rows = index.expand(batch, heads, -1, -1)  # (B, H, T, S)
        query_term = torch.einsum("bhtd,rhd->bhtr", q, self.u.to(q.dtype)).gather(-1, rows)  # q_i . u_r
        key_term = torch.einsum("bhsd,rhd->bhrs", k, self.v.to(q.dtype)).gather(-2, rows)  # v_r . k_j
        return query_term + key_term + self.b.to(q.dtype)[index].permute(2, 0, 1)  # + b_r, (H, T, S)


class RelativeContentPosition(PositionalEncoding):
    """Relative attention with content-position terms, on the key side and on the value side:

        a^K_ij = x_i^T W_Q^T W_K x_j + x_i^T W_Q^T u^K + v^K^T W_K x_j + b^K
        a^V_ij = x_i^T W_Q^T W_V x_j + x_i^T W_Q^T u^V + v^V^T W_V x_j + b^V

    In the code, per head: q_i = W_Q x_i, k_j = W_K x_j and v_j = W_V x_j are the layer's projections
    (their biases included); u, v (Dh,) and b (a scalar) are the rows of learned tables at the clipped
    offset r = clip(j - i, -c, c), c = ``relative_clip`` (``key_terms`` for the K side, ``value_terms``
    for the V side), one row per head, so the scheme is relative, not a global bias. Only 2c + 1 rows
    exist, so any length works; as Shaw's, the tables are shared by the layers of a stack. Both logits
    are scaled by 1/sqrt(Dh), as attention scales q . k:

        a^K_ij = q_i . k_j + q_i . u^K_r + v^K_r . k_j + b^K_r    q . k: attention; the rest: score_bias
        a^V_ij = q_i . v_j + q_i . u^V_r + v^V_r . v_j + b^V_r    q . v: attention; the rest: value_score_bias

    a^V is a scalar per pair built as a^K is, with W_V x_j in place of W_K x_j: a score, not a vector to
    add to a value. So it is read as the logit of a second softmax over the same allowed keys, and the
    output mixes the values with the mean of the two distributions (the weights returned):

        z_i = sum_j (softmax_j(a^K_i.) + softmax_j(a^V_i.)) / 2 * v_j

    A mean of two softmaxes is again an attention: masked keys get exactly zero weight, and z_i is a
    convex mix of the values whatever the number of keys.
    """

    in_attention = True

    def __init__(self, n_heads: int, head_dim: int, clip: int = 16):
        super().__init__()
        if clip < 0:
            raise ValueError(f"relative_clip={clip} must be >= 0 (offsets are clipped to [-clip, clip])")
        self.clip = clip
        self.key_terms = _ContentPositionTerms(2 * clip + 1, n_heads, head_dim)
        self.value_terms = _ContentPositionTerms(2 * clip + 1, n_heads, head_dim)

    def score_bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.key_terms(q, k, clipped_rows(q_pos, k_pos, self.clip)) * q.size(-1) ** -0.5

    def value_score_bias(self, q: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.value_terms(q, v, clipped_rows(q_pos, k_pos, self.clip)) * q.size(-1) ** -0.5


def t5_buckets(offset: Tensor, num_buckets: int, max_distance: int, bidirectional: bool) -> Tensor:
    """Bucket in [0, num_buckets) of each key-minus-query offset j - i (Raffel et al. 2020, section 2.1).

    Bidirectional: keys at or before the query use buckets [0, n/2), keys after it
    [n/2, n) (bucket n/2 itself stays unused, as in T5). Unidirectional: every key
    at or after the query falls in bucket 0 (a causal stack never attends to later
    keys), earlier keys use all n buckets.
    Within a side of b buckets, distances below b/2 get a bucket each; larger
    distances share buckets whose width grows logarithmically up to ``max_distance``;
    anything farther shares the last bucket.
    """
    if bidirectional:
        num_buckets //= 2
        side = (offset > 0).long() * num_buckets
        distance = offset.abs()
    else:
        side = torch.zeros_like(offset)
        distance = (-offset).clamp(min=0)
    exact = num_buckets // 2
    log_ratio = torch.log(distance.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
    far = (exact + (log_ratio * (num_buckets - exact)).long()).clamp(max=num_buckets - 1)
    return side + torch.where(distance < exact, distance, far)


class T5RelativeBias(PositionalEncoding):
    """Raffel et al. (2020), T5: a learned scalar bias per head and relative-offset bucket.

        score_bias[h, i, j] = b[bucket(j - i), h],   b a trained (num_buckets, H) table

    added to the scaled scores (see ``t5_buckets``). One table serves every layer
    of the stack, as in T5. Bidirectional for an encoder, unidirectional for a
    causal stack.
    """

    in_attention = True

    def __init__(self, n_heads: int, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True):
        super().__init__()
        side = num_buckets // 2 if bidirectional else num_buckets
        if side < 2:
            raise ValueError(f"t5_buckets={num_buckets} is too small; use at least {4 if bidirectional else 2}")
        if max_distance <= side // 2:
            raise ValueError(f"t5_max_distance={max_distance} must exceed the {side // 2} exact buckets; raise it")
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        self.table = nn.Embedding(num_buckets, n_heads)
        nn.init.normal_(self.table.weight, std=_INIT_STD)

    def score_bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        buckets = t5_buckets(relative_offsets(q_pos, k_pos), self.num_buckets, self.max_distance, self.bidirectional)
        return self.table(buckets).permute(2, 0, 1).unsqueeze(0).to(q.dtype)  # (1, H, T, S)


class RotaryPositional(PositionalEncoding):
    """Su et al. (2021), RoFormer: rotary position embedding (RoPE).

    Each pair of head dims of a query or key at position p is rotated by p * theta_i,
    theta_i = base^(-2i/Dh), so q_m . k_n depends on the offset m - n only.
    Half-split convention (``rotate_half``): dim i pairs with dim i + Dh/2, i < Dh/2:

        (x_i, x_{i+Dh/2}) -> (x_i cos - x_{i+Dh/2} sin,  x_{i+Dh/2} cos + x_i sin)

    The paper pairs adjacent dims (2i, 2i+1); the two conventions differ by a fixed
    permutation of the head dims, which the projections absorb. Cos/sin tables are
    cached up to ``max_len`` and rebuilt larger on demand, so any length works.
    """

    in_attention = True

    def __init__(self, head_dim: int, max_len: int = 1024, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rope needs an even head width d_model / n_heads, got {head_dim}")
        if not base > 1:  # base <= 0 gives NaN angles (which attention turned into wrong finite outputs), base 1 one
            # frequency for every pair, base < 1 frequencies above 1 rad per position
            raise ValueError(f"rope_base={base} must be > 1 (10000 in the paper)")
        self.head_dim, self.base = head_dim, base
        cos, sin = self._tables(max_len)
        self.register_buffer("cos", cos, persistent=False)  # (L, Dh)
        self.register_buffer("sin", sin, persistent=False)

    def _tables(self, length: int) -> tuple[Tensor, Tensor]:
        inv_freq = self.base ** (-torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim)
        angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq  # (L, Dh/2), float64: exact far out
        angles = torch.cat((angles, angles), dim=-1)  # (L, Dh): dims i and i + Dh/2 share an angle
        return angles.cos().float(), angles.sin().float()

    def rotate(self, x: Tensor, pos: Tensor) -> Tensor:
        """x (B, h, T, Dh) at positions pos (T,), or (B, T) one row each -> rotated x, same shape."""
        if pos.numel() and int(pos.max()) >= self.cos.size(0):
            with torch.inference_mode(False):  # kept for training too (seqmap.decoding.inference)
                cos, sin = self._tables(max(int(pos.max()) + 1, 2 * self.cos.size(0)))
                self.cos, self.sin = cos.to(self.cos.device), sin.to(self.sin.device)
        cos, sin = self.cos[pos].to(x.dtype), self.sin[pos].to(x.dtype)  # (T, Dh) or (B, T, Dh)
        if pos.dim() == 2:
            cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, Dh): one angle per row, shared by the heads
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def alibi_slopes(n_heads: int) -> Tensor:
    """(H,) head slopes of Press et al. (2022), section 3.

    For H a power of two: the geometric sequence 2^(-8/H), 2^(-16/H), ..., 2^-8.
    Otherwise: the slopes of the closest smaller power of two P, then every other
    slope of 2P (its odd-numbered ones, which fall between P's), until H are taken.
    """

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    closest = 2 ** math.floor(math.log2(n_heads))
    return torch.tensor(geometric(closest) + geometric(2 * closest)[0::2][: n_heads - closest])


class ALiBiPositional(PositionalEncoding):
    """Press et al. (2022), "Train Short, Test Long": attention with linear biases (ALiBi).

        score_bias[h, i, j] = -m_h * |i - j|,   m_h from ``alibi_slopes``

    Nothing is learned and no vector is added to the embeddings. In a causal stack
    only j <= i is ever attended, which is the paper's -m_h (i - j); in a
    bidirectional stack the penalty is symmetric in the distance.
    """

    in_attention = True

    def __init__(self, n_heads: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)  # (H,)

    def score_bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = relative_offsets(q_pos, k_pos).abs().to(self.slopes.dtype)  # (T, S)
        return (-self.slopes[:, None, None] * distance).unsqueeze(0).to(q.dtype)  # (1, H, T, S)


POSITIONAL_KINDS = ("sinusoidal", "learned", "relative", "relative_cp", "t5", "rope", "alibi", "none")


def build_positional(
    kind: str,
    *,
    d_model: int,
    n_heads: int,
    max_len: int,
    causal: bool,
    relative_clip: int = 16,
    relative_values: bool = False,
    t5_buckets: int = 32,
    t5_max_distance: int = 128,
    rope_base: float = 10000.0,
    sinusoidal_layout: str = "interleaved",
) -> PositionalEncoding:
    """One positional scheme for one layer stack (encoder or decoder), shared by its layers.

    ``causal`` tells a directional scheme (T5 buckets) whether it serves a causal
    stack. ``max_len`` bounds learned positions and sizes the first cached tables of
    the others, which grow on demand. ``sinusoidal_layout`` orders the sinusoidal
    table's columns (``SINUSOIDAL_LAYOUTS``). Valid kinds: see ``POSITIONAL_KINDS``.
    """
    if d_model % n_heads and kind in ("relative", "relative_cp", "rope"):  # the others never read a head's width
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    head_dim = d_model // n_heads
    if kind == "sinusoidal":
        return SinusoidalPositional(d_model, max_len, layout=sinusoidal_layout)
    if kind == "learned":
        return LearnedPositional(max_len, d_model)
    if kind == "relative":
        return RelativePositional(head_dim, relative_clip, values=relative_values)
    if kind == "relative_cp":
        return RelativeContentPosition(n_heads, head_dim, relative_clip)
    if kind == "t5":
        return T5RelativeBias(n_heads, t5_buckets, t5_max_distance, bidirectional=not causal)
    if kind == "rope":
        return RotaryPositional(head_dim, max_len, base=rope_base)
    if kind == "alibi":
        return ALiBiPositional(n_heads)
    if kind == "none":
        return NoPositional()
    raise ValueError(f"unknown positional encoding {kind!r}; choose one of {', '.join(POSITIONAL_KINDS)}")
