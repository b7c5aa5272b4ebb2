"""Import a ``transformers`` checkpoint (a ``save_pretrained`` directory) as an ordinary seqmap run directory.

    RUN_DIR/config.yaml, RUN_DIR/tokenizer/ (kind hf: the model's tokenizer.json behind seqmap's ids),
    RUN_DIR/checkpoints/step-000000/ (model.safetensors, config, tokenizer): every verb opens it like a trained run.

Architectures, each mapped onto one of seqmap's own families (the options the mapping needs are
ordinary config options with their own tests):

* ``MarianMTModel`` (OPUS-MT) -> ``family: transformer``: post-LN, sinusoidal positions in the split
  layout (sines, then cosines), ``activation: silu`` (Marian's swish), embeddings scaled by sqrt(D) and
  shared by encoder and decoder, and by the output layer unless ``tie_word_embeddings: false`` gives it its own
  ``lm_head`` (``model.tie_embeddings: false``), ``output_bias`` for
  ``final_logits_bias``. Its tokenizer:
  ``source.spm`` / ``target.spm`` pieces numbered by ``vocab.json``; the source ends with ``</s>``
  (``append_eos``); decoding starts from Marian's pad embedding (seqmap's BOS row is given its weights).
* ``GPT2LMHeadModel`` -> ``family: lm``: learned positions, pre-LN, ``activation: gelu_tanh``, no
  embedding scaling, the output layer tied to the embedding (or its own ``lm_head`` with
  ``tie_word_embeddings: false``). A ``vocab_size`` padded above the tokenizer's size (to a multiple of 64,
  say) is trimmed: the rows past the tokenizer's last id are dropped, so seqmap's vocabulary is the tokenizer's
  and generation cannot emit an id the tokenizer cannot decode (they leave the softmax, as a ban before it
  would; a trained model gives them almost no probability). ``seqmap export hf`` writes the trimmed size.
  GPT-2's ``Conv1D`` layers store their weights transposed ((in, out)); its ``c_attn`` holds query, key and
  value side by side, as seqmap's fused ``in_proj`` does. A seqmap-trained LM's export (``seqmap_tokenizer``
  in ``config.json``) comes back with its own special ids and prompts (EOS, then the text).
* ``BertForSequenceClassification`` / ``BertModel`` -> ``family: classifier`` and
  ``ViTForImageClassification`` -> ``family: vit``: see ``seqmap.hub.encoders``.
* ``T5ForConditionalGeneration`` (T5 v1.0, v1.1, Flan-T5; mT5) -> ``family: transformer``: see ``seqmap.hub.t5``.

The vocabulary is re-ordered so the model's special tokens take seqmap's reserved ids (see
``seqmap.data.hf_tokenizer``); embedding rows move with the same map. Weights are read from
``model.safetensors`` only (no pickle). Every problem is one line naming the file or the field.
The model's generation defaults become the run's decode section, with ``beam_ranking: hf`` (beam search
as ``transformers``' ``generate``). Export (back to ``transformers``) is ``seqmap.hub.export``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seqmap.checkpoints import CheckpointManager
from seqmap.config import (
    MAX_LENGTH_PENALTY,
    ConfigError,
    DataConfig,
    DecodeConfig,
    ModelConfig,
    RunConfig,
    TrainConfig,
    save_config,
    to_dict,
)
from seqmap.data.hf_tokenizer import HFTokenizer
from seqmap.data.tokenizer_base import BOS
from seqmap.data.tokenizers import save_pair
from seqmap.hub.marian_names import all_layer_names, weight_shape
from seqmap.hub.source import (
    HubError,
    Imported,
    out_directory,
    read_json,
    read_weights,
    resolve_source,
    rows,
)
from seqmap.hub.t5 import UNMAPPED_TYPES, t5
from seqmap.models.builder import build_model
from seqmap.nn.positional import sinusoidal_table

SUPPORTED = {"gpt2": "GPT2LMHeadModel", "marian": "MarianMTModel", "bert": "BertForSequenceClassification / BertModel",
             "vit": "ViTForImageClassification", "t5": "T5ForConditionalGeneration",
             "mt5": "MT5ForConditionalGeneration"}


def _take(weights: dict[str, Tensor], name: str, shape: tuple[int, ...] | None, where: Path) -> Tensor:
    for key in (name, f"transformer.{name}"):
        if key in weights:
            t = weights[key]
            if shape is not None and tuple(t.shape) != shape:
                raise HubError(f"{where}: {key} has shape {tuple(t.shape)}, but config.json implies {shape}")
            return t.to(torch.float32)
    raise HubError(f"{where}: the weight {name} is missing (is config.json from the same model?)")


def _tied(config: dict[str, Any], where: Path) -> bool:
    """``tie_word_embeddings`` (default true): false means an output layer ``lm_head`` of its own, which the
    mapping must read rather than reuse the embedding table."""
    tied = config.get("tie_word_embeddings", True)
    if not isinstance(tied, bool):
        raise HubError(f"{where}: tie_word_embeddings must be true or false, got {tied!r}")
    return tied


# -- GPT-2 ---------------------------------------------------------------------------------------------


def _gpt2_tokenizer(source: Path, config: dict[str, Any]) -> HFTokenizer:
    eos = config.get("eos_token_id")
    if not isinstance(eos, int):
        raise HubError(f"{source / 'config.json'}: eos_token_id must be an integer id")
    roles, prompt = {"eos": eos}, "text"
    bos = config.get("bos_token_id")
    if isinstance(bos, int) and bos != eos:
        roles["bos"] = bos
    exported = config.get("seqmap_tokenizer")  # written by seqmap export hf for a seqmap-trained LM
    if exported is not None:
        if (not isinstance(exported, dict) or exported.get("prompt") not in ("text", "eos")
                or not isinstance(exported.get("roles"), dict)
                or not all(isinstance(i, int) for i in exported["roles"].values())):
            raise HubError(f"{source / 'config.json'}: seqmap_tokenizer must be {{\"roles\": {{ROLE: id}}, "
                           f"\"prompt\": \"text\" or \"eos\"}} as seqmap export hf writes it, got {exported!r}")
        roles, prompt = {**exported["roles"], "eos": eos}, exported["prompt"]
    tok = HFTokenizer.from_file(source / "tokenizer.json", roles, prompt=prompt)
    if tok.hf_vocab > config["vocab_size"]:  # fewer is padding (rows the tokenizer never produces): trimmed
        raise HubError(f"{source / 'tokenizer.json'} has {tok.hf_vocab} tokens but config.json's vocab_size is "
                       f"{config['vocab_size']}, so its ids from {config['vocab_size']} on have no embedding row: "
                       "the tokenizer does not belong to this model")
    return tok


def _gpt2(source: Path, config: dict[str, Any]) -> tuple[RunConfig, dict[str, Tensor], HFTokenizer]:
    where = source / "config.json"
    for key in ("n_embd", "n_head", "n_layer", "n_positions", "vocab_size"):
        if not isinstance(config.get(key), int) or config[key] <= 0:
            raise HubError(f"{where}: {key} must be a positive integer, got {config.get(key)!r}")
    act = config.get("activation_function", "gelu_new")
    activation = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}.get(act)
    if activation is None:
        raise HubError(f"{where}: activation_function {act!r} has no seqmap equivalent "
                       "(gelu_new, gelu_pytorch_tanh, gelu, relu)")
    if abs(config.get("layer_norm_epsilon", 1e-5) - 1e-5) > 1e-12:
        raise HubError(f"{where}: layer_norm_epsilon {config['layer_norm_epsilon']} differs from seqmap's 1e-5")
    if config.get("scale_attn_by_inverse_layer_idx") or config.get("reorder_and_upcast_attn"):
        raise HubError(f"{where}: scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not supported")
    tok = _gpt2_tokenizer(source, config)
    d, layers, v = config["n_embd"], config["n_layer"], config["vocab_size"]
    d_ff = config.get("n_inner") or 4 * d
    tied = _tied(config, where)
    model_cfg = ModelConfig(family="lm", tgt_vocab=tok.vocab_size, d_model=d, n_heads=config["n_head"], d_ff=d_ff,
                            dec_layers=layers, dropout=0.0, activation=activation, positional="learned",
                            max_len=config["n_positions"], norm_position="pre", scale_embeddings=False,
                            tie_embeddings=tied)
    w = read_weights(source)
    hf_ids = tok.hf_ids()
    out = {"embedding.table.weight": rows(_take(w, "wte.weight", (v, d), source), hf_ids),
           "positional.table.weight": _take(w, "wpe.weight", (config["n_positions"], d), source),
           "final_norm.weight": _take(w, "ln_f.weight", (d,), source),
           "final_norm.bias": _take(w, "ln_f.bias", (d,), source)}
    # tie_word_embeddings: false keeps its own output layer (lm_head.weight), which must not be replaced by wte
    out["output.weight"] = (out["embedding.table.weight"] if tied
                            else rows(_take(w, "lm_head.weight", (v, d), source), hf_ids))
    for i in range(layers):
        h, p = f"h.{i}", f"layers.{i}"
        out[f"{p}.self_attn.in_proj.weight"] = _take(w, f"{h}.attn.c_attn.weight", (d, 3 * d), source).t()
        out[f"{p}.self_attn.in_proj.bias"] = _take(w, f"{h}.attn.c_attn.bias", (3 * d,), source)
        out[f"{p}.self_attn.out_proj.weight"] = _take(w, f"{h}.attn.c_proj.weight", (d, d), source).t()
        out[f"{p}.self_attn.out_proj.bias"] = _take(w, f"{h}.attn.c_proj.bias", (d,), source)
        out[f"{p}.ff.w1.weight"] = _take(w, f"{h}.mlp.c_fc.weight", (d, d_ff), source).t()
        out[f"{p}.ff.w1.bias"] = _take(w, f"{h}.mlp.c_fc.bias", (d_ff,), source)
        out[f"{p}.ff.w2.weight"] = _take(w, f"{h}.mlp.c_proj.weight", (d_ff, d), source).t()
        out[f"{p}.ff.w2.bias"] = _take(w, f"{h}.mlp.c_proj.bias", (d,), source)
        for n in (1, 2):
            for part in ("weight", "bias"):
                out[f"{p}.norm{n}.{part}"] = _take(w, f"{h}.ln_{n}.{part}", (d,), source)
    data = DataConfig(task="lm", tokenizer="bpe", vocab_size=tok.vocab_size, context=config["n_positions"])
    cfg = RunConfig(model=model_cfg, data=data,
                    train=TrainConfig(max_steps=1, warmup=0, schedule="constant", lr=5e-5))
    return cfg, out, tok


# -- Marian (OPUS-MT) ------------------------------------------------------------------------------------


def _marian_tokenizers(source: Path, config: dict[str, Any]) -> tuple[HFTokenizer, HFTokenizer]:
    from seqmap.data.hf_tokenizer import MarianBackend

    where = source / "config.json"
    roles = {}
    for role, key in (("eos", "eos_token_id"), ("pad", "pad_token_id")):
        if not isinstance(config.get(key), int):
            raise HubError(f"{where}: {key} must be an integer id")
        roles[role] = config[key]
    if not (source / "vocab.json").is_file() and (source / "tokenizer.json").is_file():
        raise HubError(f"{source} holds tokenizer.json, not Marian's source.spm, target.spm and vocab.json (as "
                       "seqmap export hf writes a seqmap-trained Transformer); seqmap imports a MarianMT with a "
                       "MarianTokenizer's files: copy them in, or for a seqmap export use the run it came from")
    if config.get("decoder_start_token_id", config["pad_token_id"]) != config["pad_token_id"]:
        raise HubError(f"{where}: decoder_start_token_id differs from pad_token_id; seqmap maps Marian's decoder "
                       "start onto its BOS from the pad token")
    vocab_path = source / "vocab.json"
    if not vocab_path.is_file():
        raise HubError(f"{vocab_path} is missing (Marian's vocabulary); a MarianTokenizer's save_pretrained writes it")
    tokenizer_config = read_json(source / "tokenizer_config.json") if (source / "tokenizer_config.json").is_file() \
        else {}
    unk = tokenizer_config.get("unk_token", "<unk>")
    unk = unk.get("content", "<unk>") if isinstance(unk, dict) else unk
    src = MarianBackend.from_files(source / "source.spm", vocab_path, unk)
    tgt = MarianBackend.from_files(source / "target.spm", vocab_path, unk)
    roles["unk"] = src.vocab[unk]
    if src.vocab_size() != config["vocab_size"]:
        raise HubError(f"{vocab_path} has {src.vocab_size()} pieces but config.json's vocab_size is "
                       f"{config['vocab_size']}: the tokenizer does not belong to this model")
    return HFTokenizer(src, roles, append_eos=True), HFTokenizer(tgt, roles)


def _marian_table(w: dict[str, Tensor], tied: bool, shape: tuple[int, int], where: Path) -> Tensor:
    """The one embedding table of encoder and decoder. Tied, ``transformers`` saves ``shared`` alone; untied
    (``tie_word_embeddings: false``), ``transformers`` 5 ties nothing, and the tables the encoder and the decoder
    read are their own ``embed_tokens`` (``shared`` where a checkpoint has none), which must be one table."""
    if tied:
        return _take(w, "shared.weight", shape, where)
    encoder, decoder = (_take(w, name if name in w else "shared.weight", shape, where)
                        for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"))
    if not torch.equal(encoder, decoder):
        raise HubError(f"{where}: encoder.embed_tokens and decoder.embed_tokens differ; seqmap maps a MarianMT whose "
                       "encoder and decoder read one embedding table (as share_encoder_decoder_embeddings says)")
    return encoder


def _marian(source: Path, config: dict[str, Any]) -> tuple[RunConfig, dict[str, Tensor], HFTokenizer, HFTokenizer]:
    where = source / "config.json"
    for key in ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "encoder_ffn_dim",
                "max_position_embeddings", "vocab_size"):
        if not isinstance(config.get(key), int) or config[key] <= 0:
            raise HubError(f"{where}: {key} must be a positive integer, got {config.get(key)!r}")
    d, v = config["d_model"], config["vocab_size"]
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if config.get(b, config[a]) != config[a]:
            raise HubError(f"{where}: {a} and {b} differ; seqmap's Transformer uses one value for both")
    if config.get("decoder_vocab_size", v) != v or not config.get("share_encoder_decoder_embeddings", True):
        raise HubError(f"{where}: separate source and target vocabularies are not supported (share_encoder_decoder_"
                       "embeddings must be true)")
    act = config.get("activation_function", "swish")
    activation = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh"}.get(act)
    if activation is None:
        raise HubError(f"{where}: activation_function {act!r} has no seqmap equivalent (swish, gelu, relu)")
    if config.get("normalize_before") or config.get("add_final_layer_norm") or config.get("normalize_embedding"):
        raise HubError(f"{where}: pre-LN / embedding-norm Marian variants are not supported (OPUS-MT is post-LN)")
    tied = _tied(config, where)
    src_tok, tgt_tok = _marian_tokenizers(source, config)
    layers = (config["encoder_layers"], config["decoder_layers"])
    model_cfg = ModelConfig(family="transformer", src_vocab=src_tok.vocab_size, tgt_vocab=tgt_tok.vocab_size,
                            d_model=d, n_heads=config["encoder_attention_heads"], d_ff=config["encoder_ffn_dim"],
                            enc_layers=layers[0], dec_layers=layers[1], dropout=0.0, activation=activation,
                            positional="sinusoidal", sinusoidal_layout="split",
                            max_len=config["max_position_embeddings"], norm_position="post",
                            scale_embeddings=bool(config.get("scale_embedding", False)), tie_embeddings=tied,
                            share_vocab=True, output_bias=True)
    w = {k.removeprefix("model."): t for k, t in read_weights(source).items()}
    ours = sinusoidal_table(config["max_position_embeddings"], d, layout="split")
    for side in ("encoder", "decoder"):  # Marian's fixed table must be seqmap's split layout
        theirs = w.get(f"{side}.embed_positions.weight")
        if theirs is not None and (theirs.shape != ours.shape or (theirs.float() - ours).abs().max() > 1e-4):
            raise HubError(f"{source}: {side}.embed_positions is not the sinusoidal table (split layout) seqmap "
                           "computes; learned positions are not supported for Marian")
    hf_ids = src_tok.hf_ids()
    pad = config["pad_token_id"]
    shared = _marian_table(w, tied, (v, d), source)
    table = rows(shared, hf_ids)
    table[BOS] = shared[pad]  # the decoder starts from Marian's pad embedding
    bias = rows(_take(w, "final_logits_bias", (1, v), source).t(), hf_ids)[:, 0]
    # tie_word_embeddings: false keeps its own output layer (lm_head.weight), which must not be replaced by the table
    output = table if tied else rows(_take(w, "lm_head.weight", (v, d), source), hf_ids)
    out = {"encoder.embedding.table.weight": table, "decoder.embedding.table.weight": table,
           "decoder.output.weight": output, "decoder.output.bias": bias}
    for ours, theirs in all_layer_names(*layers):  # q, k, v concatenated as seqmap's in_proj
        parts = [_take(w, name, weight_shape(name, d, model_cfg.d_ff), source) for name in theirs]
        out[ours] = parts[0] if len(parts) == 1 else torch.cat(parts)
    data = DataConfig(task="translation", tokenizer="unigram", vocab_size=src_tok.vocab_size, joint_vocab=False,
                      max_len=config["max_position_embeddings"] - 1)
    cfg = RunConfig(model=model_cfg, data=data, train=TrainConfig(max_steps=1, warmup=1, lr=5e-5))
    return cfg, out, src_tok, tgt_tok


def _decode_config(source: Path, config: dict[str, Any], tok: HFTokenizer, family: str) -> DecodeConfig:
    """The model's generation defaults (``generation_config.json``, else ``config.json``) as seqmap's decode
    section, with ``beam_ranking: hf`` so that beam search ranks and stops as ``transformers``' ``generate``."""
    where = source / "generation_config.json"
    gen = read_json(where) if where.is_file() else config
    where = where if where.is_file() else source / "config.json"
    beams, alpha = gen.get("num_beams", 1), gen.get("length_penalty", 1.0)
    max_length, max_new = gen.get("max_length", 20), gen.get("max_new_tokens")
    if not isinstance(beams, int) or beams < 1 or not isinstance(max_length, int) or max_length < 2:
        raise HubError(f"{where}: num_beams must be a positive integer and max_length at least 2, got "
                       f"{beams!r} and {max_length!r}")
    if not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= MAX_LENGTH_PENALTY:
        raise HubError(f"{where}: length_penalty {alpha!r} is outside seqmap's range [0, {MAX_LENGTH_PENALTY:g}]")
    lengths = ({"max_new_tokens": max_new if isinstance(max_new, int) else max_length} if family == "lm"
               else {"max_len_a": 0.0, "max_len_b": max_length - 1})  # Marian's max_length counts its start token
    try:
        return DecodeConfig(beam_size=beams, length_penalty=float(alpha), beam_ranking="hf",
                            hf_early_stopping=gen.get("early_stopping", False),
                            no_repeat_ngram=gen.get("no_repeat_ngram_size") or 0,
                            absent_ids=[i for i in range(4) if tok.to_hf(i) is None], **lengths)
    except ConfigError as e:
        raise HubError(f"{where}: {e}") from None


def _mapped(directory: Path, config: dict[str, Any], model_type: str):
    """The ``Imported`` (config, weights, tokenizers, classes) of one architecture."""
    from seqmap.hub.encoders import bert, vit

    if model_type in ("t5", "mt5"):
        return t5(directory, config)
    if model_type == "marian":
        cfg, weights, src_tok, tok = _marian(directory, config)
        return Imported(cfg, weights, src_tok, tok)
    if model_type == "gpt2":
        cfg, weights, tok = _gpt2(directory, config)
        return Imported(cfg, weights, tok, tok)
    return bert(directory, config) if model_type == "bert" else vit(directory, config)


def import_hf(source: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Convert the pretrained model in ``source`` into a seqmap run directory ``out_dir``; returns its checkpoint.

    A ``BertModel`` (no classification head) imports with a newly initialised head over its ``num_labels``
    classes, ready for ``seqmap train --init``.
    """
    directory = resolve_source(source)
    config = read_json(directory / "config.json")
    model_type = config.get("model_type")
    if model_type in UNMAPPED_TYPES:
        raise HubError(f"{directory / 'config.json'}: model_type {model_type!r} is not supported: "
                       f"{UNMAPPED_TYPES[model_type]}")
    if model_type not in SUPPORTED:
        raise HubError(f"{directory / 'config.json'}: model_type {model_type!r} is not supported; seqmap imports "
                       f"{', '.join(f'{v} ({k})' for k, v in SUPPORTED.items())}")
    imported = _mapped(directory, config, model_type)
    cfg, weights, tok = imported.cfg, imported.weights, imported.tgt_tok
    if cfg.model.family in ("transformer", "lm"):
        cfg.decode = _decode_config(directory, config, tok, cfg.model.family)
    model = build_model(cfg.model)
    state = model.state_dict()
    untrained = {"head.weight", "head.bias"} if model_type == "bert" else set()  # BertModel has no head
    missing = sorted(set(state) - set(weights) - untrained)
    if missing:
        raise HubError(f"{directory}: no weights for {', '.join(missing[:3])} (an architecture option seqmap does "
                       "not map)")
    with torch.no_grad():
        for name, tensor in state.items():
            if name in weights:
                tensor.copy_(weights[name])
    out = out_directory(out_dir)
    for name in ("checkpoints", "config.yaml", "tokenizer"):  # what the import writes: never over a user's files
        if (out / name).exists():
            raise HubError(f"{out} already holds {name}; choose another --out directory")
    tok_dir = out / "tokenizer"
    if tok is not None:
        save_pair(imported.src_tok, tok, tok_dir)
    tok_dir.mkdir(parents=True, exist_ok=True)
    if imported.labels is not None:
        from seqmap.data.pipeline import LABELS_FILE

        imported.labels.save(tok_dir / LABELS_FILE)
    save_config(cfg, out / "config.yaml")
    state = {"step": 0, "imported_from": str(source), "untrained_head": bool(untrained - set(weights))}
    return CheckpointManager(out).save(0, model=model, trainer_state=state, config=to_dict(cfg), tokenizer_dir=tok_dir)
