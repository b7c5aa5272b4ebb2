"""Scaled dot-product attention as a pure function, and the masks it consumes.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(Dh) + bias) V

Masks follow the package convention: boolean, True = may attend. A query whose
row is all False gets zero weights and a zero output (never NaN).

Two paths compute the same thing:
- the explicit path (matmul, softmax, matmul) is the readable reference and the
  only one that returns the weights;
- the fast path calls ``torch.nn.functional.scaled_dot_product_attention``
  (fused kernels, no T x S weight matrix kept for backward when it can avoid it).

At inference on the CPU, a few queries (T <= ``FEW_QUERIES``: decoding steps, beams
as queries) over many rows (B H >= ``MANY_ROWS``: a batch of sentences) take the
explicit path too. PyTorch's fused CPU kernel is tuned for long query blocks: it is the slower
one for a few queries over many rows, and the faster one for a single sentence or long query
blocks (docs/benchmarks.md "Decoding").
``tests/nn/test_attention.py`` checks that the two agree.

``shared_prefix_attention`` is the explicit path for beams: the k beams of a sentence
share most of their history, so the keys and values of the common prefix are kept once
per sentence and read once, with the k beams' queries together (as cross-attention reads
one copy of the source), and only each beam's own last slots are read per beam.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import Tensor

CUDNN_ATTENTION_VARIABLE = "SEQMAP_CUDNN_ATTENTION"  # 1: cuDNN attention stays in torch's order (avoid_cudnn_attention)
SHARED_PREFIX_MIN = 8  # beams attend to a common prefix once per sentence from this many shared slots on
FEW_QUERIES = 32  # up to this many queries per row over at least MANY_ROWS (batch x heads) rows,
MANY_ROWS = 128  # the CPU takes the explicit path (module docstring)
SCALAR_BMM_BELOW = 400  # ATen's bmm on the CPU: products of fewer multiply-adds take its scalar loop (mix_values)


def avoid_cudnn_attention() -> None:
    """Take cuDNN's kernel out of those ``F.scaled_dot_product_attention`` chooses from (process-wide).

    torch 2.11 and later try cuDNN's attention first on Hopper and Blackwell GPUs (cuDNN 9.15 or newer) for
    16-bit tensors, and cuDNN builds an execution plan, which takes long, for every new shape (batch, query
    and key lengths). seqmap's shapes keep changing: token-budget batches, and a decode step's keys grow by
    one each step, so 16-bit decoding and a first epoch under autocast (every batch a new shape) would spend
    their time building plans (docs/benchmarks.md). FlashAttention and the memory-efficient kernels build no
    plans. Called where seqmap puts a model on a GPU (``Trainer``, ``seqmap.runs.run_device``);
    ``torch.backends.cuda.enable_cudnn_sdp(True)`` undoes it, and ``SEQMAP_CUDNN_ATTENTION=1`` in the
    environment keeps torch's own order (to compare).
    """
    if os.environ.get(CUDNN_ATTENTION_VARIABLE, "") not in ("1", "true", "yes"):
        torch.backends.cuda.enable_cudnn_sdp(False)


def causal_mask(t: int, s: int | None = None, device: torch.device | None = None) -> Tensor:
    """(T, S) boolean mask, True where query i may attend key j.

    Queries are aligned to the *end* of the keys: with a cache of S - T earlier
    keys, query i sits at absolute position S - T + i and may attend keys
    0 .. S - T + i. With S == T this is the usual lower-triangular mask.
    """
    s = t if s is None else s
    q_pos = torch.arange(s - t, s, device=device)
    k_pos = torch.arange(s, device=device)
    return k_pos[None, :] <= q_pos[:, None]


def padding_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """(B, S) boolean mask from lengths, True at real tokens."""
    max_len = int(lengths.max()) if max_len is None else max_len
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def key_mask(mask: Tensor) -> Tensor:
    """(B, S) padding mask -> (B, 1, 1, S), broadcastable over heads and queries."""
    return mask[:, None, None, :]


def _combined_mask(mask: Tensor | None, causal: bool, t: int, s: int, device) -> Tensor | None:
    if causal and t > 1:
        c = causal_mask(t, s, device=device)
        mask = c if mask is None else mask & c
    return mask


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    *,
    causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    scale: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Attend queries to keys and mix values.

    Args:
        q: (B, H, T, Dh) queries.
        k: (B, Hkv, S, Dh) keys; Hkv divides H (grouped-query attention shares
           each key/value head among H // Hkv query heads).
        v: (B, Hkv, S, Dv) values.
        mask: boolean, broadcastable to (B, H, T, S), True = may attend.
        bias: float, broadcastable to (B, H, T, S), added to the scaled scores
           (ALiBi, relative position biases).
        causal: also forbid keys after each query (queries aligned to the end of
           the keys, see ``causal_mask``).
        dropout_p: dropout on the weights (pass 0.0 at evaluation).
        need_weights: return the (B, H, T, S) weights; forces the explicit path.
        scale: score scale, default 1 / sqrt(Dh).

    Returns:
        (output (B, H, T, Dv), weights (B, H, T, S) or None). Returned weights are
        taken before dropout.
    """
    t, s = q.size(-2), k.size(-2)
    scale = q.size(-1) ** -0.5 if scale is None else scale
    few_queries = (t <= FEW_QUERIES and q.size(0) * q.size(1) >= MANY_ROWS and q.device.type == "cpu"
                   and not (torch.is_grad_enabled() and q.requires_grad))  # inference only: training keeps the kernel
    if need_weights or few_queries:
        out, weights = _explicit(q, k, v, _combined_mask(mask, causal, t, s, q.device), bias, dropout_p, scale)
        return out, weights if need_weights else None
    return _fused(q, k, v, mask, bias, causal, dropout_p, scale), None


def _repeat_kv(x: Tensor, groups: int) -> Tensor:
    """(B, Hkv, S, Dh) -> (B, Hkv * groups, S, Dh): each key/value head serves `groups` query heads."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Softmax over the last axis of ``scores`` where ``mask`` is True (broadcast); the one used by every attention.

    A row with no allowed key would be softmax([-inf, ...]) = NaN. Such rows see every key
    (finite softmax, finite gradients) and are then zeroed, so their output is exactly 0.
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    has_key = mask.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~(mask | ~has_key), float("-inf"))
    return torch.softmax(scores, dim=-1) * has_key


def mix_values(weights: Tensor, v: Tensor) -> Tensor:
    """``weights @ v``: (..., T, S) attention weights times (..., S, Dv) values -> (..., T, Dv).

    On the CPU PyTorch multiplies batches of matrices smaller than ``SCALAR_BMM_BELOW`` multiply-adds
    (T S Dv) with a scalar loop instead of MKL: one decoding query over at most 12 keys of 32 dimensions
    (the first steps of every self-attention cache, the short sources of a test set). There its loop
    reads the values column by column and is slower than multiplying elementwise and summing over S,
    which is what this does for one query per row at inference.
    """
    t, s, dv = weights.size(-2), weights.size(-1), v.size(-1)
    if (t == 1 and s * dv < SCALAR_BMM_BELOW and weights.device.type == "cpu"
            and not (torch.is_grad_enabled() and (weights.requires_grad or v.requires_grad))):
        return (weights.transpose(-2, -1) * v).sum(dim=-2, keepdim=True)
    return torch.matmul(weights, v)


def _explicit(q, k, v, mask, bias, dropout_p, scale):
    groups = q.size(1) // k.size(1)
    k, v = _repeat_kv(k, groups), _repeat_kv(v, groups)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, T, S)
    if bias is not None:
        scores = scores + bias
    weights = masked_softmax(scores, mask)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return mix_values(dropped, v), weights


def _fused(q, k, v, mask, bias, causal, dropout_p, scale):
    t, s = q.size(-2), k.size(-2)
    # PyTorch's is_causal aligns queries to the *start* of the keys; use it only
    # where that coincides with our end-aligned causality (T == S, no other mask).
    is_causal = causal and t == s and t > 1 and mask is None and bias is None
    mask = None if is_causal else _combined_mask(mask, causal, t, s, q.device)
    has_key = None
    if mask is not None:
        has_key = mask.any(dim=-1, keepdim=True)
        mask = mask | ~has_key  # see _explicit: fully masked rows are zeroed below
        if bias is not None:
            attn_mask = bias.masked_fill(~mask, float("-inf"))
        else:
            attn_mask = mask
    else:
        attn_mask = bias
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.to(q.dtype)
    out = F.scaled_dot_product_attention(
        q, k, v,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=q.size(1) != k.size(1),
    )
    if has_key is not None:
        out = out * has_key.to(out.dtype)
    return out


def shared_prefix_attention(q: Tensor, prefix_k: Tensor, prefix_v: Tensor, k: Tensor, v: Tensor, *,
                            scale: float | None = None) -> Tensor:
    """One query per row, for rows in blocks of r whose first P keys and values are the same in the block.

    Args:
        q: (G r, H, 1, Dh) queries; rows [i r, (i + 1) r) form block i (the beams of sentence i).
        prefix_k, prefix_v: (G, H, P, Dh) the keys/values block i's rows share, held once.
        k, v: (G r, H, S - P, Dh) each row's own keys/values after the shared ones.

    Returns the (G r, H, 1, Dv) output: the same as ``scaled_dot_product_attention`` over each row's
    whole history (the prefix repeated r times, then its own keys), to float rounding (the sums
    are split in two). No mask, bias or dropout: a decoding step over a cache.
    """
    groups, heads, shared, _ = prefix_k.shape
    rows = q.size(0)
    r = rows // groups
    scale = q.size(-1) ** -0.5 if scale is None else scale
    block_q = q.view(groups, r, heads, q.size(-1)).transpose(1, 2)  # (G, H, r, Dh): a block's queries together
    on_prefix = torch.matmul(block_q, prefix_k.transpose(-2, -1))  # (G, H, r, P)
    on_prefix = on_prefix.transpose(1, 2).reshape(rows, heads, 1, shared)
    scores = torch.cat([on_prefix, torch.matmul(q, k.transpose(-2, -1))], dim=-1) * scale  # (G r, H, 1, S)
    weights = torch.softmax(scores, dim=-1)
    from_prefix = torch.matmul(weights[..., :shared].reshape(groups, r, heads, shared).transpose(1, 2), prefix_v)
    own = mix_values(weights[..., shared:], v)  # (G r, H, 1, Dv)
    return from_prefix.transpose(1, 2).reshape(own.shape) + own
