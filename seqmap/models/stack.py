"""The parts every decoder stack is built from: token embedding and positions, N layers, final norm, output.

``TransformerDecoder`` (with cross-attention) and ``DecoderOnlyLM`` (causal self-attention only) receive
the same ready parts and keep them under the same names, so their checkpoints share their layout.
"""

from __future__ import annotations

from torch import nn

from seqmap.nn.dropout import Dropout
from seqmap.nn.layers import TokenEmbedding
from seqmap.nn.positional import PositionalEncoding


class DecoderStack(nn.Module):
    """Embedding + positions, N layers, final norm (pre-LN) or identity (post-LN), output projection to V."""

    def __init__(self, embedding: TokenEmbedding, positional: PositionalEncoding, layers: list[nn.Module],
                 final_norm: nn.Module, output: nn.Linear, dropout: float = 0.0):
        super().__init__()
        self.embedding, self.positional = embedding, positional
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        self.output = output
        self.dropout = Dropout(dropout)
