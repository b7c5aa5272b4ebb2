"""Speech recognition with attention: the Transformer encoder-decoder reading audio (the Speech-Transformer,
Dong et al. 2018; Conformer encoder blocks as an option, Gulati et al. 2020).

    wave (B, N) + sample mask -> AudioFrontEnd -> frames (B, S, D) + frame mask (B, S)
      -> TransformerEncoder (embedded input) -> memory (B, S, D)
    tokens (B, T) + memory -> TransformerDecoder -> logits (B, T, V)

It speaks the same protocol as the text Transformer (``encode(src, src_mask)`` with src the padded
waveforms and src_mask their sample mask), so greedy, beam search, training and validation run
unchanged; the memory's mask is the frame mask, so cross-attention never reads a padded frame.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqmap.models.protocol import Memory
from seqmap.models.transformer import Transformer, TransformerDecoder, TransformerEncoder
from seqmap.nn.audio import AudioFrontEnd


class SpeechTransformer(Transformer):
    """``Transformer`` whose encoder input is a waveform turned into frames by ``frontend``."""

    def __init__(self, frontend: AudioFrontEnd, encoder: TransformerEncoder, decoder: TransformerDecoder):
        super().__init__(encoder, decoder)
        self.frontend = frontend

    def frames(self, wave: Tensor, wave_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """(encoder input vectors (B, S, D), frame mask (B, S))."""
        return self.frontend(wave, wave_mask)

    def encode(self, src: Tensor, src_mask: Tensor | None) -> Memory:
        x, mask = self.frames(src, src_mask)
        states, _ = self.encoder(x, mask, embedded=True)
        return Memory(states=states, mask=mask)

    def encoder_attention(self, src: Tensor, src_mask: Tensor | None) -> Tensor:
        """Encoder self-attention weights (B, L, H, S, S) over frames, for plots."""
        x, mask = self.frames(src, src_mask)
        _, weights = self.encoder(x, mask, need_weights=True, embedded=True)
        return torch.stack(weights, dim=1)
