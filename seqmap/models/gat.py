"""Graph attention network (Velickovic et al. 2018) for transductive node classification.

Two :class:`~seqmap.nn.graph_attention.GraphAttention` layers, as in the paper's Cora and CiteSeer
models: H heads of Dh features concatenated, ELU, then one output layer whose heads (1 for Cora and
CiteSeer, 8 for PubMed in the paper) are averaged into class scores. Dropout on both layers' inputs
and on their attention coefficients.

    x (N, F) -> layer 1 -> (N, H * Dh) -> ELU -> layer 2 -> (N, C) logits

The graph is either a (2, E) edge index (sparse edge-wise attention) or an (N, N) boolean mask
(dense masked attention); see ``seqmap/nn/graph_attention.py``.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from seqmap.nn.graph_attention import GraphAttention


class GAT(nn.Module):
    """The paper's two-layer GAT.

    Args:
        in_dim: F, input features per node.
        num_classes: C.
        hidden: Dh of the hidden layer's heads (paper: 8).
        heads: H of the hidden layer (paper: 8).
        out_heads: heads of the output layer, averaged (paper: 1; 8 for PubMed).
        dropout: on each layer's input and projected features (paper: 0.6).
        attn_dropout: on the attention coefficients (paper: 0.6).
        negative_slope: of the LeakyReLU on the scores (paper: 0.2).
    """

    def __init__(
        self,
        in_dim: int,
        num_classes: int,
        *,
        hidden: int = 8,
        heads: int = 8,
        out_heads: int = 1,
        dropout: float = 0.6,
        attn_dropout: float = 0.6,
        negative_slope: float = 0.2,
    ):
        super().__init__()
        kw = dict(dropout=dropout, attn_dropout=attn_dropout, negative_slope=negative_slope)
        self.hidden = GraphAttention(in_dim, hidden, heads, concat=True, **kw)
        self.out = GraphAttention(hidden * heads, num_classes, out_heads, concat=False, **kw)

    def forward(self, x: Tensor, graph: Tensor) -> Tensor:
        """x (N, F) dense or sparse COO, graph (2, E) edge index or (N, N) mask -> logits (N, C).

        As a classifier is called (``model(src, src_mask)``): the trainer passes a graph
        ``LabelBatch``'s node features and structure (see ``seqmap.data.graphs.graph_batch``).
        """
        return self.attention(x, graph)[0]

    def attention(self, x: Tensor, graph: Tensor) -> tuple[Tensor, list[Tensor]]:
        """The forward pass with its attention: (logits (N, C), [hidden layer weights, output layer weights]).

        Weights are (E, H) per edge for an edge index, (H, N, N) for a mask (see ``GraphAttention``).
        """
        h, w1 = self.hidden(x, graph)
        logits, w2 = self.out(F.elu(h), graph)
        return logits, [w1, w2]
