"""The RNN encoder-decoder family, speaking the model protocol.

    src (B, S) -> RNNEncoder -> states (B, S, D_enc), initial decoder state (via the bridge)
    tgt (B, T) + memory -> RNNDecoder -> logits (B, T, V)

One decoder, three ways to use the source, chosen when it is built:

- no attention (Sutskever et al. 2014): the source reaches the decoder only
  through its initial state. With ``context_every_step`` the fixed context c
  (the top layer of that initial state, c = W h_enc, an encoder summary as in Cho et al. 2014)
  also joins the input at every step and the output layer.
- Bahdanau et al. (2015): additive attention queried by the *previous* top
  hidden state; the context joins the RNN input and the output layer.
- Luong et al. (2015) dot / general / concat: attention queried by the *current*
  top hidden state h; the attentional vector h~ = tanh(W_c [c; h]) feeds the
  output layer and, with input feeding, the next step's input.

Teacher forcing and incremental decoding run through ``RNNDecoder.forward``, so
they cannot disagree. Where the RNN input does not depend on the previous step's
output (no attention, or Luong without input feeding) the whole chunk of tokens
goes through the RNN at once; otherwise tokens are taken one at a time.

Modules receive ready parts; ``build_rnn`` wires them from a ``ModelConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seqmap.config import ConfigError, ModelConfig
from seqmap.models.protocol import Memory, check_mask
from seqmap.nn.dropout import Dropout
from seqmap.nn.layers import TokenEmbedding
from seqmap.nn.rnn_attention import AdditiveAttention, ConcatAttention, DotAttention, GeneralAttention, RNNAttention

Hidden = Tensor | tuple[Tensor, Tensor]  # (L, B, H), or (h, c) for an LSTM; batch on dim 1


def _top(hidden: Hidden) -> Tensor:
    """The top layer's hidden state (B, H) (the h of an LSTM's (h, c))."""
    h = hidden[0] if isinstance(hidden, tuple) else hidden
    return h[-1]


def _select(value, dim: int, index: Tensor):
    """index_select on a tensor or a tuple of tensors; None passes through."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(v.index_select(dim, index) for v in value)
    return value.index_select(dim, index)


class Bridge(nn.Module):
    """Encoder final state -> decoder initial state, one Linear per decoder layer.

    Both directions of an encoder layer are concatenated, (L_enc * dirs, B, H_enc)
    -> (L_enc, B, dirs * H_enc), and decoder layer i reads encoder layer
    max(0, L_enc - L_dec + i): top layers line up, and a deeper decoder reuses
    encoder layer 0 below. An LSTM's cell state gets its own Linear.

    The map is affine, Sutskever et al.'s copy of the encoder state generalised
    to other widths, not tanh(W h) as in Bahdanau et al.: with a tanh the initial
    state saturated early in training (every source mapped to the same +-1
    state) and the decoder without attention stopped reading the source.
    """

    def __init__(self, enc_layers: int, directions: int, enc_hidden: int, dec_layers: int, dec_hidden: int,
                 lstm: bool):
        super().__init__()
        self.enc_layers, self.directions = enc_layers, directions
        self.sources = [max(0, enc_layers - dec_layers + i) for i in range(dec_layers)]
        width = directions * enc_hidden
        self.h = nn.ModuleList(nn.Linear(width, dec_hidden) for _ in range(dec_layers))
        self.c = nn.ModuleList(nn.Linear(width, dec_hidden) for _ in range(dec_layers)) if lstm else None

    def _map(self, final: Tensor, layers: nn.ModuleList) -> Tensor:
        _, b, h = final.shape
        per_layer = final.view(self.enc_layers, self.directions, b, h).transpose(1, 2).reshape(
            self.enc_layers, b, self.directions * h)  # (L_enc, B, dirs * H_enc)
        return torch.stack([linear(per_layer[j]) for linear, j in zip(layers, self.sources, strict=True)])

    def forward(self, final: Hidden) -> Hidden:
        if self.c is None:
            return self._map(final, self.h)
        h, c = final
        return self._map(h, self.h), self._map(c, self.c)


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse the first ``lengths[b]`` positions of each row of ``x`` (B, S, ...); padding stays in place.

    Its own inverse: ``reverse_padded(reverse_padded(x, n), n) == x``.
    """
    pos = torch.arange(x.size(1), device=x.device)[None, :]  # (1, S)
    n = lengths[:, None].to(pos.device)
    index = torch.where(pos < n, n - 1 - pos, pos)  # (B, S)
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


class RNNEncoder(nn.Module):
    """Embedding, dropout, a (bi)directional multi-layer RNN/LSTM/GRU over packed sequences, and the bridge.

    Sources must be right-padded (``src_mask`` True on a prefix of each row).
    Packing makes padding invisible: real positions and the final state are the
    same with any amount of padding; padded positions of ``states`` are zero.
    An empty source (a row of padding, or a batch of width S = 0) ends where an RNN
    over no steps ends, in its initial (zero) state, which the bridge maps as any other.

    ``reverse_source`` feeds each source to the RNN last token first (Sutskever
    et al. 2014: the first source words end up next to the first target words).
    The states are put back in source order, so attention, and its plots, see
    position i at position i either way.
    """

    def __init__(self, embedding: nn.Module, rnn: nn.RNNBase, bridge: Bridge, dropout: float = 0.0,
                 reverse_source: bool = False):
        super().__init__()
        if not rnn.batch_first:
            raise ValueError("RNNEncoder needs an RNN built with batch_first=True")
        self.embedding, self.rnn, self.bridge = embedding, rnn, bridge
        self.dropout = Dropout(dropout)
        self.reverse_source = reverse_source

    def forward(self, src: Tensor, src_mask: Tensor | None) -> tuple[Tensor, Hidden]:
        """src (B, S), src_mask (B, S) True at real tokens -> (states (B, S, D_enc), decoder initial state)."""
        check_mask(src_mask)
        x = self.dropout(self.embedding(src))  # (B, S, E)
        if src.size(1) == 0:  # no source token at all: the RNN would refuse to run no step
            return x.new_zeros(src.size(0), 0, self._width()), self.bridge(self._initial(src.size(0), x))
        if src_mask is None:  # no padding: reversing is a flip
            states, final = self.rnn(x.flip(1) if self.reverse_source else x)
            return (states.flip(1) if self.reverse_source else states), self.bridge(final)
        lengths = src_mask.sum(dim=1)
        if not torch.equal(src_mask, torch.arange(src.size(1), device=src.device)[None, :] < lengths[:, None]):
            raise ValueError("RNNEncoder needs right-padded sources: src_mask must be True on a prefix of each row")
        if self.reverse_source:
            x = reverse_padded(x, lengths)
        # pack_padded_sequence rejects empty rows: an all-padding row reads one pad token, then its final state
        # is put back to the initial (zero) one (its states are zeroed below and masked out of attention).
        packed = pack_padded_sequence(x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        states, final = self.rnn(packed)
        states, _ = pad_packed_sequence(states, batch_first=True, total_length=src.size(1))  # (B, S, D_enc)
        if self.reverse_source:
            states = reverse_padded(states, lengths)
        read = (lengths > 0)[None, :, None]  # (1, B, 1): rows with a token, on the batch dim of the final state
        final = tuple(f * read for f in final) if isinstance(final, tuple) else final * read
        return states * src_mask[:, :, None], self.bridge(final)

    def _width(self) -> int:
        """D_enc: the width of the states, both directions."""
        return self.rnn.hidden_size * (2 if self.rnn.bidirectional else 1)

    def _initial(self, batch: int, like: Tensor) -> Hidden:
        """The RNN's initial state (zeros), (L * dirs, B, H), or (h, c) for an LSTM: its final state after no step."""
        h = like.new_zeros(self.rnn.num_layers * (2 if self.rnn.bidirectional else 1), batch, self.rnn.hidden_size)
        return (h, torch.zeros_like(h)) if isinstance(self.rnn, nn.LSTM) else h


@dataclass
class RNNState:
    """Decoder state: the RNN hidden state, the previous attentional vector, and the source it reads.

    Attributes:
        hidden: (L, B, H), or (h, c) for an LSTM; batch on dim 1.
        feed: (B, H) previous attentional vector h~ (Luong input feeding), else None.
        keys: (B, S, D_enc) encoder states (attention keys and values), else None.
        keys_proj: the attention's ``precompute(keys)``, computed once per source, else None.
        mask: (B, S) True at real source tokens, or None.
        context: (B, H) fixed context (no attention, ``context_every_step``), else None.
        position: target tokens consumed so far.
    """

    hidden: Hidden
    feed: Tensor | None = None
    keys: Tensor | None = None
    keys_proj: Tensor | None = None
    mask: Tensor | None = None
    context: Tensor | None = None
    position: int = 0

    def reorder(self, index: Tensor, *, same_sources: bool = False) -> None:
        """Keep batch rows ``index`` (B',), e.g. the surviving beams (in place).

        same_sources: the caller promises that every row keeps its source (beam
        search reordering the beams of each sentence among themselves), so the
        per-source tensors (keys, their projection, mask, fixed context) stay as they are.
        """
        self.hidden = _select(self.hidden, 1, index)
        self.feed = _select(self.feed, 0, index)
        if same_sources:
            return
        self.keys = _select(self.keys, 0, index)
        self.keys_proj = _select(self.keys_proj, 0, index)
        self.mask = _select(self.mask, 0, index)
        self.context = _select(self.context, 0, index)


class RNNDecoder(nn.Module):
    """Embedding, an RNN/LSTM/GRU stack, optional attention, output projection to the vocabulary.

    Args:
        embedding: target token embedding (B, t) -> (B, t, E).
        rnn: ``batch_first`` RNN whose input width is E plus what the mode adds:
            D_enc (Bahdanau context), H (input feeding) or H (``context_every_step``).
        output: features -> logits (B, t, V). Feature width: H (none, Luong),
            H + D_enc (Bahdanau), 2 H (none with ``context_every_step``).
        attention: None (no attention) or a score module from ``seqmap.nn.rnn_attention``.
        combine: None for Bahdanau (attention before the RNN step), or W_c, a
            Linear(D_enc + H, H), for Luong (attention after the step, h~ = tanh(W_c [c; h])).
        input_feeding: Luong only: h~ of the previous step joins the next input.
        context_every_step: no attention only: the fixed context joins every input and the output.
        dropout: on embeddings and on the features before the output layer.
    """

    def __init__(self, embedding: nn.Module, rnn: nn.RNNBase, output: nn.Module, *,
                 attention: RNNAttention | None = None, combine: nn.Linear | None = None,
                 input_feeding: bool = False, context_every_step: bool = False, dropout: float = 0.0):
        super().__init__()
        if not rnn.batch_first:
            raise ValueError("RNNDecoder needs an RNN built with batch_first=True")
        if combine is not None and attention is None:
            raise ValueError("RNNDecoder: combine (Luong W_c) needs an attention module")
        if input_feeding and combine is None:
            raise ValueError("RNNDecoder: input_feeding applies to Luong attention only (pass combine)")
        if context_every_step and attention is not None:
            raise ValueError("RNNDecoder: context_every_step applies without attention only")
        self.embedding, self.rnn, self.output = embedding, rnn, output
        self.attention, self.combine = attention, combine
        self.input_feeding, self.context_every_step = input_feeding, context_every_step
        self.dropout = Dropout(dropout)
        # Bahdanau attention and input feeding make step t's input depend on step t-1.
        self.one_token_at_a_time = attention is not None and (combine is None or input_feeding)

    def init_state(self, memory: Memory) -> RNNState:
        """Start from the encoder's bridged final state; project the source keys once."""
        if memory.final is None:
            raise ValueError("RNNDecoder needs memory.final (the initial hidden state) from an RNN encoder")
        attend = self.attention is not None
        feed = None
        if self.input_feeding:
            feed = _top(memory.final).new_zeros(_top(memory.final).shape)  # (B, H)
        return RNNState(
            hidden=memory.final,
            feed=feed,
            keys=memory.states if attend else None,
            keys_proj=self.attention.precompute(memory.states) if attend else None,
            mask=memory.mask if attend else None,
            context=_top(memory.final) if self.context_every_step else None,
        )

    def forward(self, tokens: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None]:
        """tokens (B, t) -> (logits (B, t, V), attention weights (B, t, S) or None); advances ``state``."""
        x = self.dropout(self.embedding(tokens))  # (B, t, E)
        if self.one_token_at_a_time:
            steps = [self._chunk(x[:, i:i + 1], state) for i in range(tokens.size(1))]
            features = torch.cat([f for f, _ in steps], dim=1)
            weights = torch.cat([w for _, w in steps], dim=1)
        else:
            features, weights = self._chunk(x, state)
        state.position += tokens.size(1)
        return self.output(self.dropout(features)), weights

    def _chunk(self, x: Tensor, state: RNNState) -> tuple[Tensor, Tensor | None]:
        """Embedded tokens (B, t, E) -> (features (B, t, F), weights (B, t, S) or None).

        t == 1 whenever ``one_token_at_a_time``.
        """
        b, t, _ = x.shape
        inputs, extra, weights = [x], [], None
        if self.attention is not None and self.combine is None:  # Bahdanau: query = previous top hidden state
            context, weights = self.attention(_top(state.hidden)[:, None], state.keys, state.mask, state.keys_proj)
            inputs.append(context)  # (B, 1, D_enc)
            extra.append(context)
        if self.input_feeding:
            inputs.append(state.feed[:, None])  # (B, 1, H)
        if state.context is not None:
            context = state.context[:, None].expand(b, t, -1)  # (B, t, H)
            inputs.append(context)
            extra.append(context)
        h, state.hidden = self.rnn(torch.cat(inputs, dim=-1), state.hidden)  # (B, t, H)
        if self.combine is not None:  # Luong: query = current top hidden state
            context, weights = self.attention(h, state.keys, state.mask, state.keys_proj)
            h = torch.tanh(self.combine(torch.cat([context, h], dim=-1)))  # h~ (B, t, H)
            if self.input_feeding:
                state.feed = h[:, -1]
        return torch.cat([h, *extra], dim=-1), weights


class RNNSeq2Seq(nn.Module):
    """RNN encoder-decoder implementing ``encode`` / ``decode_step`` / ``forward``."""

    def __init__(self, encoder: RNNEncoder, decoder: RNNDecoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def encode(self, src: Tensor, src_mask: Tensor | None) -> Memory:
        """src (B, S), src_mask (B, S) -> Memory(states (B, S, D_enc), mask, final = decoder initial state)."""
        states, final = self.encoder(src, src_mask)
        return Memory(states=states, mask=src_mask, final=final)

    def decode_step(self, tokens: Tensor, memory: Memory, state: RNNState | None = None, *,
                    need_attention: bool = False) -> tuple[Tensor, RNNState, Tensor | None]:
        """tokens (B, t) -> (logits (B, t, V), state, attention (B, 1, 1, t, S) or None).

        Attention is None for a decoder without attention, even when asked for.
        """
        state = self.decoder.init_state(memory) if state is None else state
        logits, weights = self.decoder(tokens, state)
        attention = weights[:, None, None] if need_attention and weights is not None else None
        return logits, state, attention

    def forward(self, src: Tensor, src_mask: Tensor | None, tgt: Tensor) -> Tensor:
        """Teacher forcing: tgt (B, T) are the decoder inputs (BOS + target[:-1]) -> logits (B, T, V)."""
        logits, _ = self.decoder(tgt, self.decoder.init_state(self.encode(src, src_mask)))
        return logits


# -- builder --------------------------------------------------------------------

_CELLS = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}
_LUONG = ("dot", "general", "concat")


def _rnn(cfg: ModelConfig, input_size: int, layers: int, bidirectional: bool) -> nn.RNNBase:
    return _CELLS[cfg.rnn_cell](input_size, cfg.hidden_size, num_layers=layers, batch_first=True,
                                bidirectional=bidirectional, dropout=cfg.dropout if layers > 1 else 0.0)


def _rnn_attention(cfg: ModelConfig, key_size: int) -> RNNAttention | None:
    h = cfg.hidden_size
    if cfg.rnn_attention == "bahdanau":
        return AdditiveAttention(h, key_size, h)
    if cfg.rnn_attention == "dot":
        if key_size != h:
            raise ConfigError(
                f"model.rnn_attention=dot needs the encoder state width ({key_size} = hidden_size x 2 directions) "
                f"to equal the decoder hidden_size ({h}); set model.bidirectional=false or use "
                "model.rnn_attention=general / concat / bahdanau"
            )
        return DotAttention(h, key_size)
    if cfg.rnn_attention == "general":
        return GeneralAttention(h, key_size)
    if cfg.rnn_attention == "concat":
        return ConcatAttention(h, key_size, h)
    return None


def _rnn_output(feature_size: int, cfg: ModelConfig, embedding: TokenEmbedding) -> nn.Module:
    """Features -> logits; tied to the target embedding through a Linear to emb_size when widths differ."""
    if not cfg.tie_embeddings:
        return nn.Linear(feature_size, cfg.tgt_vocab)
    tied = nn.Linear(cfg.emb_size, cfg.tgt_vocab, bias=False)
    tied.weight = embedding.weight
    return tied if feature_size == cfg.emb_size else nn.Sequential(nn.Linear(feature_size, cfg.emb_size), tied)


def build_rnn(cfg: ModelConfig) -> RNNSeq2Seq:
    """RNN encoder-decoder from ``cfg``.

    Reads rnn_cell, emb_size, hidden_size, bidirectional, rnn_attention,
    input_feeding (Luong dot/general/concat only; ignored otherwise),
    context_every_step (rnn_attention=none only; ignored otherwise), reverse_source, enc_layers,
    dec_layers, dropout, src_vocab, tgt_vocab, pad_id, tie_embeddings and
    share_vocab. Embeddings are not scaled (scale_embeddings is for Transformers).
    """
    if cfg.share_vocab and cfg.src_vocab != cfg.tgt_vocab:
        raise ConfigError(f"model.share_vocab=true needs src_vocab == tgt_vocab (got {cfg.src_vocab} and "
                          f"{cfg.tgt_vocab}); use a joint vocabulary or set model.share_vocab=false")
    e, h = cfg.emb_size, cfg.hidden_size
    directions = 2 if cfg.bidirectional else 1
    key_size = directions * h
    tgt_embedding = TokenEmbedding(cfg.tgt_vocab, e, cfg.pad_id, scale=False)
    src_embedding = tgt_embedding if cfg.share_vocab else TokenEmbedding(cfg.src_vocab, e, cfg.pad_id, scale=False)
    bridge = Bridge(cfg.enc_layers, directions, h, cfg.dec_layers, h, lstm=cfg.rnn_cell == "lstm")
    encoder = RNNEncoder(src_embedding, _rnn(cfg, e, cfg.enc_layers, cfg.bidirectional), bridge, cfg.dropout,
                         reverse_source=cfg.reverse_source)

    attention = _rnn_attention(cfg, key_size)
    luong = cfg.rnn_attention in _LUONG
    input_feeding = luong and cfg.input_feeding
    context_every_step = cfg.rnn_attention == "none" and cfg.context_every_step
    input_size = e + (key_size if cfg.rnn_attention == "bahdanau" else 0) + (h if input_feeding else 0) \
        + (h if context_every_step else 0)
    feature_size = h + (key_size if cfg.rnn_attention == "bahdanau" else 0) + (h if context_every_step else 0)
    decoder = RNNDecoder(
        tgt_embedding, _rnn(cfg, input_size, cfg.dec_layers, bidirectional=False),
        _rnn_output(feature_size, cfg, tgt_embedding),
        attention=attention, combine=nn.Linear(key_size + h, h, bias=False) if luong else None,
        input_feeding=input_feeding, context_every_step=context_every_step, dropout=cfg.dropout)
    return RNNSeq2Seq(encoder, decoder)
