"""Graph attention (Velickovic et al. 2018): each node attends to its neighbours, not to every position.

For a destination node i and a neighbour j (an edge j -> i, self-loop included), head h scores

    e_ij = LeakyReLU(a^T [W h_i || W h_j]) = LeakyReLU(a_dst . W h_i + a_src . W h_j)      (slope 0.2)

and mixes its neighbours' projected features with alpha_ij = softmax over j in N(i) of e_ij. Splitting
``a`` into its destination and source halves makes the score a sum of two per-node numbers, so no
(N, N, 2 Dh) tensor is ever built.

Two forms compute the same thing (``tests/nn/test_graph_attention.py`` checks that they agree):

- dense: the scores of every pair, (H, N, N), through ``seqmap.nn.attention.masked_softmax`` (the one
  softmax of every seqmap attention) with the adjacency as its mask: ``mask[i, j]`` True = node i may
  attend node j (there is an edge j -> i). Memory and time grow with N^2; simple and a reference.
- sparse: one score per edge, (E, H), and a softmax over the edges that share a destination
  (:func:`segment_softmax`, scatter max and sum). Memory and time grow with E; the fast form on
  citation graphs, where E is about 4 N.

Edge index convention (PyTorch Geometric's): ``edge_index[0]`` are sources j, ``edge_index[1]``
destinations i; a message flows from source to destination. An undirected edge appears twice.

Shapes: N nodes, E edges, H heads, Dh width of one head, Fin input features.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seqmap.nn.attention import masked_softmax
from seqmap.nn.dropout import dropout


def adjacency_mask(edge_index: Tensor, num_nodes: int) -> Tensor:
    """(N, N) boolean mask from a (2, E) edge index: ``mask[i, j]`` True = node i may attend node j (edge j -> i)."""
    mask = torch.zeros(num_nodes, num_nodes, dtype=torch.bool, device=edge_index.device)
    mask[edge_index[1], edge_index[0]] = True
    return mask


def segment_softmax(scores: Tensor, index: Tensor, num_segments: int) -> Tensor:
    """Softmax of ``scores`` (E, ...) over the rows that share a value of ``index`` (E,): the sparse masked softmax.

    Each segment's maximum is subtracted first (as ``torch.softmax`` does), so large scores do not overflow.
    A segment with no rows simply has no weights; every returned row belongs to a non-empty segment.
    """
    shape = (num_segments, *scores.shape[1:])
    index = index.long()  # gather misreads an expanded int32 index on the CPU (torch 2.13): weights past 1
    idx = index.view(-1, *([1] * (scores.dim() - 1))).expand_as(scores)
    seg_max = scores.new_full(shape, float("-inf")).scatter_reduce(0, idx, scores, "amax", include_self=True)
    exp = (scores - seg_max.gather(0, idx)).exp()
    seg_sum = scores.new_zeros(shape).index_add_(0, index, exp)
    return exp / seg_sum.gather(0, idx)


def edge_scores(h: Tensor, att_src: Tensor, att_dst: Tensor) -> tuple[Tensor, Tensor]:
    """Per-node halves of the additive score: (a_src . W h_j, a_dst . W h_i), each (N, H), from h (N, H, Dh)."""
    return (h * att_src).sum(-1), (h * att_dst).sum(-1)


def dense_graph_attention(
    h: Tensor,
    score_src: Tensor,
    score_dst: Tensor,
    mask: Tensor,
    *,
    negative_slope: float = 0.2,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Graph attention over every pair of nodes, masked by the adjacency.

    Args:
        h: (N, H, Dh) projected node features (the values).
        score_src, score_dst: (N, H) the source and destination halves of the score (:func:`edge_scores`).
        mask: (N, N) boolean, ``mask[i, j]`` True = node i may attend node j.
        negative_slope: of the LeakyReLU on the scores.
        dropout_p: dropout on the attention coefficients (pass 0.0 at evaluation).

    Returns:
        (output (N, H, Dh), weights (H, N, N)); weights are taken before dropout, exactly 0 off the mask.
    """
    scores = F.leaky_relu(score_dst.T[:, :, None] + score_src.T[:, None, :], negative_slope)  # (H, N, N)
    weights = masked_softmax(scores, mask)
    dropped = dropout(weights, dropout_p) if dropout_p > 0 else weights
    out = torch.matmul(dropped, h.transpose(0, 1))  # (H, N, Dh)
    return out.transpose(0, 1), weights


def sparse_graph_attention(
    h: Tensor,
    score_src: Tensor,
    score_dst: Tensor,
    edge_index: Tensor,
    *,
    negative_slope: float = 0.2,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Graph attention edge by edge: one score per edge, softmax over each destination's incoming edges.

    Args:
        h: (N, H, Dh) projected node features (the values).
        score_src, score_dst: (N, H) the source and destination halves of the score (:func:`edge_scores`).
        edge_index: (2, E) int64, row 0 sources, row 1 destinations.
        negative_slope: of the LeakyReLU on the scores.
        dropout_p: dropout on the attention coefficients (pass 0.0 at evaluation).

    Returns:
        (output (N, H, Dh), weights (E, H)); weights are taken before dropout. A node with no incoming
        edge gets a zero output, as in the dense form.
    """
    src, dst = edge_index.long()  # an int32 index reads as int64 would (see segment_softmax)
    scores = F.leaky_relu(score_src[src] + score_dst[dst], negative_slope)  # (E, H)
    weights = segment_softmax(scores, dst, h.size(0))
    dropped = dropout(weights, dropout_p) if dropout_p > 0 else weights
    out = h.new_zeros(h.shape).index_add_(0, dst, dropped[:, :, None] * h[src])  # (N, H, Dh)
    return out, weights


def edge_weights_to_dense(weights: Tensor, edge_index: Tensor, num_nodes: int) -> Tensor:
    """(E, H) per-edge weights -> (H, N, N) with ``out[h, i, j]`` the weight of edge j -> i, 0 elsewhere."""
    out = weights.new_zeros(weights.size(1), num_nodes, num_nodes)
    out[:, edge_index[1], edge_index[0]] = weights.T
    return out


class GraphAttention(nn.Module):
    """One GAT layer: per-head projection, neighbour attention, heads concatenated or averaged.

    The form of the attention follows the form of the graph given to :meth:`forward`: a (2, E) int64
    edge index runs the sparse edge-wise form, an (N, N) boolean mask (True = may attend) the dense one.

    Dropout follows the authors' code (``PetarV-/GAT``, ``layers.py``): ``dropout`` on the layer input and
    on the projected features, ``attn_dropout`` on the attention coefficients.

    Args:
        in_dim: Fin, input features per node.
        head_dim: Dh, output features per head.
        heads: H.
        concat: concatenate heads to H * Dh (hidden layers) or average them to Dh (output layer).
        dropout: on the input and on the projected features.
        attn_dropout: on the attention coefficients.
        negative_slope: of the LeakyReLU on the scores.
    """

    def __init__(
        self,
        in_dim: int,
        head_dim: int,
        heads: int = 1,
        *,
        concat: bool = True,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        negative_slope: float = 0.2,
    ):
        super().__init__()
        for name, p in (("dropout", dropout), ("attn_dropout", attn_dropout)):
            if not 0.0 <= p < 1.0:
                raise ValueError(f"GraphAttention {name} must be in [0, 1), got {p}")
        self.heads, self.head_dim, self.concat = heads, head_dim, concat
        self.dropout, self.attn_dropout, self.negative_slope = dropout, attn_dropout, negative_slope
        self.proj = nn.Linear(in_dim, heads * head_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(heads, head_dim))
        self.att_dst = nn.Parameter(torch.empty(heads, head_dim))
        self.bias = nn.Parameter(torch.zeros(heads * head_dim if concat else head_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot uniform per head, as the authors' one-by-one convolutions (fan-out Dh, not H * Dh)."""
        bound = math.sqrt(6.0 / (self.proj.in_features + self.head_dim))
        nn.init.uniform_(self.proj.weight, -bound, bound)
        bound = math.sqrt(6.0 / (self.head_dim + 1))
        nn.init.uniform_(self.att_src, -bound, bound)
        nn.init.uniform_(self.att_dst, -bound, bound)
        nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, graph: Tensor) -> tuple[Tensor, Tensor]:
        """x (N, Fin) dense or sparse COO, graph (2, E) edge index or (N, N) mask -> (output, weights).

        Output is (N, H * Dh) when concatenating, (N, Dh) when averaging. Weights are (E, H) in the
        sparse form and (H, N, N) in the dense form (see :func:`edge_weights_to_dense`).
        """
        n = x.size(0)
        h = self._project(x).view(n, self.heads, self.head_dim)  # (N, H, Dh)
        score_src, score_dst = edge_scores(h, self.att_src, self.att_dst)
        h = dropout(h, self.dropout, self.training)
        p = self.attn_dropout if self.training else 0.0
        if graph.dtype == torch.bool:
            if graph.shape != (n, n):
                raise ValueError(f"dense graph mask must be (N, N) = ({n}, {n}) for {n} nodes, "
                                 f"got {tuple(graph.shape)}")
            out, weights = dense_graph_attention(
                h, score_src, score_dst, graph, negative_slope=self.negative_slope, dropout_p=p
            )
        else:
            if graph.dim() != 2 or graph.size(0) != 2:
                raise ValueError(f"edge index must be (2, E), got {tuple(graph.shape)}; pass a bool (N, N) mask "
                                 "for the dense form")
            if graph.dtype not in (torch.int64, torch.int32):
                raise TypeError(f"edge index must hold int64 (or int32) node ids, got {graph.dtype}; pass "
                                "edge_index.long(), or a bool (N, N) mask for the dense form")
            out, weights = sparse_graph_attention(
                h, score_src, score_dst, graph, negative_slope=self.negative_slope, dropout_p=p
            )
        out = out.reshape(n, -1) if self.concat else out.mean(dim=1)  # (N, H * Dh) or (N, Dh)
        return out + self.bias, weights

    def _project(self, x: Tensor) -> Tensor:
        """Dropout then W x. A sparse COO ``x`` (bag-of-words features are ~1% non-zero) stays sparse: dropping
        a zero changes nothing, so only its stored values are dropped, and the product costs nnz * H * Dh."""
        if not x.is_sparse:
            return self.proj(dropout(x, self.dropout, self.training))
        x = x.coalesce()
        x = torch.sparse_coo_tensor(x.indices(), dropout(x.values(), self.dropout, self.training), x.shape,
                                    is_coalesced=True, check_invariants=False)
        return torch.sparse.mm(x, self.proj.weight.T)

    def extra_repr(self) -> str:
        return (f"heads={self.heads}, head_dim={self.head_dim}, concat={self.concat}, dropout={self.dropout}, "
                f"attn_dropout={self.attn_dropout}")
