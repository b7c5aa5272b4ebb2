"""The encoder-only Transformer classifier: a sequence in, one label out.

    src (B, S) -> TransformerEncoder -> states (B, S, D) -> pool -> (B, D) -> head -> logits (B, C)

The encoder's embedding makes the sequence: ``TokenEmbedding`` for text (token ids, padded, with
a mask), ``PatchEmbedding`` for images (the Vision Transformer: src is (B, C, H, W) pixels, cut
into patches in row-major order; no padding, the mask is None).

The encoder is the encoder-decoder's own ``TransformerEncoder`` (every positional scheme, pre- or
post-LN), so the classifier is the seed's worked encoder-only stack with a head on top. Pooling:

* ``cls``: a learned vector is put in front of every sequence and its final state is classified
  (BERT, ViT). It takes position 0 and is never padding.
* ``mean``: the mean of the final states at real (non-padding) positions.

An optional ``pooler`` (BERT's: Linear D -> D, then tanh) transforms the pooled vector before the head.

Padding never changes a prediction: padded keys get zero attention weight and padded states are
left out of the mean.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqmap.models.transformer import TransformerEncoder
from seqmap.nn.dropout import Dropout

POOLINGS = ("cls", "mean")


class TransformerClassifier(nn.Module):
    """``TransformerEncoder`` + pooling + a Linear head over ``n_classes``."""

    def __init__(self, encoder: TransformerEncoder, n_classes: int, pooling: str = "cls", dropout: float = 0.0,
                 pooler: nn.Module | None = None):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        if n_classes < 2:
            raise ValueError(f"a classifier needs at least 2 classes, got {n_classes}")
        self.encoder, self.pooling = encoder, pooling
        d_model = encoder.embedding.d_model
        self.cls = nn.Parameter(torch.zeros(d_model)) if pooling == "cls" else None
        self.pooler = pooler or nn.Identity()
        self.dropout = Dropout(dropout)
        self.head = nn.Linear(d_model, n_classes)

    def _inputs(self, src: Tensor, src_mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """Embedded (B, S', D) inputs before positions, and their (B, S') mask (S' = S + 1 with a CLS vector)."""
        x = self.encoder.embedding(src)  # (B, S, D)
        if self.cls is None:
            return x, src_mask
        cls = self.cls.expand(x.size(0), 1, -1)  # (B, 1, D)
        mask = None if src_mask is None else torch.cat([src_mask.new_ones(src.size(0), 1), src_mask], dim=1)
        return torch.cat([cls, x], dim=1), mask

    def encode(self, src: Tensor, src_mask: Tensor | None, need_weights: bool = False
               ) -> tuple[Tensor, Tensor | None, list[Tensor | None]]:
        """Final states (B, S', D), their mask (B, S') or None, and per-layer self-attention (B, H, S', S')."""
        x, mask = self._inputs(src, src_mask)
        states, weights = self.encoder(x, mask, need_weights=need_weights, embedded=True)
        return states, mask, weights

    def pool(self, states: Tensor, mask: Tensor | None) -> Tensor:
        """(B, S', D) -> (B, D): the CLS state, or the mean over real positions."""
        if self.pooling == "cls":
            return states[:, 0]
        if mask is None:
            return states.mean(dim=1)
        keep = mask.unsqueeze(-1).to(states.dtype)  # (B, S, 1)
        return (states * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)

    def forward(self, src: Tensor, src_mask: Tensor | None) -> Tensor:
        """src (B, S) token ids and src_mask (B, S) True at real tokens (or images, mask None) -> logits (B, C)."""
        states, mask, _ = self.encode(src, src_mask)
        return self.head(self.dropout(self.pooler(self.pool(states, mask))))

    def encoder_attention(self, src: Tensor, src_mask: Tensor | None) -> Tensor:
        """Self-attention weights (B, L, H, S', S'), for plots (with ``cls`` pooling, position 0 is CLS)."""
        _, _, weights = self.encode(src, src_mask, need_weights=True)
        return torch.stack(weights, dim=1)
