"""The small protocol every model family speaks, so decoding and training are written once.

    memory = model.encode(src, src_mask)                       # once per source
    logits, state, attn = model.decode_step(tokens, memory, state)   # state=None at start
    logits = model(src, src_mask, tgt_in)                      # teacher forcing

``decode_step`` consumes t >= 1 new target tokens (B, t): one at a time when
decoding, several at once to prefill a prompt or forced prefix. It returns logits
(B, t, V), the new state, and, when ``need_attention=True``, the attention of the
new tokens over the source as one 5-D shape for every family:
(B, L, H, t, S) = (batch, layer, head, new tokens, source). RNN decoders return
L = H = 1; ConvS2S one map per decoder layer, H = 1. A decoder-only model has no
source; it returns its self-attention over the S keys seen so far instead.

A decoder state supports ``reorder(index, *, same_sources=False)`` (keep batch
rows ``index``, as beam search needs; ``same_sources=True`` promises that every
row keeps its own source, so per-source tensors such as cross-attention keys and
values need not move) and knows its ``position`` (target tokens consumed so far).
A language model's state class may also offer ``stack(states)`` (a classmethod):
one state of B rows from B one-row states that read different numbers of tokens,
so prompts of unequal length are prefilled one by one and then decoded together
(``seqmap.decoding.greedy.decode_loop`` with a list of prompts).

Families whose logits are one Linear of their last hidden states (the Transformer
and the decoder-only LM) also offer ``model(src, src_mask, tgt_in, features=True)``
(those states, (B, T, D)) and ``model.output_layer`` (that Linear), so that training
can run the output layer and the loss together (``seqmap.training.loss.output_nll``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor


def map_tensors(fn, value):
    """Apply fn to every tensor in a nest of tuples/lists (None passes through)."""
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        return type(value)(map_tensors(fn, v) for v in value)
    return fn(value)


def check_mask(mask: Tensor | None, name: str = "src_mask") -> None:
    """A padding mask is bool, True at real tokens (``seqmap``'s convention); once per batch, in the encoders."""
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor, True at real tokens, got {mask.dtype}; pass e.g. "
                        f"src != pad_id, or mask.bool()")


@dataclass
class Memory:
    """What an encoder hands to its decoder.

    Attributes:
        states: (B, S, D) encoder outputs, or None for a decoder-only model.
        mask: (B, S) boolean, True at real source tokens, or None.
        final: encoder summary used to initialise an RNN decoder (a tensor or a
            tuple of tensors with batch on dim 1, as torch's RNNs lay out hidden
            states), or None.
        tokens: (B, S) the source ids, kept by a model that copies from its source
            (pointer-generator), or None.
        values: (B, S, E) what attention mixes when it is not ``states`` (ConvS2S: encoder
            output + source embedding, with ``states`` the keys), or None.
    """

    states: Tensor | None = None
    mask: Tensor | None = None
    final: Any = None
    tokens: Tensor | None = None
    values: Tensor | None = None

    def index_select(self, index: Tensor) -> Memory:
        """Rows ``index`` of the batch (repeat a source per beam, drop finished rows)."""
        return Memory(
            states=map_tensors(lambda t: t.index_select(0, index), self.states),
            mask=map_tensors(lambda t: t.index_select(0, index), self.mask),
            final=map_tensors(lambda t: t.index_select(1, index), self.final),
            tokens=map_tensors(lambda t: t.index_select(0, index), self.tokens),
            values=map_tensors(lambda t: t.index_select(0, index), self.values),
        )


@runtime_checkable
class DecoderState(Protocol):
    position: int

    def reorder(self, index: Tensor, *, same_sources: bool = False) -> None: ...


@runtime_checkable
class SequenceModel(Protocol):
    def encode(self, src: Tensor | None, src_mask: Tensor | None) -> Memory: ...

    def decode_step(
        self, tokens: Tensor, memory: Memory, state: Any = None, *, need_attention: bool = False
    ) -> tuple[Tensor, Any, Tensor | None]: ...

    def forward(self, src: Tensor | None, src_mask: Tensor | None, tgt: Tensor) -> Tensor: ...
