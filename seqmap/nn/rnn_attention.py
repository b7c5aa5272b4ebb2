"""Attention for RNN decoders: Luong dot / general / concat and Bahdanau additive.

A decoder query q attends over encoder states k (which are also the values):

    dot       (Luong et al. 2015)    score(q, k) = q . k                 (needs Dq == Dk)
    general   (Luong, "bilinear")    score(q, k) = q W k
    concat    (Luong et al. 2015)    score(q, k) = v . tanh(W [q; k])
    additive  (Bahdanau et al. 2015) score(q, k) = v . tanh(W_q q + W_k k)

    weights = softmax(scores) over the source, context = weights @ k

The maths lives in pure functions (``*_scores`` and ``attend``); the modules own
only the parameters. Every module returns ``(context, weights)`` in one shape,
like the multi-head attention of the Transformer:

    query (B, T, Dq) -> context (B, T, Dk), weights (B, T, S)
    query (B, Dq)    -> context (B, Dk),    weights (B, S)      (one decoder step)

The key side of a score does not change while a source is decoded, so each
module splits its work in two: ``precompute(keys)`` once per source (W k for
general, W_k k for concat and additive), and ``forward(query, keys, mask,
projected)`` per step, which reuses ``projected`` when it is given.

Masks follow the package convention: boolean (B, S), True = real source token.
Masked keys get exactly zero weight; a fully masked row gets zero weights and a
zero context, never NaN (the same rule as ``seqmap.nn.attention``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqmap.nn.attention import masked_softmax


def attend(scores: Tensor, values: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Mask, softmax over the source and mix the values.

    Args:
        scores: (B, T, S) unnormalised scores.
        values: (B, S, Dv).
        mask: (B, S) or (B, T, S) boolean, True at keys that may be attended.

    Returns:
        (context (B, T, Dv), weights (B, T, S)).
    """
    if mask is not None and mask.dim() == 2:
        mask = mask[:, None, :]  # (B, 1, S)
    weights = masked_softmax(scores, mask)  # a row with no real key gets zero weights, never NaN
    return torch.matmul(weights, values), weights


def dot_scores(query: Tensor, keys: Tensor) -> Tensor:
    """Luong dot: query (B, T, D) . keys (B, S, D) -> (B, T, S)."""
    if query.size(-1) != keys.size(-1):
        raise ValueError(
            f"dot attention needs queries and keys of one width, got {query.size(-1)} and {keys.size(-1)}; "
            "use general, concat or additive (bahdanau) attention, or make the widths equal"
        )
    return torch.matmul(query, keys.transpose(-2, -1))


def general_scores(query: Tensor, keys: Tensor, weight: Tensor) -> Tensor:
    """Luong general (bilinear): q W k. query (B, T, Dq), keys (B, S, Dk), weight (Dq, Dk) -> (B, T, S)."""
    return torch.matmul(torch.matmul(query, weight), keys.transpose(-2, -1))


def additive_scores(query_proj: Tensor, keys_proj: Tensor, v: Tensor) -> Tensor:
    """v . tanh(q' + k') for already projected queries (B, T, Da) and keys (B, S, Da); v (Da,) -> (B, T, S)."""
    return torch.matmul(torch.tanh(query_proj[:, :, None, :] + keys_proj[:, None, :, :]), v)


def concat_scores(query: Tensor, keys: Tensor, weight: Tensor, v: Tensor) -> Tensor:
    """Luong concat, written literally: v . tanh(W [q; k]).

    query (B, T, Dq), keys (B, S, Dk), weight (Da, Dq + Dk), v (Da,) -> (B, T, S).
    This builds every (query, key) pair; ``ConcatAttention`` computes the same
    scores by splitting W = [W_q W_k] and projecting the keys once per source.
    """
    t, s = query.size(1), keys.size(1)
    pairs = torch.cat([query[:, :, None, :].expand(-1, -1, s, -1), keys[:, None, :, :].expand(-1, t, -1, -1)],
                      dim=-1)  # (B, T, S, Dq + Dk)
    return torch.matmul(torch.tanh(torch.matmul(pairs, weight.t())), v)


class RNNAttention(nn.Module):
    """Shared calling convention: subclasses define ``precompute`` (keys side) and ``score``."""

    def precompute(self, keys: Tensor) -> Tensor:
        """The part of the score that depends only on the source: (B, S, Dk) -> (B, S, *)."""
        raise NotImplementedError

    def score(self, query: Tensor, projected: Tensor) -> Tensor:
        """query (B, T, Dq), precomputed keys -> scores (B, T, S)."""
        raise NotImplementedError

    def forward(self, query: Tensor, keys: Tensor, mask: Tensor | None = None,
                projected: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """query (B, T, Dq) or (B, Dq), keys (B, S, Dk) also used as values, mask (B, S) True at real tokens.

        ``projected`` is ``self.precompute(keys)`` from an earlier step of the same
        source; it is computed here when not given.

        Returns (context (B, T, Dk), weights (B, T, S)), or (B, Dk), (B, S) for a (B, Dq) query.
        """
        single = query.dim() == 2
        q = query[:, None, :] if single else query
        projected = self.precompute(keys) if projected is None else projected
        context, weights = attend(self.score(q, projected), keys, mask)
        return (context[:, 0], weights[:, 0]) if single else (context, weights)


class DotAttention(RNNAttention):
    """Luong dot attention; no parameters. The query and key widths must be equal."""

    def __init__(self, query_size: int, key_size: int):
        super().__init__()
        if query_size != key_size:
            raise ValueError(
                f"dot attention needs the decoder query width ({query_size}) to equal the encoder state width "
                f"({key_size}); use general, concat or additive (bahdanau) attention instead"
            )

    def precompute(self, keys: Tensor) -> Tensor:
        return keys

    def score(self, query: Tensor, projected: Tensor) -> Tensor:
        return dot_scores(query, projected)


class GeneralAttention(RNNAttention):
    """Luong general (bilinear) attention q W k; ``precompute`` keeps W k, so a step is one dot product."""

    def __init__(self, query_size: int, key_size: int):
        super().__init__()
        self.key_proj = nn.Linear(key_size, query_size, bias=False)  # weight (Dq, Dk) is W

    @property
    def weight(self) -> Tensor:
        """W (Dq, Dk) of q W k."""
        return self.key_proj.weight

    def precompute(self, keys: Tensor) -> Tensor:
        return self.key_proj(keys)  # (B, S, Dq) = W k

    def score(self, query: Tensor, projected: Tensor) -> Tensor:
        return dot_scores(query, projected)


class ConcatAttention(RNNAttention):
    """Luong concat attention v . tanh(W [q; k]); W = [W_q W_k] so the key part is precomputed."""

    def __init__(self, query_size: int, key_size: int, attention_size: int):
        super().__init__()
        self.query_size = query_size
        self.proj = nn.Linear(query_size + key_size, attention_size, bias=False)  # W (Da, Dq + Dk)
        self.v = nn.Linear(attention_size, 1, bias=False)

    def precompute(self, keys: Tensor) -> Tensor:
        return torch.matmul(keys, self.proj.weight[:, self.query_size:].t())  # (B, S, Da) = W_k k

    def score(self, query: Tensor, projected: Tensor) -> Tensor:
        query_proj = torch.matmul(query, self.proj.weight[:, : self.query_size].t())  # (B, T, Da) = W_q q
        return additive_scores(query_proj, projected, self.v.weight[0])


class AdditiveAttention(RNNAttention):
    """Bahdanau additive attention v . tanh(W_q q + W_k k); ``precompute`` keeps W_k k."""

    def __init__(self, query_size: int, key_size: int, attention_size: int):
        super().__init__()
        self.query_proj = nn.Linear(query_size, attention_size, bias=False)
        self.key_proj = nn.Linear(key_size, attention_size, bias=False)
        self.v = nn.Linear(attention_size, 1, bias=False)

    def precompute(self, keys: Tensor) -> Tensor:
        return self.key_proj(keys)  # (B, S, Da)

    def score(self, query: Tensor, projected: Tensor) -> Tensor:
        return additive_scores(self.query_proj(query), projected, self.v.weight[0])
