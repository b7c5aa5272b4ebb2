"""The Conformer block (Gulati et al. 2020): self-attention for global context, convolution for local patterns.

    x = x + 1/2 FF(norm(x))                     # a half-step feed-forward (macaron)
    x = x + MHSA(norm(x))                       # multi-head self-attention
    x = x + Conv(norm(x))                       # pointwise -> GLU -> depthwise -> norm -> SiLU -> pointwise
    x = x + 1/2 FF(norm(x))
    x = norm(x)

It speaks ``EncoderLayer``'s interface (``layer(x, mask, positional=..., need_weights=...)``), so a
Transformer encoder stacks it in place of the plain layer. The convolution's normalisation is a
LayerNorm over channels rather than BatchNorm, and padded frames are zeroed before the depthwise
convolution, so padding never reaches a real frame.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from seqmap.nn.dropout import Dropout
from seqmap.nn.layers import FeedForward
from seqmap.nn.multihead import MultiHeadAttention
from seqmap.nn.positional import PositionalEncoding


class ConvModule(nn.Module):
    """(B, T, D) -> (B, T, D): pointwise conv to 2D, GLU, depthwise conv of ``kernel`` frames, norm, SiLU, pointwise."""

    def __init__(self, d_model: int, kernel: int, dropout: float = 0.0):
        super().__init__()
        if kernel % 2 == 0:
            raise ValueError(f"model.conv_kernel must be odd (a centred window), got {kernel}")
        self.pointwise1 = nn.Linear(d_model, 2 * d_model)
        self.depthwise = nn.Conv1d(d_model, d_model, kernel, padding=kernel // 2, groups=d_model)
        self.norm = nn.LayerNorm(d_model)
        self.pointwise2 = nn.Linear(d_model, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, frame_mask: Tensor | None) -> Tensor:
        h = F.glu(self.pointwise1(x), dim=-1)  # (B, T, D)
        if frame_mask is not None:
            h = h * frame_mask.unsqueeze(-1)  # padded frames are zero for the convolution
        h = self.depthwise(h.transpose(1, 2)).transpose(1, 2)
        return self.dropout(self.pointwise2(F.silu(self.norm(h))))


class ConformerLayer(nn.Module):
    """One Conformer block; ``mask`` (B, 1, 1, S) True at real frames, as for ``EncoderLayer``."""

    def __init__(self, self_attn: MultiHeadAttention, ff1: FeedForward, ff2: FeedForward, conv: ConvModule,
                 d_model: int, dropout: float = 0.0):
        super().__init__()
        self.self_attn, self.ff1, self.ff2, self.conv = self_attn, ff1, ff2, conv
        self.norm_ff1, self.norm_attn, self.norm_conv, self.norm_ff2, self.norm_out = (
            nn.LayerNorm(d_model) for _ in range(5))
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None, *, positional: PositionalEncoding | None = None,
                need_weights: bool = False, **_) -> tuple[Tensor, Tensor | None]:
        """x (B, S, D) -> (x (B, S, D), self-attention weights (B, H, S, S) or None)."""
        x = x + 0.5 * self.dropout(self.ff1(self.norm_ff1(x)))
        h, weights = self.self_attn.self_attention(self.norm_attn(x), mask, positional=positional,
                                                   need_weights=need_weights)
        x = x + self.dropout(h)
        x = x + self.conv(self.norm_conv(x), None if mask is None else mask[:, 0, 0, :])
        x = x + 0.5 * self.dropout(self.ff2(self.norm_ff2(x)))
        return self.norm_out(x), weights
