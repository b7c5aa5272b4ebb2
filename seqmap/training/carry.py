"""Truncated back-propagation through time: each batch starts from the previous batch's final state.

A recurrent language model trained on consecutive windows of the same text rows
(``seqmap.data.samplers.lm_stream_rows``) sees, through its carried hidden state,
all the text before a window, while gradients stop at the window's start
(Zaremba et al. 2014; ``train.stateful``). ``CarriedState`` wraps such a model
for the trainer: it speaks ``forward(src, src_mask, tgt) -> logits`` like any
model, feeding ``tgt`` through the model's ``decode_step`` from the carried state.
"""

from __future__ import annotations

from torch import Tensor, nn


class CarriedState(nn.Module):
    """Teacher forcing from the state the previous call ended in (detached); ``reset`` starts from zero."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.state = None

    def reset(self) -> None:
        self.state = None

    def forward(self, src: Tensor | None, src_mask: Tensor | None, tgt: Tensor) -> Tensor:
        if self.state is not None:
            self.state.detach_()
        logits, self.state, _ = self.model.decode_step(tgt, self.model.encode(src, src_mask), self.state)
        return logits
