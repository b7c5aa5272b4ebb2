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

Rows that have read different numbers of tokens share one batch through
``LMState.stack`` (the server stacks prompts of unequal length, each read alone):
a shorter row's caches are padded on the left, attention masks those slots, and
the row's positions count from its own first token, so every row decodes exactly
as it would alone (up to float rounding), under every positional scheme. Past the
window, a step in which any row would read past it re-reads every row's last
tokens (at most a window) from scratch, which for rows still inside the window is
the same computation as the cached one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from seqmap.models.protocol import Memory
from seqmap.models.stack import DecoderStack
from seqmap.nn.attention import key_mask
from seqmap.nn.kv_cache import KVCache, reorder_caches
from seqmap.nn.layers import EncoderLayer, TokenEmbedding
from seqmap.nn.positional import LearnedPositional, PositionalEncoding


@dataclass
class LMState:
    """A self-attention cache per layer and the tokens read.

    Row b has read ``position - pads[b]`` tokens. ``pads`` is None while every row
    has read ``position`` (one prompt length); rows stacked from prompts of unequal
    length (``stack``) get ``position`` = the longest row's count and ``pads`` (B,)
    = how many fewer each read. Caches and history hold each row's last tokens
    right-aligned, so a shorter row's first slots hold no token (see ``slot_pads``).

    ``history`` (B, <= window) keeps the last tokens read, for a model whose positions
    stop at a window (learned positions); None otherwise.
    """

    caches: list[KVCache]
    position: int = 0
    pads: Tensor | None = None
    history: Tensor | None = None

    def reorder(self, index: Tensor, *, same_sources: bool = False) -> None:
        """Keep batch rows ``index`` (B',) in that order (in place); ``same_sources`` changes nothing (no source)."""
        reorder_caches(self.caches, index)
        if self.history is not None:
            self.history = self.history.index_select(0, index)
        if self.pads is not None:
            self.pads = self.pads.index_select(0, index)

    def slot_pads(self, slots: int) -> Tensor | None:
        """(B,) leading slots of each row that hold no token, in ``slots`` slots holding its last tokens
        right-aligned (the caches, or the history); None when every row fills them all."""
        if self.pads is None:
            return None
        pads = slots - (self.position - self.pads).clamp(max=slots)
        return pads if bool(pads.any()) else None

    @classmethod
    def stack(cls, states: Sequence[LMState]) -> LMState:
        """One state for the rows of ``states`` in order, each having read any number of tokens.

        Each row then decodes as it would in its own state: shorter rows are
        padded on the left of the caches (and history) and masked.
        """
        position = max(s.position for s in states)

        def behind(s: LMState) -> Tensor:  # (b,) tokens fewer than the longest row of the stack
            k = s.caches[0].k
            own = torch.zeros(k.size(0), dtype=torch.long, device=k.device) if s.pads is None else s.pads
            return own + (position - s.position)

        pads = torch.cat([behind(s) for s in states])
        caches = [KVCache.stack(layer) for layer in zip(*(s.caches for s in states))]
        history = None
        if states[0].history is not None:
            width = max(s.history.size(1) for s in states)
            history = torch.cat([F.pad(s.history, (width - s.history.size(1), 0)) for s in states])
        return cls(caches, position, pads if bool(pads.any()) else None, history)


class DecoderOnlyLM(DecoderStack):
    """Embedding + positions, N causal layers, final norm, output projection."""

    def __init__(self, embedding: TokenEmbedding, positional: PositionalEncoding, layers: list[EncoderLayer],
                 final_norm: nn.Module, output: nn.Linear, dropout: float = 0.0):
        super().__init__(embedding, positional, layers, final_norm, output, dropout)
        # the most tokens one forward pass can read (None: any number)
        self.window = positional.max_len if isinstance(positional, LearnedPositional) else None

    def encode(self, src: Tensor | None = None, src_mask: Tensor | None = None) -> Memory:
        return Memory()

    def _run(self, tokens: Tensor, caches: list[KVCache] | None, pads: Tensor | None, need_attention: bool,
             features: bool = False) -> tuple[Tensor, Tensor | None]:
        """tokens (B, t) after the keys in ``caches`` (None: no cache) -> (logits (B, t, V), or the final
        hidden states (B, t, D) with ``features``; attention (B, L, H, t, S) over the cache slots, or None).

        ``pads`` (B,): the first pads[b] slots of row b (cached, or among ``tokens``) hold
        no token: attention masks them and the row's positions count from its first
        real slot. None: every slot holds a token.
        """
        start = 0 if caches is None else caches[0].length  # slots before these tokens
        mask = positions = None
        if pads is not None:
            slots = torch.arange(start + tokens.size(1), device=tokens.device)  # (S,)
            mask = key_mask(slots >= pads[:, None])  # (B, 1, 1, S): True at slots that hold a token
            positions = (slots[start:] - pads[:, None]).clamp(min=0)  # (B, t); a padding slot reads position 0
        x = self.dropout(self.positional.embed(self.embedding(tokens), start, positions))  # (B, t, D)
        weights = []
        for i, layer in enumerate(self.layers):
            cache = None if caches is None else caches[i]
            x, w = layer(x, mask, positional=self.positional, offset=start, positions=positions, cache=cache,
                         need_weights=need_attention)
            weights.append(w)
        attention = torch.stack(weights, dim=1) if need_attention else None  # (B, L, H, t, S)
        x = self.final_norm(x)
        return (x if features else self.output(x)), attention

    def decode_step(self, tokens: Tensor, memory: Memory, state: LMState | None = None, *,
                    need_attention: bool = False) -> tuple[Tensor, LMState, Tensor | None]:
        """Read tokens (B, t) -> (logits (B, t', V), state, attention (B, L, H, t', S) or None).

        t' = t, but at most ``window`` past the window. Attention is over key positions
        0 .. S - 1, S = ``state.position``: zero at keys a row has not read (a shorter
        row) or that left its window.
        """
        state = LMState(caches=[KVCache() for _ in self.layers]) if state is None else state
        t = tokens.size(1)
        if self.window is not None:
            history = tokens if state.history is None else torch.cat([state.history, tokens], dim=1)
            state.history = history[:, -self.window:]
        longest = state.position + t - (0 if state.pads is None else int(state.pads.min()))  # most tokens a row read
        if self.window is None or longest <= self.window:  # every row inside the window: the caches are valid
            pads = state.slot_pads(state.caches[0].length)
            logits, attention = self._run(tokens, state.caches, pads, need_attention)
            state.position += t
        else:  # slide: re-read each row's last tokens (at most `window`) at positions 0.. (the old caches are stale)
            state.position += t
            fresh = [KVCache() for _ in self.layers]
            logits, attention = self._run(state.history, fresh, state.slot_pads(state.history.size(1)),
                                          need_attention)
            state.caches = fresh
            new = min(t, self.window)
            logits = logits[:, -new:]
            attention = None if attention is None else attention[..., -new:, :]
        if attention is not None:
            attention = keys_at_positions(attention, state)
        return logits, state, attention

    @property
    def output_layer(self) -> nn.Linear:
        """The Linear that turns ``forward(..., features=True)`` into logits."""
        return self.output

    def forward(self, src: Tensor | None, src_mask: Tensor | None, tgt: Tensor, *, features: bool = False) -> Tensor:
        """Teacher forcing over tgt (B, T) -> next-token logits (B, T, V). ``src`` is ignored.

        ``features=True``: the final hidden states (B, T, D) instead, for ``output_nll``.
        """
        out, _ = self._run(tgt, None, None, False, features)
        return out


def keys_at_positions(attention: Tensor, state: LMState) -> Tensor:
    """(B, L, H, t, slots) attention over the cache slots -> (B, L, H, t, position) over key positions.

    Row b's slots hold its last tokens right-aligned, so key position p of row b
    is slot p + slots - (tokens row b has read); positions with no slot (before
    the window, or past a shorter row's tokens) get zero.
    """
    slots = state.caches[0].length
    read = state.position - (0 if state.pads is None else state.pads)  # (B,) or one int
    shift = slots - read
    if state.pads is None and shift == 0:  # aligned rows inside the window: slots are positions
        return attention
    batch, device = attention.size(0), attention.device
    index = torch.arange(state.position, device=device) + torch.as_tensor(shift, device=device).expand(batch)[:, None]
    valid = (index >= 0) & (index < slots)  # (B, position)
    index = index.clamp(0, slots - 1)[:, None, None, None, :].expand(*attention.shape[:-1], -1)
    return attention.gather(-1, index) * valid[:, None, None, None, :]
