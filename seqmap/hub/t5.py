"""T5 (``T5ForConditionalGeneration``; mT5's ``MT5ForConditionalGeneration``) to and from ``family: transformer``.

T5 is seqmap's encoder-decoder Transformer with these options (each an ordinary config option):

* pre-LN with RMSNorm (``norm: rmsnorm``: T5LayerNorm scales without a bias and subtracts no mean), epsilon
  ``layer_norm_epsilon``, and a final norm in each stack;
* ``positional: t5``: one relative-position bias table per stack, held by T5's first layer and used by every
  layer; bidirectional buckets in the encoder, unidirectional in decoder self-attention, none in cross-attention
  (``t5_buckets``, ``t5_max_distance``);
* ``scale_attention: false`` (no 1 / sqrt(d_kv): T5's initialisation holds it), ``linear_bias: false``,
  ``head_dim: d_kv`` where ``num_heads * d_kv`` is not ``d_model`` (Flan-T5-small);
* ``scale_embeddings: false``; one table for encoder, decoder and (tied) output (``share_vocab``);
* ``feed_forward_proj``: relu (v1.0) -> ``relu``; gated-gelu (v1.1, Flan-T5: gelu_new) -> ``geglu_tanh``;
  gated-silu -> ``swiglu``; gelu, gelu_new, silu -> ``gelu``, ``gelu_tanh``, ``silu``;
* the output layer: the embedding table (no ``lm_head.weight``, or one equal to it) or its own ``lm_head``;
  ``scale_output: true`` where T5 rescales the decoder output by d_model**-0.5 (v1.0's tied output:
  ``scale_decoder_outputs``, else ``tie_word_embeddings`` not false).

Vocabulary: T5's ``tokenizer.json`` behind seqmap's ids through the reserved-id table of ``HFTokenizer``: pad 0,
eos 1 and unk 2 take seqmap's PAD, EOS and UNK, and every other id moves up by one (seqmap = T5 + 1). T5 has no
BOS and starts decoding from pad (``decoder_start_token_id``), so seqmap's BOS row is T5's pad row; sources end
with ``</s>``. A ``vocab_size`` padded above the tokenizer (32128 for 32100 tokens) is trimmed as for GPT-2.

Refused in one line naming what the checkpoint has: an encoder alone (``T5EncoderModel``) or another head, a
feed-forward projection with no seqmap equivalent, a relative-position bias in a later layer (UMT5's), a decoder
start other than pad. ``export_t5`` writes the way back (``seqmap export hf``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seqmap.config import ConfigError, DataConfig, ModelConfig, RunConfig, TrainConfig
from seqmap.data.hf_tokenizer import HFTokenizer
from seqmap.data.tokenizer_base import BOS, EOS, PAD, UNK, TokenizerError
from seqmap.hub.source import HubError, Imported, read_json, read_weights, rows
from seqmap.nn.layers import GATED

# feed_forward_proj -> seqmap's activation (transformers reads "gated-gelu" as gated gelu_new)
FEED_FORWARD = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "silu": "silu", "swish": "silu",
                "gated-gelu": "geglu_tanh", "gated-gelu_new": "geglu_tanh", "gated-gelu_pytorch_tanh": "geglu_tanh",
                "gated-silu": "swiglu", "gated-swish": "swiglu"}
TO_FEED_FORWARD = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "silu", "geglu_tanh": "gated-gelu",
                   "swiglu": "gated-silu"}  # seqmap's activation -> feed_forward_proj, for the export
ARCHITECTURES = ("T5ForConditionalGeneration", "T5WithLMHeadModel", "T5Model", "MT5ForConditionalGeneration",
                 "MT5Model")  # T5WithLMHeadModel: the first name of T5ForConditionalGeneration, in older configs
UNMAPPED_TYPES = {  # model types close to T5 that seqmap's Transformer cannot represent exactly
    "umt5": "UMT5 gives every layer its own relative-position bias, where seqmap's stacks share one",
    "longt5": "LongT5's local and transient-global attention has no seqmap equivalent",
}


# -- the names of one layer, both ways -------------------------------------------------------------------


def _layer_names(side: str, i: int, gated: bool) -> list[tuple[str, list[str]]]:
    """(seqmap name, the T5 names it concatenates along rows) for layer i of the encoder or the decoder."""
    h, p = f"{side}.block.{i}.layer", f"{side}.layers.{i}"

    def attention(theirs: str, ours: str) -> list[tuple[str, list[str]]]:  # q, k, v fused as seqmap's in_proj
        return [(f"{p}.{ours}.in_proj.weight", [f"{theirs}.{x}.weight" for x in "qkv"]),
                (f"{p}.{ours}.out_proj.weight", [f"{theirs}.o.weight"])]

    names = [*attention(f"{h}.0.SelfAttention", "self_attn"), (f"{p}.norm1.weight", [f"{h}.0.layer_norm.weight"])]
    ff = 1
    if side == "decoder":
        names += [*attention(f"{h}.1.EncDecAttention", "cross_attn"),
                  (f"{p}.norm2.weight", [f"{h}.1.layer_norm.weight"])]
        ff = 2
    dense = f"{h}.{ff}.DenseReluDense"
    w1 = [f"{dense}.wi_0.weight", f"{dense}.wi_1.weight"] if gated else [f"{dense}.wi.weight"]  # gate, then up
    names += [(f"{p}.ff.w1.weight", w1), (f"{p}.ff.w2.weight", [f"{dense}.wo.weight"]),
              (f"{p}.norm{ff + 1}.weight", [f"{h}.{ff}.layer_norm.weight"])]
    return names


def _names(m: ModelConfig) -> list[tuple[str, list[str]]]:
    """Every layer's names, the stacks' final norms and relative-position tables (T5's first layer holds each)."""
    gated = m.activation in GATED
    names = []
    for side, layers in (("encoder", m.enc_layers), ("decoder", m.dec_layers)):
        names.append((f"{side}.positional.table.weight",
                      [f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]))
        names.append((f"{side}.final_norm.weight", [f"{side}.final_layer_norm.weight"]))
        for i in range(layers):
            names += _layer_names(side, i, gated)
    return names


def _shape(name: str, d: int, inner: int, ff: int, heads: int, buckets: int) -> tuple[int, ...]:
    """The shape of a T5 weight (``inner`` = num_heads * d_kv)."""
    last = name.rsplit(".", 2)[-2]
    return {"q": (inner, d), "k": (inner, d), "v": (inner, d), "o": (d, inner), "wi": (ff, d), "wi_0": (ff, d),
            "wi_1": (ff, d), "wo": (d, ff), "relative_attention_bias": (buckets, heads)}.get(last, (d,))


# -- import ------------------------------------------------------------------------------------------------


def _ints(config: dict[str, Any], where: Path, *keys: str) -> None:
    for key in keys:
        if not isinstance(config.get(key), int) or config[key] <= 0:
            raise HubError(f"{where}: {key} must be a positive integer, got {config.get(key)!r}")


def _tokenizer(source: Path, config: dict[str, Any]) -> tuple[HFTokenizer, HFTokenizer]:
    """T5's tokenizer.json as (source side: ends with </s>, target side); pad, eos, unk on seqmap's ids."""
    where = source / "config.json"
    path = source / "tokenizer.json"
    if not path.is_file():
        what = "spiece.model but no tokenizer.json" if (source / "spiece.model").is_file() else "no tokenizer.json"
        raise HubError(f"{source} holds {what}; seqmap reads T5's tokenizer.json: write it where transformers has "
                       "sentencepiece and protobuf, AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR)")
    roles = {}
    for role, key in (("pad", "pad_token_id"), ("eos", "eos_token_id")):
        if not isinstance(config.get(key), int):
            raise HubError(f"{where}: {key} must be an integer id, got {config.get(key)!r}")
        roles[role] = config[key]
    start = config.get("decoder_start_token_id", roles["pad"])
    if start != roles["pad"]:
        raise HubError(f"{where}: decoder_start_token_id {start!r} differs from pad_token_id {roles['pad']}; seqmap "
                       "maps T5's decoder start onto its BOS from the pad token")
    try:
        plain = HFTokenizer.from_file(path, {})
    except TokenizerError as e:
        raise HubError(str(e)) from None
    tok_config = read_json(source / "tokenizer_config.json") if (source / "tokenizer_config.json").is_file() else {}
    unk = tok_config.get("unk_token", "<unk>")
    unk = unk.get("content", "<unk>") if isinstance(unk, dict) else unk
    unk_id = plain.tok.token_to_id(str(unk))
    if unk_id is None:
        raise HubError(f"{path} has no {unk} token (T5's unknown token): the tokenizer does not belong to this model")
    roles["unk"] = unk_id
    try:
        src, tgt = HFTokenizer(plain.backend, roles, append_eos=True), HFTokenizer(plain.backend, roles)
    except TokenizerError as e:
        raise HubError(f"{where}: {e}") from None
    if tgt.hf_vocab > config["vocab_size"]:  # fewer is padding (rows the tokenizer never produces): trimmed
        raise HubError(f"{path} has {tgt.hf_vocab} tokens but config.json's vocab_size is {config['vocab_size']}: "
                       "the tokenizer does not belong to this model")
    return src, tgt


def _check(config: dict[str, Any], where: Path) -> str:
    """The checkpoint's refusals (one line each); returns seqmap's activation."""
    names = config.get("architectures") or []
    other = [name for name in names if name not in ARCHITECTURES]
    if other:
        what = "an encoder alone, without the decoder" if other[0].endswith("EncoderModel") else "another head"
        raise HubError(f"{where}: architectures {other[0]} is {what}; seqmap imports T5ForConditionalGeneration "
                       "(an encoder-decoder that generates text)")
    if config.get("is_encoder_decoder") is False:
        raise HubError(f"{where}: is_encoder_decoder is false; seqmap imports T5's encoder-decoder")
    _ints(config, where, "d_model", "d_kv", "d_ff", "num_layers", "num_heads", "vocab_size",
          "relative_attention_num_buckets", "relative_attention_max_distance")
    if config.get("num_decoder_layers") is not None:
        _ints(config, where, "num_decoder_layers")
    proj = config.get("feed_forward_proj", "relu")
    if proj not in FEED_FORWARD:
        raise HubError(f"{where}: feed_forward_proj {proj!r} has no seqmap equivalent ({', '.join(FEED_FORWARD)})")
    buckets, distance = config["relative_attention_num_buckets"], config["relative_attention_max_distance"]
    if buckets < 4 or distance <= buckets // 2:
        raise HubError(f"{where}: relative_attention_num_buckets {buckets} and relative_attention_max_distance "
                       f"{distance}: seqmap's T5 buckets need at least 4 buckets and a distance above half of them")
    eps = config.get("layer_norm_epsilon", 1e-6)
    if not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise HubError(f"{where}: layer_norm_epsilon must be a number in (0, 1), got {eps!r}")
    for key in ("tie_word_embeddings", "scale_decoder_outputs"):
        if key in config and not isinstance(config[key], bool):
            raise HubError(f"{where}: {key} must be true or false, got {config[key]!r}")
    return FEED_FORWARD[proj]


def _table(w: dict[str, Tensor], v: int, d: int, source: Path) -> Tensor:
    """The one embedding table: ``shared``, with which any ``embed_tokens`` saved beside it must agree."""
    names = [n for n in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight") if n in w]
    if not names:
        raise HubError(f"{source}: the weight shared.weight is missing (is config.json from the same model?)")
    tables = [w[n] for n in names]
    for name, t in zip(names, tables, strict=True):
        if tuple(t.shape) != (v, d):
            raise HubError(f"{source}: {name} has shape {tuple(t.shape)}, but config.json implies {(v, d)}")
    if any(not torch.equal(t, tables[0]) for t in tables[1:]):
        raise HubError(f"{source}: {' and '.join(names)} differ; seqmap maps a T5 whose encoder and decoder read one "
                       "embedding table")
    return tables[0].to(torch.float32)


def t5(source: Path, config: dict[str, Any]) -> Imported:
    """The ``Imported`` run of a T5 checkpoint (see the module docstring)."""
    where = source / "config.json"
    activation = _check(config, where)
    src_tok, tok = _tokenizer(source, config)
    d, heads, d_kv, v = config["d_model"], config["num_heads"], config["d_kv"], config["vocab_size"]
    layers = (config["num_layers"], config.get("num_decoder_layers") or config["num_layers"])
    w = read_weights(source)
    later = sorted(k for k in w if "relative_attention_bias" in k and ".block.0." not in k)
    if later:
        raise HubError(f"{source}: {later[0]} is a relative-position bias in a later layer (UMT5's kind); seqmap's "
                       "T5 stacks share the first layer's")
    shared = _table(w, v, d, source)
    if config.get("tie_word_embeddings") is False and "lm_head.weight" not in w:
        raise HubError(f"{source}: tie_word_embeddings is false but model.safetensors has no lm_head.weight")
    tied = "lm_head.weight" not in w or torch.equal(w["lm_head.weight"], w.get("shared.weight", shared))
    if config.get("model_type") == "mt5":  # released untied and not rescaled, which transformers 5 assumes of all
        if config.get("tie_word_embeddings") is True:
            raise HubError(f"{where}: an mT5 with tie_word_embeddings true is rescaled by transformers 4 and not by "
                           "transformers 5; seqmap maps mT5 as released (tie_word_embeddings false)")
        scale = False
    else:
        scale = config.get("scale_decoder_outputs", config.get("tie_word_embeddings", True) is not False)
    try:
        model_cfg = ModelConfig(
            family="transformer", src_vocab=tok.vocab_size, tgt_vocab=tok.vocab_size, d_model=d, n_heads=heads,
            head_dim=None if heads * d_kv == d else d_kv, d_ff=config["d_ff"], enc_layers=layers[0],
            dec_layers=layers[1], dropout=0.0, activation=activation, positional="t5",
            t5_buckets=config["relative_attention_num_buckets"],
            t5_max_distance=config["relative_attention_max_distance"], norm_position="pre", norm="rmsnorm",
            norm_eps=float(config.get("layer_norm_epsilon", 1e-6)), scale_embeddings=False, tie_embeddings=tied,
            share_vocab=True, linear_bias=False, scale_attention=False, scale_output=scale)
    except ConfigError as e:
        raise HubError(f"{where}: {e}") from None
    hf_ids = tok.hf_ids()
    table = rows(shared, hf_ids)
    table[BOS] = shared[config["pad_token_id"]]  # T5 starts decoding from its pad embedding
    out = {"encoder.embedding.table.weight": table, "decoder.embedding.table.weight": table,
           "decoder.output.weight": table if tied else rows(_weight(w, "lm_head.weight", (v, d), source), hf_ids)}
    for ours, theirs in _names(model_cfg):
        out[ours] = torch.cat([_weight(w, name, _shape(name, d, heads * d_kv, config["d_ff"], heads,
                                                       model_cfg.t5_buckets), source) for name in theirs])
    data = DataConfig(task="translation", tokenizer="unigram", vocab_size=tok.vocab_size, joint_vocab=False,
                      max_len=config["n_positions"] if isinstance(config.get("n_positions"), int) else 512)
    cfg = RunConfig(model=model_cfg, data=data, train=TrainConfig(max_steps=1, warmup=0, schedule="constant",
                                                                  lr=1e-4))
    return Imported(cfg, out, src_tok, tok)


def _weight(w: dict[str, Tensor], name: str, shape: tuple[int, ...], source: Path) -> Tensor:
    if name not in w:
        raise HubError(f"{source}: the weight {name} is missing (is config.json from the same model?)")
    if tuple(w[name].shape) != shape:
        raise HubError(f"{source}: {name} has shape {tuple(w[name].shape)}, but config.json implies {shape}")
    return w[name].to(torch.float32)


# -- export ------------------------------------------------------------------------------------------------


def t5_compatible(m: ModelConfig) -> str | None:
    """Why a seqmap Transformer with T5's positions has no T5 equivalent (None when it has one)."""
    wanted = {"norm_position": "pre", "norm": "rmsnorm", "scale_embeddings": False, "linear_bias": False,
              "scale_attention": False, "share_vocab": True, "output_bias": False, "copy": False}
    for key, value in wanted.items():
        if getattr(m, key) != value:
            return f"model.{key}={getattr(m, key)!r} (T5 has {key} {value!r})"
    if m.activation not in TO_FEED_FORWARD:
        return f"model.activation={m.activation!r} (T5's feed-forward takes {', '.join(TO_FEED_FORWARD)})"
    if m.n_kv_heads not in (None, m.n_heads):
        return f"model.n_kv_heads={m.n_kv_heads} (T5 has one key/value head per query head)"
    if m.scale_output and not m.tie_embeddings:
        return ("model.scale_output=true with model.tie_embeddings=false (transformers rescales T5's decoder "
                "output only where the output layer is the embedding table)")
    return None


def export_t5(run, opening):
    """The run as a ``transformers`` T5ForConditionalGeneration (in memory; ``seqmap.hub.export`` saves it).

    ``opening``: ``seqmap.hub.export._opening``. A tied output without T5's rescale is written as an ``lm_head``
    equal to the table with ``tie_word_embeddings: false``, the one way both transformers 4 and 5 read it.
    """
    from transformers import T5Config, T5ForConditionalGeneration

    m, sd, order, hf_tok = opening(run, t5_compatible, "T5")
    if hf_tok is not None:
        pad, eos, start = hf_tok.roles["pad"], hf_tok.roles["eos"], hf_tok.roles["pad"]
    else:  # seqmap's own ids: the decoder starts from BOS
        pad, eos, start = PAD, EOS, BOS
    inner = m.n_heads * (m.head_dim or m.d_model // m.n_heads)
    tied = m.tie_embeddings and m.scale_output  # T5's tie: one table and the rescale; else an lm_head of its own
    config = T5Config(vocab_size=len(order), d_model=m.d_model, d_kv=inner // m.n_heads, d_ff=m.d_ff,
                      num_layers=m.enc_layers, num_decoder_layers=m.dec_layers, num_heads=m.n_heads,
                      relative_attention_num_buckets=m.t5_buckets, relative_attention_max_distance=m.t5_max_distance,
                      dropout_rate=m.dropout, layer_norm_epsilon=m.norm_eps,
                      feed_forward_proj=TO_FEED_FORWARD[m.activation],
                      pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=start, tie_word_embeddings=tied)
    model = T5ForConditionalGeneration(config).eval()
    index = torch.tensor(order)
    lm_head = sd["decoder.output.weight"][index]
    if hf_tok is not None:  # T5's decoder starts from its pad token's embedding: seqmap's BOS row
        index = index.clone()
        index[pad] = BOS
    table = sd["decoder.embedding.table.weight"][index]
    weights = {"shared.weight": table, "encoder.embed_tokens.weight": table, "decoder.embed_tokens.weight": table}
    for ours, theirs in _names(m):
        sizes = [_shape(name, m.d_model, inner, m.d_ff, m.n_heads, m.t5_buckets)[0] for name in theirs]
        weights.update(zip(theirs, sd[ours].split(sizes), strict=True))
    if not tied:  # its own Parameter, so that transformers 5 (which ties T5 whatever the config says) saves it
        model.lm_head.weight = torch.nn.Parameter(lm_head.clone())
        model.config.tie_word_embeddings = False
    missing, unexpected = model.load_state_dict({k: t.contiguous() for k, t in weights.items()}, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:  # an internal invariant: the mapping above names every weight
        raise HubError(f"export mapping incomplete: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.config.scale_decoder_outputs = m.scale_output
    # seqmap never generates PAD, BOS or UNK; transformers should not either
    banned = [PAD, BOS, UNK] if hf_tok is None else [hf_tok.roles[r] for r in ("pad", "unk") if r in hf_tok.roles]
    model.generation_config.bad_words_ids = [[t] for t in banned]
    return model


def export_t5_tokenizer(run, out: Path) -> bool:
    """An imported T5 tokenizer goes back as T5's tokenizer.json and tokenizer_config.json; False for any other
    tokenizer (the caller writes it as for Marian)."""
    tok = run.tgt_tok
    if not isinstance(tok, HFTokenizer) or tok.backend.name != "tokenizers" or "pad" not in tok.roles:
        return False
    from transformers import T5Tokenizer

    hf = tok.tok
    names = {f"{role}_token": hf.id_to_token(tok.roles[role]) for role in ("pad", "eos", "unk")}
    sentinels = [t for t in hf.get_vocab(with_added_tokens=True) if t.startswith("<extra_id_")]
    T5Tokenizer(tokenizer_object=hf, extra_ids=0, additional_special_tokens=sentinels or None,
                **names).save_pretrained(out)
    return True
