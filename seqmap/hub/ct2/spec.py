"""A seqmap-trained Transformer or decoder-only LM, written straight into CTranslate2's model specification.

``ctranslate2.specs.TransformerSpec`` or ``TransformerDecoderModelSpec`` (CTranslate2's public API for
converters), weight by weight: pre- or post-LN, LayerNorm or RMSNorm with the run's epsilon, sinusoidal (either
column layout) or learned positions as an explicit table (an LM also: none, rope, ALiBi, and grouped key/value
heads), the run's embedding scale, relu, gelu, gelu_tanh, silu, swiglu, geglu or geglu_tanh, linears with or
without biases, attention scaled or not (``scale_attention``), heads of their own width (``head_dim``), shared or
separate vocabularies, a tied or separate output layer and its bias, a translator's output rescale
(``scale_output``). What CTranslate2 cannot express is refused in one line naming the option.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqmap.config import ModelConfig
from seqmap.data.tokenizer_base import BOS, EOS, UNK
from seqmap.hub.source import HubError
from seqmap.nn.layers import GATED

# seqmap's feed-forward activations and CTranslate2's names for them (ctranslate2.specs.Activation)
_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "silu": "SWISH", "swiglu": "SWISH",
                "geglu": "GELU", "geglu_tanh": "GELUTanh"}
# the families CTranslate2 takes, and the kind of model each is to it
KINDS = {"transformer": "encoder-decoder Transformer", "lm": "decoder-only model"}


def _spec_compatible(m: ModelConfig) -> str | None:
    """Why a seqmap Transformer or decoder-only LM has no CTranslate2 equivalent (None when it has one)."""
    positions = ("sinusoidal", "learned", "none", "rope", "alibi") if m.family == "lm" else ("sinusoidal", "learned")
    if m.positional not in positions:
        return (f"model.positional={m.positional!r} (CTranslate2's {KINDS[m.family]} takes {', '.join(positions)})")
    if m.activation not in _ACTIVATIONS:
        return f"model.activation={m.activation!r} (CTranslate2 takes {', '.join(_ACTIVATIONS)} here)"
    if m.family == "transformer" and m.n_kv_heads not in (None, m.n_heads):
        return f"model.n_kv_heads={m.n_kv_heads} (exported with one key/value head per query head only)"
    if m.copy:
        return "model.copy=true (CTranslate2 has no pointer-generator copy head)"
    return None


def _vocabulary(tok, side: str) -> list[str]:
    """The tokenizer's pieces in id order; CTranslate2 maps token strings to ids, so they must be distinct."""
    pieces = tok.pieces(range(tok.vocab_size))
    if len(set(pieces)) != len(pieces):
        seen: set[str] = set()
        twice = next(p for p in pieces if p in seen or seen.add(p))
        raise HubError(f"the {side} tokenizer ({tok.kind}) names two ids {twice!r}; CTranslate2 needs distinct "
                       "token strings")
    return pieces


def _positions(positional, rows: int, d_model: int) -> Tensor:
    """The (rows, D) table a positional module adds to the embeddings at positions 0..rows-1."""
    with torch.no_grad():
        return positional.embed(torch.zeros(1, rows, d_model)).squeeze(0)


class _Weights:
    """Copies a run's weights, by seqmap's state-dict names, into the layers of a CTranslate2 specification."""

    def __init__(self, run):
        self.m = run.cfg.model
        # copies: CTranslate2 quantizes a specification's arrays in place, which would change the run's own weights
        self.sd = {k: v.detach().to(torch.float32, copy=True).contiguous() for k, v in run.model.state_dict().items()}

    def linear(self, dst, prefix: str, rows: slice = slice(None)) -> None:
        dst.weight = self.sd[f"{prefix}.weight"][rows].contiguous()
        if f"{prefix}.bias" in self.sd:
            dst.bias = self.sd[f"{prefix}.bias"][rows].contiguous()

    def norm(self, dst, prefix: str) -> None:
        dst.gamma = self.sd[f"{prefix}.weight"]
        if f"{prefix}.bias" in self.sd:  # RMSNorm has none
            dst.beta = self.sd[f"{prefix}.bias"]

    def attention(self, dst, prefix: str, cross: bool = False) -> None:
        if cross:  # CTranslate2: queries, then keys and values fused, then the output
            q_width = self.m.n_heads * (self.m.head_dim or self.m.d_model // self.m.n_heads)
            self.linear(dst.linear[0], f"{prefix}.in_proj", slice(0, q_width))
            self.linear(dst.linear[1], f"{prefix}.in_proj", slice(q_width, None))
        else:  # queries, keys and values fused as in seqmap (rows: H heads, then Hkv, then Hkv)
            self.linear(dst.linear[0], f"{prefix}.in_proj")
        self.linear(dst.linear[-1], f"{prefix}.out_proj")
        if not self.m.scale_attention:
            dst.queries_scale = 1.0

    def feed_forward(self, dst, prefix: str) -> None:
        if self.m.activation in GATED:  # seqmap's w1 holds W_gate then W_up; CTranslate2 keeps them apart
            f = self.m.d_ff
            self.linear(dst.linear_0, f"{prefix}.w1", slice(0, f))
            self.linear(dst.linear_0_noact, f"{prefix}.w1", slice(f, None))
        else:
            self.linear(dst.linear_0, f"{prefix}.w1")
        self.linear(dst.linear_1, f"{prefix}.w2")

    def embeddings(self, stack, prefix: str, ours, table: bool = True) -> None:
        """Token table, embedding scale and (``table``) the positions added to the embeddings."""
        embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
        embeddings.weight = self.sd[f"{prefix}embedding.table.weight"]
        stack.scale_embeddings = float(ours.embedding.scale)
        if table:
            stack.position_encodings.encodings = _positions(ours.positional, self.m.max_len, self.m.d_model)

    def output(self, projection, prefix: str) -> None:
        projection.weight = self.sd[f"{prefix}output.weight"]
        if self.m.output_bias:
            projection.bias = self.sd[f"{prefix}output.bias"]


def _refuse_incompatible(run) -> None:
    why = _spec_compatible(run.cfg.model)
    if why is not None:
        raise HubError(f"{run.checkpoint}: {why}; this model has no CTranslate2 equivalent")


def _common(m: ModelConfig) -> dict:
    """``from_config`` options both specifications share."""
    from ctranslate2.specs import Activation

    return {"pre_norm": m.norm_position == "pre", "activation": getattr(Activation, _ACTIVATIONS[m.activation]),
            "ffn_glu": m.activation in GATED, "rms_norm": m.norm == "rmsnorm"}


def transformer_spec(run):
    """A seqmap-trained Transformer as a ``ctranslate2.specs.TransformerSpec`` (not yet validated or saved)."""
    from ctranslate2.specs import TransformerSpec

    _refuse_incompatible(run)
    m = run.cfg.model
    src_tokens, tgt_tokens = _vocabulary(run.src_tok, "source"), _vocabulary(run.tgt_tok, "target")
    spec = TransformerSpec.from_config((m.enc_layers, m.dec_layers), m.n_heads, **_common(m))
    w = _Weights(run)
    for side, stack, layers in (("encoder", spec.encoder, m.enc_layers), ("decoder", spec.decoder, m.dec_layers)):
        w.embeddings(stack, f"{side}.", getattr(run.model, side))
        if m.norm_position == "pre":
            w.norm(stack.layer_norm, f"{side}.final_norm")
        for i in range(layers):
            layer, p = stack.layer[i], f"{side}.layers.{i}"
            w.attention(layer.self_attention, f"{p}.self_attn")
            w.norm(layer.self_attention.layer_norm, f"{p}.norm1")
            if side == "decoder":
                w.attention(layer.attention, f"{p}.cross_attn", cross=True)
                w.norm(layer.attention.layer_norm, f"{p}.norm2")
            w.feed_forward(layer.ffn, f"{p}.ff")
            w.norm(layer.ffn.layer_norm, f"{p}.norm3" if side == "decoder" else f"{p}.norm2")
    w.output(spec.decoder.projection, "decoder.")
    if m.scale_output:
        spec.decoder.scale_outputs = m.d_model**-0.5
    spec.config.layer_norm_epsilon = m.norm_eps
    pieces = run.tgt_tok.pieces([BOS, EOS, UNK])
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = pieces
    spec.config.decoder_start_token = pieces[0]
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    return spec


def lm_spec(run):
    """A seqmap-trained decoder-only LM as a ``ctranslate2.specs.TransformerDecoderModelSpec`` (not yet validated
    or saved). Positions added to the embeddings (sinusoidal, learned, none) are written as a table of
    ``model.max_len`` rows, the most tokens the export reads; rope (half-split, as seqmap's) and ALiBi are
    computed in its attention, at any length."""
    from ctranslate2.specs import TransformerDecoderModelSpec

    _refuse_incompatible(run)
    m = run.cfg.model
    tokens = _vocabulary(run.tgt_tok, "LM")
    options = _common(m)
    if m.n_kv_heads not in (None, m.n_heads):
        options["num_heads_kv"] = m.n_kv_heads
    if m.positional == "rope":
        options.update(rotary_dim=m.d_model // m.n_heads, rotary_interleave=False, rotary_base=m.rope_base)
    elif m.positional == "alibi":
        options.update(alibi=True)
    spec = TransformerDecoderModelSpec.from_config(m.dec_layers, m.n_heads, **options)
    w, decoder = _Weights(run), spec.decoder
    w.embeddings(decoder, "", run.model, table=m.positional not in ("rope", "alibi"))
    if m.norm_position == "pre":
        w.norm(decoder.layer_norm, "final_norm")
    for i in range(m.dec_layers):
        layer, p = decoder.layer[i], f"layers.{i}"
        w.attention(layer.self_attention, f"{p}.self_attn")
        w.norm(layer.self_attention.layer_norm, f"{p}.norm1")
        w.feed_forward(layer.ffn, f"{p}.ff")
        w.norm(layer.ffn.layer_norm, f"{p}.norm2")
    w.output(decoder.projection, "")
    spec.config.layer_norm_epsilon = m.norm_eps
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = run.tgt_tok.pieces([BOS, EOS, UNK])
    spec.register_vocabulary(tokens)
    return spec
