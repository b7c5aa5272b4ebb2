"""The convolutional encoder-decoder, ConvS2S (Gehring et al. 2017), speaking the model protocol.

    src (B, S) -> ConvS2SEncoder -> keys z (B, S, E), values z + e (B, S, E)
    tgt (B, T) + memory -> ConvS2SDecoder -> logits (B, T, V)

Both stacks embed tokens and positions (e, g: (., ., E)), map them to C channels, run L gated
convolutions (``seqmap.nn.glu_conv``) with residuals scaled by sqrt(0.5), and map back to E. The
encoder's convolutions are centred; it zeroes padded positions before each, so padding reads as the
zeros beyond a sentence's end. The decoder's are causal, and every decoder layer attends to the source
(multi-step attention), with h the layer's GLU output:

    d = (W_d h + b_d + g) sqrt(0.5)               query: decoder state + target embedding     (B, t, E)
    a = softmax_j(d . z_j)                         masked source positions get exactly 0
    c = sqrt(m) sum_j a_j (z_j + e_j)              m sqrt(1/m) = sqrt(m), m the real source length
    h = (h + W_c c + b_c) sqrt(0.5)                the context joins the layer's output
    x = (x + h) sqrt(0.5)                          the residual

The decoder ends with a Linear to E, dropout and the output Linear to V (tied to the target embedding
with ``model.tie_embeddings``). Decoding one token at a time keeps each layer's k - 1 previous
convolution inputs (``ConvS2SState``); keys and values are read from the memory, which the decoding
loops reorder with the state whenever rows change sources.

Training as in the paper: embeddings from N(0, 0.1), the variance-keeping init of
``seqmap.nn.glu_conv``, and the encoder's gradient scaled: the L_dec attentions each read z twice
(keys, and inside the values), so the gradient reaching z is multiplied by 1 / (2 L_dec), as in the
authors' fairseq code (the paper says "by the number of attention mechanisms"); the source
embedding's own path to the values is not scaled. Weight normalisation, which fairseq also applies,
is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from seqmap.models.protocol import Memory, check_mask
from seqmap.nn.attention import key_mask, scaled_dot_product_attention
from seqmap.nn.dropout import Dropout
from seqmap.nn.glu_conv import CausalGLUConv, GLUConv, scaled_linear
from seqmap.nn.layers import TokenEmbedding
from seqmap.nn.positional import PositionalEncoding

SQRT_HALF = math.sqrt(0.5)


class _ScaleGradient(torch.autograd.Function):
    """Identity forward; the backward multiplies the gradient by ``scale``."""

    @staticmethod
    def forward(ctx, x: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        return x.clone()

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return grad * ctx.scale, None


def scale_gradient(x: Tensor, scale: float) -> Tensor:
    """x unchanged, its gradient times ``scale`` (identity when no gradient is recorded)."""
    if scale == 1.0 or not (torch.is_grad_enabled() and x.requires_grad):
        return x
    return _ScaleGradient.apply(x, scale)


def _zero_padding(x: Tensor, padding: Tensor | None) -> Tensor:
    """x (B, S, C) with the positions where ``padding`` (B, S, 1) is True set to zero."""
    return x if padding is None else x.masked_fill(padding, 0.0)


class ConvS2SEncoder(nn.Module):
    """Embeddings, a Linear E -> C, L centred GLU convolutions with residuals, a Linear C -> E.

    ``grad_scale``: the factor applied to the gradient of the output z (1 / (2 L_dec), module docstring).
    """

    def __init__(self, embedding: TokenEmbedding, positional: PositionalEncoding, layers: list[GLUConv],
                 hidden_size: int, dropout: float = 0.0, grad_scale: float = 1.0):
        super().__init__()
        emb_size = embedding.d_model
        self.embedding, self.positional = embedding, positional
        self.dropout = Dropout(dropout)
        self.fc_in = scaled_linear(emb_size, hidden_size, dropout)
        self.layers = nn.ModuleList(layers)
        self.fc_out = scaled_linear(hidden_size, emb_size)
        self.grad_scale = grad_scale

    def forward(self, src: Tensor, src_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """src (B, S), src_mask (B, S) True at real tokens -> (keys z (B, S, E), values z + e (B, S, E)),
        zero at padded positions."""
        check_mask(src_mask)
        padding = None if src_mask is None else ~src_mask[:, :, None]  # (B, S, 1) True at padding
        e = self.dropout(self.positional.embed(self.embedding(src)))  # (B, S, E)
        x = self.fc_in(e)  # (B, S, C)
        for conv in self.layers:
            x = (x + conv(_zero_padding(x, padding))) * SQRT_HALF
        z = scale_gradient(_zero_padding(self.fc_out(x), padding), self.grad_scale)  # (B, S, E)
        return z, _zero_padding(z + e, padding)


class ConvS2SAttention(nn.Module):
    """Multi-step attention of one decoder layer: its GLU output h and the target embedding g query the
    encoder's keys; the context comes back to h (module docstring). Single-headed, unscaled dot products."""

    def __init__(self, hidden_size: int, emb_size: int):
        super().__init__()
        self.query = scaled_linear(hidden_size, emb_size)  # W_d
        self.out = scaled_linear(emb_size, hidden_size)  # W_c

    def forward(self, h: Tensor, g: Tensor, memory: Memory, mask: Tensor | None, source_scale: Tensor, *,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """h (B, t, C), g (B, t, E); mask (B, 1, 1, S) True at real source tokens; source_scale (B, 1, 1)
        sqrt(m) -> (h with the context added (B, t, C), weights (B, 1, t, S) or None)."""
        d = (self.query(h) + g) * SQRT_HALF  # (B, t, E)
        c, weights = scaled_dot_product_attention(d[:, None], memory.states[:, None], memory.values[:, None], mask,
                                                  scale=1.0, need_weights=need_weights)  # (B, 1, t, E)
        return (h + self.out(c[:, 0] * source_scale)) * SQRT_HALF, weights


class ConvS2SDecoderLayer(nn.Module):
    """A causal GLU convolution, multi-step attention, and the residual around both."""

    def __init__(self, conv: CausalGLUConv, attention: ConvS2SAttention):
        super().__init__()
        self.conv, self.attention = conv, attention

    def forward(self, x: Tensor, g: Tensor, memory: Memory, mask: Tensor | None, source_scale: Tensor,
                window: Tensor | None = None, *, need_weights: bool = False
                ) -> tuple[Tensor, Tensor, Tensor | None]:
        """x (B, t, C), g (B, t, E), window (B, k - 1, C) or None -> (x (B, t, C), window, weights or None)."""
        h, window = self.conv(x, window)
        h, weights = self.attention(h, g, memory, mask, source_scale, need_weights=need_weights)
        return (x + h) * SQRT_HALF, window, weights


@dataclass
class ConvS2SState:
    """Decoder state: per layer, the k - 1 convolution inputs before the next token (the causal window).

    Keys, values and the source mask stay in the ``Memory``, which the decoding loops pass to every
    step and reorder with the state whenever rows change sources; so ``same_sources`` changes nothing.
    """

    windows: list[Tensor | None]  # per layer (B, k - 1, C); None before the first token (zeros)
    position: int = 0

    def reorder(self, index: Tensor, *, same_sources: bool = False) -> None:
        """Keep batch rows ``index`` (B',) in that order (in place)."""
        self.windows = [None if w is None else w.index_select(0, index) for w in self.windows]


def source_attention_mask(memory: Memory) -> tuple[Tensor | None, Tensor]:
    """(the (B, 1, 1, S) mask of real source tokens, or None without padding; sqrt(m) per row (B, 1, 1))."""
    states = memory.states
    if memory.mask is None:
        return None, states.new_full((states.size(0), 1, 1), math.sqrt(states.size(1)))
    lengths = memory.mask.sum(dim=1).to(states.dtype)  # (B,)
    return key_mask(memory.mask), lengths.sqrt()[:, None, None]


class ConvS2SDecoder(nn.Module):
    """Embeddings, a Linear E -> C, L causal layers with attention, a Linear C -> E, dropout, the output layer."""

    def __init__(self, embedding: TokenEmbedding, positional: PositionalEncoding,
                 layers: list[ConvS2SDecoderLayer], hidden_size: int, output: nn.Linear, dropout: float = 0.0):
        super().__init__()
        emb_size = embedding.d_model
        self.embedding, self.positional = embedding, positional
        self.dropout = Dropout(dropout)
        self.fc_in = scaled_linear(emb_size, hidden_size, dropout)
        self.layers = nn.ModuleList(layers)
        self.fc_out = scaled_linear(hidden_size, emb_size)
        self.output = output

    def forward(self, tokens: Tensor, memory: Memory, state: ConvS2SState | None = None,
                need_attention: bool = False, features: bool = False) -> tuple[Tensor, Tensor | None]:
        """tokens (B, t) -> (logits (B, t, V), attention (B, L, 1, t, S) or None).

        Without a state (teacher forcing) every layer starts from a zero window; with one, the new tokens
        continue its windows and positions. ``features=True``: (B, t, E) before the output layer.
        """
        offset = 0 if state is None else state.position
        g = self.dropout(self.positional.embed(self.embedding(tokens), offset))  # (B, t, E)
        mask, source_scale = source_attention_mask(memory)
        x = self.fc_in(g)  # (B, t, C)
        windows = [None] * len(self.layers) if state is None else state.windows
        weights = []
        for i, layer in enumerate(self.layers):
            x, windows[i], w = layer(x, g, memory, mask, source_scale, windows[i], need_weights=need_attention)
            weights.append(w)
        if state is not None:
            state.position += tokens.size(1)
        x = self.dropout(self.fc_out(x))  # (B, t, E)
        attention = torch.stack(weights, dim=1) if need_attention else None
        return (x if features else self.output(x)), attention


class ConvS2S(nn.Module):
    """Convolutional encoder-decoder implementing ``encode`` / ``decode_step`` / ``forward``."""

    def __init__(self, encoder: ConvS2SEncoder, decoder: ConvS2SDecoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def encode(self, src: Tensor, src_mask: Tensor | None) -> Memory:
        """src (B, S) -> Memory(states = keys z (B, S, E), values = z + e (B, S, E), mask)."""
        keys, values = self.encoder(src, src_mask)
        return Memory(states=keys, mask=src_mask, values=values)

    def decode_step(self, tokens: Tensor, memory: Memory, state: ConvS2SState | None = None, *,
                    need_attention: bool = False) -> tuple[Tensor, ConvS2SState, Tensor | None]:
        """tokens (B, t) -> (logits (B, t, V), state, attention (B, L, 1, t, S) or None)."""
        state = ConvS2SState([None] * len(self.decoder.layers)) if state is None else state
        logits, attention = self.decoder(tokens, memory, state, need_attention)
        return logits, state, attention

    @property
    def output_layer(self) -> nn.Linear:
        """The Linear that turns ``forward(..., features=True)`` into logits."""
        return self.decoder.output

    def forward(self, src: Tensor, src_mask: Tensor | None, tgt: Tensor, *, features: bool = False) -> Tensor:
        """Teacher forcing: tgt (B, T) are the decoder inputs (BOS + target[:-1]) -> logits (B, T, V).

        ``features=True``: the states before the output layer (B, T, E) instead, for ``output_nll``.
        """
        out, _ = self.decoder(tgt, self.encode(src, src_mask), features=features)
        return out
