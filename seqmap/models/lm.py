"""The decoder-only language model (GPT-style), speaking the model protocol.

A stack of causal self-attention layers (``EncoderLayer(causal=True)``: a decoder
without cross-attention). There is no source: ``encode`` returns an empty memory,
and a prompt is fed through ``decode_step`` (several tokens at once prefill the
cache).

With learned positions the model has no position past ``model.max_len``; decoding
past it slides a window, as nanoGPT's ``generate`` does: each step re-reads the
last ``max_len`` tokens from scratch (the cached keys were computed at positions
that no longer hold), so generation has no length limit. In a chunk of several
tokens that crosses the window, the last position reads a full window and the
earlier ones read what of the chunk's window precedes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from seqmap.models.protocol import Memory
from seqmap.nn.dropout import Dropout
from seqmap.nn.layers import EncoderLayer, TokenEmbedding
from seqmap.nn.multihead import KVCache
from seqmap.nn.positional import LearnedPositional, PositionalEncoding


@dataclass
class LMState:
    """A self-attention cache per layer and the number of tokens consumed.

    ``history`` (B, <= window) keeps the last tokens read, for a model whose positions
    stop at a window (learned positions); None otherwise.
    """

    caches: list[KVCache]
    position: int = 0
    history: Tensor | None = None

    def reorder(self, index: Tensor, *, same_sources: bool = False) -> None:
        """Keep batch rows ``index`` (B',) in that order (in place); ``same_sources`` changes nothing (no source)."""
        for cache in self.caches:
            cache.reorder(index)
        if self.history is not None:
            self.history = self.history.index_select(0, index)


class DecoderOnlyLM(nn.Module):
    """Embedding + positions, N causal layers, final norm, output projection."""

    def __init__(self, embedding: TokenEmbedding, positional: PositionalEncoding, layers: list[EncoderLayer],
                 final_norm: nn.Module, output: nn.Linear, dropout: float = 0.0):
        super().__init__()
        self.embedding, self.positional = embedding, positional
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        self.output = output
        self.dropout = Dropout(dropout)
        # the most tokens one forward pass can read (None: any number)
        self.window = positional.max_len if isinstance(positional, LearnedPositional) else None

    def encode(self, src: Tensor | None = None, src_mask: Tensor | None = None) -> Memory:
        return Memory()

    def _run(self, tokens: Tensor, state: LMState | None, need_attention: bool,
             features: bool = False) -> tuple[Tensor, Tensor | None]:
        offset = 0 if state is None else state.position
        x = self.dropout(self.positional.embed(self.embedding(tokens), offset))  # (B, t, D)
        weights = []
        for i, layer in enumerate(self.layers):
            cache = None if state is None else state.caches[i]
            x, w = layer(x, positional=self.positional, offset=offset, cache=cache, need_weights=need_attention)
            weights.append(w)
        if state is not None:
            state.position += tokens.size(1)
        attention = torch.stack(weights, dim=1) if need_attention else None  # (B, L, H, t, S)
        x = self.final_norm(x)
        return (x if features else self.output(x)), attention

    def decode_step(self, tokens: Tensor, memory: Memory, state: LMState | None = None, *,
                    need_attention: bool = False) -> tuple[Tensor, LMState, Tensor | None]:
        state = LMState(caches=[KVCache() for _ in self.layers]) if state is None else state
        if self.window is None:
            logits, attention = self._run(tokens, state, need_attention)
            return logits, state, attention
        seen = state.position  # tokens read so far, before this call
        history = tokens if state.history is None else torch.cat([state.history, tokens], dim=1)
        state.history = history[:, -self.window:]
        if seen + tokens.size(1) <= self.window:  # still inside the window: the cache is valid
            logits, attention = self._run(tokens, state, need_attention)
            return logits, state, attention
        # slide: re-read the last `window` tokens at positions 0.. (the old cache is stale)
        fresh = LMState(caches=[KVCache() for _ in self.layers])
        logits, attention = self._run(state.history, fresh, need_attention)
        state.caches, state.position = fresh.caches, seen + tokens.size(1)
        new = min(tokens.size(1), self.window)
        logits = logits[:, -new:]
        if attention is not None:  # keys back at their absolute positions: nothing before the window
            attention = F.pad(attention[..., -new:, :], (state.position - self.window, 0))
        return logits, state, attention

    @property
    def output_layer(self) -> nn.Linear:
        """The Linear that turns ``forward(..., features=True)`` into logits."""
        return self.output

    def forward(self, src: Tensor | None, src_mask: Tensor | None, tgt: Tensor, *, features: bool = False) -> Tensor:
        """Teacher forcing over tgt (B, T) -> next-token logits (B, T, V). ``src`` is ignored.

        ``features=True``: the final hidden states (B, T, D) instead, for ``output_nll``.
        """
        out, _ = self._run(tgt, None, False, features)
        return out
