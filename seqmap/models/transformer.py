"""The Transformer encoder-decoder (Vaswani et al. 2017), speaking the model protocol.

    src (B, S) -> TransformerEncoder -> memory (B, S, D)
    tgt (B, T) + memory -> TransformerDecoder -> logits (B, T, V)

With a ``CopyHead`` (``model.copy: true``, a pointer-generator, ``seqmap.nn.copy``) the outputs are
log-probabilities of the mixed generate/copy distribution over V (+ the source's out-of-vocabulary
ids) in the place of logits; ids >= V (copied OOVs) are read as UNK by both embeddings.

Stacks receive ready parts (embedding, positional scheme, layers, final norm,
output projection); ``seqmap.models.builder`` wires them from a config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seqmap.models.protocol import Memory, check_mask
from seqmap.models.stack import DecoderStack
from seqmap.nn.attention import key_mask
from seqmap.nn.copy import CopyHead, mix_copy
from seqmap.nn.dropout import Dropout
from seqmap.nn.kv_cache import KVCache, reorder_caches
from seqmap.nn.layers import DecoderLayer, EncoderLayer, TokenEmbedding
from seqmap.nn.positional import PositionalEncoding


class TransformerEncoder(nn.Module):
    """Embedding + positions (+ a norm, BERT's), N non-causal layers, final norm (pre-LN) or identity (post-LN)."""

    def __init__(self, embedding: TokenEmbedding, positional: PositionalEncoding, layers: list[EncoderLayer],
                 final_norm: nn.Module, dropout: float = 0.0, embedding_norm: nn.Module | None = None):
        super().__init__()
        self.embedding, self.positional = embedding, positional
        self.embedding_norm = embedding_norm or nn.Identity()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        self.dropout = Dropout(dropout)

    def forward(self, src: Tensor, src_mask: Tensor | None, need_weights: bool = False, *,
                embedded: bool = False) -> tuple[Tensor, list[Tensor | None]]:
        """src (B, S), src_mask (B, S) True at real tokens -> (states (B, S, D), per-layer self-attention).

        ``embedded=True``: src is already vectors (B, S, D) (token embeddings with a class vector in
        front, or image patches); positions, dropout and the layers are applied as to embeddings.
        """
        check_mask(src_mask)
        x = self.dropout(self.embedding_norm(self.positional.embed(src if embedded else self.embedding(src))))
        mask = None if src_mask is None else key_mask(src_mask)  # (B, 1, 1, S)
        weights = []
        for layer in self.layers:
            x, w = layer(x, mask, positional=self.positional, need_weights=need_weights)
            weights.append(w)
        return self.final_norm(x), weights


def cross_mask(src_mask: Tensor | None) -> Tensor | None:
    """(B, S) source padding mask -> (B, 1, 1, S) for cross-attention; None when nothing is padded.

    Checked once per batch, so unpadded batches (one sentence, equal lengths) skip the
    mask in every cross-attention call of every step.
    """
    if src_mask is None or bool(src_mask.all()):
        return None
    return key_mask(src_mask)


def source_blocks(row_sources: Tensor) -> tuple[Tensor, int]:
    """The source of each decoder row (B,) -> (the source of each block of r consecutive rows (B / r,), r).

    r is the largest block size that fits every run of equal sources: k beams per sentence
    give r = k and one entry per sentence; rows in no order give r = 1 and one entry per row.
    """
    sources, counts = torch.unique_consecutive(row_sources, return_counts=True)
    per_source = math.gcd(*counts.tolist()) or 1
    return sources.repeat_interleave(counts // per_source), per_source


@dataclass
class TransformerState:
    """Decoder state: a self-attention cache per layer, cross keys/values per layer.

    The B decoder rows may share sources: rows [i r, (i + 1) r) read source i of
    ``memory_kv`` (r = ``per_source``; beam search's k beams per sentence), so the
    cross-attention keys and values are kept, and read, once per source.
    """

    caches: list[KVCache]
    memory_kv: list[tuple[Tensor, Tensor]]  # per layer (B / r, Hkv, S, Dh)
    memory_mask: Tensor | None  # (B / r, 1, 1, S)
    position: int = 0
    copy_keys: Tensor | None = None  # (B, S, D) keys of the copy attention (pointer-generator), else None
    per_source: int = 1  # r, decoder rows per entry of memory_kv

    def reorder(self, index: Tensor, *, same_sources: bool = False) -> None:
        """Keep batch rows ``index`` (B',) in that order (in place).

        same_sources: the caller promises that every row keeps its source
        (row i and row index[i] read the same source, as when beam search
        reorders the beams of each sentence among themselves), so the
        cross-attention keys/values and the source mask stay as they are.
        Otherwise they follow the rows' sources, one copy per block of rows
        that read the same source (``source_blocks``).
        """
        reorder_caches(self.caches, index, blocks=self.per_source if same_sources else 1)
        if same_sources:
            return
        if self.copy_keys is not None:
            self.copy_keys = self.copy_keys.index_select(0, index)
        sources, self.per_source = source_blocks(index // self.per_source)
        self.memory_kv = [(k.index_select(0, sources), v.index_select(0, sources)) for k, v in self.memory_kv]
        if self.memory_mask is not None:
            self.memory_mask = self.memory_mask.index_select(0, sources)


class TransformerDecoder(DecoderStack):
    """Embedding + positions, N decoder layers, final norm, output projection to the vocabulary.

    ``output_scale`` multiplies the final states before the output layer (T5 v1.0 scales by D**-0.5 where its
    output layer is the embedding table); the scaled states are the features ``features=True`` returns.
    """

    def __init__(self, embedding: TokenEmbedding, positional: PositionalEncoding, layers: list[DecoderLayer],
                 final_norm: nn.Module, output: nn.Linear, dropout: float = 0.0, output_scale: float = 1.0):
        super().__init__(embedding, positional, layers, final_norm, output, dropout)
        self.output_scale = output_scale

    def init_state(self, memory: Memory) -> TransformerState:
        """Project the memory to cross-attention keys/values once; start empty caches."""
        return TransformerState(
            caches=[KVCache() for _ in self.layers],
            memory_kv=[layer.cross_attn.project_memory(memory.states) for layer in self.layers],
            memory_mask=cross_mask(memory.mask),
        )

    def forward(self, tokens: Tensor, memory: Memory, state: TransformerState | None = None,
                need_attention: bool = False, features: bool = False,
                which: str = "cross") -> tuple[Tensor, Tensor | None]:
        """tokens (B, t) -> (logits (B, t, V), cross-attention (B, L, H, t, S) or None).

        Without a state (teacher forcing) the whole target is attended causally
        and nothing is cached; with a state, the new tokens extend its caches.
        ``features=True`` stops before the output layer: (B, t, D) instead of logits.
        ``which="self"``: the attention returned is the decoder's causal self-attention
        (B, L, H, t, t + cached) instead of the cross-attention.
        """
        offset = 0 if state is None else state.position
        x = self.dropout(self.positional.embed(self.embedding(tokens), offset))
        if state is None:
            memory_mask = cross_mask(memory.mask)
        else:
            memory_mask = state.memory_mask
        weights = []
        for i, layer in enumerate(self.layers):
            if state is None:
                memory_kv, cache = layer.cross_attn.project_memory(memory.states), None
            else:
                memory_kv, cache = state.memory_kv[i], state.caches[i]
            x, w = layer(x, memory_kv, memory_mask, positional=self.positional, offset=offset, cache=cache,
                         need_weights=need_attention, which=which)
            weights.append(w)
        if state is not None:
            state.position += tokens.size(1)
        attention = torch.stack(weights, dim=1) if need_attention else None
        x = self.final_norm(x)
        if self.output_scale != 1.0:
            x = x * self.output_scale
        return (x if features else self.output(x)), attention


class Transformer(nn.Module):
    """Encoder-decoder Transformer implementing ``encode`` / ``decode_step`` / ``forward``.

    ``copy``: a pointer-generator's copy head (outputs become log-probabilities, see the module
    docstring); ``unk_id``: the id that source and target ids beyond the vocabulary are embedded as.
    """

    def __init__(self, encoder: TransformerEncoder, decoder: TransformerDecoder, copy: CopyHead | None = None,
                 unk_id: int = 3):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.copy, self.unk_id = copy, unk_id

    def _in_vocab(self, ids: Tensor, embedding: TokenEmbedding) -> Tensor:
        """Extended ids (copied OOVs, >= V) -> UNK, so that an embedding can read them."""
        return ids if self.copy is None else ids.masked_fill(ids >= embedding.table.num_embeddings, self.unk_id)

    def encode(self, src: Tensor, src_mask: Tensor | None) -> Memory:
        states, _ = self.encoder(self._in_vocab(src, self.encoder.embedding), src_mask)
        return Memory(states=states, mask=src_mask, tokens=None if self.copy is None else src)

    def _copy_parts(self, features: Tensor, inputs: Tensor, memory: Memory, keys: Tensor) -> tuple[Tensor, Tensor]:
        """Decoder features (B, t, D) and its input ids (B, t) -> copy weights (B, t, S), p_gen (B, t, 1)."""
        return self.copy(features, self.decoder.embedding(inputs), memory.states, keys, memory.mask)

    def _copy_output(self, features: Tensor, inputs: Tensor, memory: Memory, keys: Tensor) -> Tensor:
        """Decoder features (B, t, D) and its input ids (B, t) -> log P of the mixed distribution (B, t, V_ext)."""
        weights, p_gen = self._copy_parts(features, inputs, memory, keys)
        return mix_copy(self.decoder.output(features), weights, memory.tokens, p_gen)

    def encoder_attention(self, src: Tensor, src_mask: Tensor | None) -> Tensor:
        """Encoder self-attention weights (B, L, H, S, S), for plots."""
        _, weights = self.encoder(src, src_mask, need_weights=True)
        return torch.stack(weights, dim=1)

    def copy_attention(self, src: Tensor, src_mask: Tensor | None, tgt: Tensor) -> tuple[Tensor, Tensor]:
        """The copy head's weights (B, T, S) and p_gen (B, T) over the decoder inputs tgt (B, T), for plots."""
        if self.copy is None:
            raise ValueError("this Transformer has no copy head (model.copy: false)")
        memory = self.encode(src, src_mask)
        inputs = self._in_vocab(tgt, self.decoder.embedding)
        features, _ = self.decoder(inputs, memory, features=True)
        weights, p_gen = self._copy_parts(features, inputs, memory, self.copy.project_memory(memory.states))
        return weights, p_gen.squeeze(-1)

    def decoder_self_attention(self, src: Tensor, src_mask: Tensor | None, tgt: Tensor) -> Tensor:
        """Decoder causal self-attention weights (B, L, H, T, T) over the decoder inputs tgt (B, T), for plots."""
        _, weights = self.decoder(tgt, self.encode(src, src_mask), need_attention=True, which="self")
        return weights

    def decode_step(self, tokens: Tensor, memory: Memory, state: TransformerState | None = None, *,
                    need_attention: bool = False) -> tuple[Tensor, TransformerState, Tensor | None]:
        state = self.decoder.init_state(memory) if state is None else state
        if self.copy is None:
            logits, attention = self.decoder(tokens, memory, state, need_attention)
            return logits, state, attention
        if state.copy_keys is None:
            state.copy_keys = self.copy.project_memory(memory.states)
        inputs = self._in_vocab(tokens, self.decoder.embedding)
        features, attention = self.decoder(inputs, memory, state, need_attention, features=True)
        return self._copy_output(features, inputs, memory, state.copy_keys), state, attention

    @property
    def output_layer(self) -> nn.Linear | None:
        """The Linear that turns ``forward(..., features=True)`` into logits (None with a copy head: its
        output mixes in the copy distribution, so the trainer scores ``forward``'s log-probabilities)."""
        return self.decoder.output if self.copy is None else None

    def forward(self, src: Tensor, src_mask: Tensor | None, tgt: Tensor, *, features: bool = False) -> Tensor:
        """Teacher forcing: tgt (B, T) are the decoder inputs (BOS + target[:-1]) -> logits (B, T, V).

        ``features=True``: the final hidden states (B, T, D) instead, for ``output_nll``.
        With a copy head: log-probabilities (B, T, V_ext) of the mixed distribution.
        """
        memory = self.encode(src, src_mask)
        if self.copy is None:
            out, _ = self.decoder(tgt, memory, features=features)
            return out
        inputs = self._in_vocab(tgt, self.decoder.embedding)
        x, _ = self.decoder(inputs, memory, features=True)
        return x if features else self._copy_output(x, inputs, memory, self.copy.project_memory(memory.states))
