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
import torch.nn.functional as F
from torch import Tensor, nn

from seqmap.data.tokenizers import EOS, PAD
from seqmap.models.protocol import Memory
from seqmap.models.transformer import Transformer, TransformerDecoder, TransformerEncoder
from seqmap.nn.audio import AudioFrontEnd


class SpeechTransformer(Transformer):
    """``Transformer`` whose encoder input is a waveform turned into frames by ``frontend``.

    With a ``ctc_head`` (``model.ctc_weight`` > 0) training adds the encoder's CTC loss with that weight
    (hybrid CTC/attention, Watanabe et al. 2017): it makes the encoder's frames say which token they hold,
    so the decoder's attention finds them sooner. Decoding is the attention decoder's search alone.
    """

    def __init__(self, frontend: AudioFrontEnd, encoder: TransformerEncoder, decoder: TransformerDecoder,
                 ctc_head: nn.Linear | None = None, ctc_weight: float = 0.0):
        super().__init__(encoder, decoder)
        self.frontend = frontend
        # hybrid CTC/attention training: a CTC output layer on the encoder (blank = PAD, which no target holds)
        self.ctc_head, self.ctc_weight = ctc_head, ctc_weight if ctc_head is not None else 0.0

    def frames(self, wave: Tensor, wave_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """(encoder input vectors (B, S, D), frame mask (B, S))."""
        return self.frontend(wave, wave_mask)

    def encode(self, src: Tensor, src_mask: Tensor | None) -> Memory:
        x, mask = self.frames(src, src_mask)
        states, _ = self.encoder(x, mask, embedded=True)
        return Memory(states=states, mask=mask)

    def forward(self, src: Tensor, src_mask: Tensor | None, tgt: Tensor, *, features: bool = False,
                ctc_targets: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """Teacher forcing as ``Transformer.forward``; with ``ctc_targets`` (B, T) (the decoder's targets: ids,
        then EOS, then PAD) also the encoder's summed CTC NLL of those ids (EOS and PAD left out)."""
        memory = self.encode(src, src_mask)
        out, _ = self.decoder(tgt, memory, features=features)
        if ctc_targets is None:
            return out
        return out, self.ctc_nll(memory, ctc_targets)

    def ctc_nll(self, memory: Memory, targets: Tensor) -> Tensor:
        """Summed CTC negative log-likelihood of ``targets`` (B, T) given the memory (blank = PAD)."""
        if self.ctc_head is None:
            raise ValueError("this speech model has no CTC layer (model.ctc_weight = 0)")
        log_probs = self.ctc_head(memory.states).float().log_softmax(-1).transpose(0, 1)  # (S, B, V)
        lengths = ((targets != PAD) & (targets != EOS)).sum(1)
        return F.ctc_loss(log_probs, targets, memory.mask.sum(1), lengths, blank=PAD, reduction="sum",
                          zero_infinity=True)

    def encoder_attention(self, src: Tensor, src_mask: Tensor | None) -> Tensor:
        """Encoder self-attention weights (B, L, H, S, S) over frames, for plots."""
        x, mask = self.frames(src, src_mask)
        _, weights = self.encoder(x, mask, need_weights=True, embedded=True)
        return torch.stack(weights, dim=1)
