"""The recurrent language model (Zaremba et al. 2014; Merity et al. 2017), speaking the model protocol.

Embedding, a multi-layer RNN/LSTM/GRU, dropout, output projection (optionally tied to
the embedding, through a Linear to emb_size when the widths differ). There is no
source: ``encode`` returns an empty memory and a prompt is fed through
``decode_step``; the decoder state is the recurrent hidden state, so generation
costs the same per token however long the text (no cache grows). Rows that have
read different numbers of tokens share a batch by stacking their hidden states
(``RNNLMState.stack``): a row's state is its own, so nothing needs padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seqmap.models.protocol import Memory, map_tensors
from seqmap.nn.dropout import Dropout


@dataclass
class RNNLMState:
    """The RNN's hidden state (a tensor, or (h, c) for an LSTM; batch on dim 1) and tokens consumed
    (by the longest row, after ``stack``)."""

    hidden: Tensor | tuple[Tensor, Tensor] | None = None
    position: int = 0

    def reorder(self, index: Tensor, *, same_sources: bool = False) -> None:
        """Keep batch rows ``index`` (B',) in that order; ``same_sources`` changes nothing (no source)."""
        self.hidden = map_tensors(lambda t: t.index_select(1, index), self.hidden)

    @classmethod
    def stack(cls, states: Sequence[RNNLMState]) -> RNNLMState:
        """One state for the rows of ``states`` in order, each having read any number of tokens."""
        hidden = [s.hidden for s in states]
        if isinstance(hidden[0], tuple):  # LSTM: (h, c)
            hidden = tuple(torch.cat(parts, dim=1) for parts in zip(*hidden))
        else:
            hidden = torch.cat(hidden, dim=1)
        return cls(hidden, max(s.position for s in states))

    def detach_(self) -> None:
        """Cut the graph behind the hidden state (truncated back-propagation through time)."""
        self.hidden = map_tensors(lambda t: t.detach(), self.hidden)


RNN_CELLS = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}


class RNNLM(nn.Module):
    """Embedding -> dropout -> RNN stack -> dropout -> (Linear to emb_size) -> output.

    Args:
        vocab: vocabulary size V.
        emb_size: embedding width E.
        hidden_size: hidden width H of every layer.
        layers: RNN layers (dropout between them when > 1).
        cell: rnn | lstm | gru.
        dropout: on the embeddings, between layers and before the output layer.
        tie_embeddings: the output layer is the embedding table (Press & Wolf 2017).
        pad_id: padding id (its embedding row starts at zero).
        init_range: weights uniform in [-r, r] (Zaremba et al. use 0.1); 0 keeps torch's defaults.
    """

    def __init__(self, vocab: int, emb_size: int, hidden_size: int, layers: int, cell: str = "lstm",
                 dropout: float = 0.0, tie_embeddings: bool = True, pad_id: int = 0, init_range: float = 0.1):
        super().__init__()
        if cell not in RNN_CELLS:
            raise ValueError(f"unknown RNN cell {cell!r}; choose {sorted(RNN_CELLS)}")
        self.embedding = nn.Embedding(vocab, emb_size, padding_idx=pad_id)
        self.rnn = RNN_CELLS[cell](emb_size, hidden_size, layers, batch_first=True,
                                   dropout=dropout if layers > 1 else 0.0)
        self.dropout = Dropout(dropout)
        width = emb_size if tie_embeddings else hidden_size
        self.bridge = nn.Linear(hidden_size, emb_size) if tie_embeddings and hidden_size != emb_size else None
        self.output = nn.Linear(width, vocab)
        if init_range > 0:
            for p in self.parameters():
                nn.init.uniform_(p, -init_range, init_range)
        if tie_embeddings:
            self.output.weight = self.embedding.weight
        with torch.no_grad():
            self.embedding.weight[pad_id].zero_()

    def encode(self, src: Tensor | None = None, src_mask: Tensor | None = None) -> Memory:
        return Memory()

    def _run(self, tokens: Tensor, hidden) -> tuple[Tensor, object]:
        x = self.dropout(self.embedding(tokens))  # (B, t, E)
        y, hidden = self.rnn(x, hidden)  # (B, t, H)
        y = self.dropout(y)
        if self.bridge is not None:
            y = self.bridge(y)
        return self.output(y), hidden  # (B, t, V)

    def decode_step(self, tokens: Tensor, memory: Memory, state: RNNLMState | None = None, *,
                    need_attention: bool = False) -> tuple[Tensor, RNNLMState, None]:
        """Consume tokens (B, t) -> (logits (B, t, V), state, None): a recurrent LM has no attention."""
        state = RNNLMState() if state is None else state
        logits, state.hidden = self._run(tokens, state.hidden)
        state.position += tokens.size(1)
        return logits, state, None

    def forward(self, src: Tensor | None, src_mask: Tensor | None, tgt: Tensor) -> Tensor:
        """Teacher forcing over tgt (B, T) from a zero state -> next-token logits (B, T, V). ``src`` is ignored."""
        logits, _ = self._run(tgt, None)
        return logits
