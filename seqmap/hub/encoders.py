"""Pretrained encoders as seqmap classifiers: BERT -> ``family: classifier``, ViT -> ``family: vit``.

* ``BertForSequenceClassification`` (and ``BertModel``, whose head then starts untrained): post-LN, learned
  absolute positions, ``embedding_norm`` (BERT's LayerNorm over word + position + token-type embeddings),
  ``activation: gelu`` (exact), ``norm_eps`` 1e-12, ``pooler: tanh``. BERT's ``[CLS]`` token becomes the
  classifier's class vector (its word embedding); ``[SEP]`` ends every text (seqmap's EOS, ``append_eos``).
  seqmap classifies one text, whose tokens all have token type 0, so the type-0 embedding is added into every
  row of the word table (and the class vector); the other token types are dropped.
  The tokenizer is the model's ``tokenizer.json`` (WordPiece) behind seqmap's Tokenizer interface.
* ``ViTForImageClassification``: pre-LN with a final norm, learned positions (the class vector's first), its
  ``Conv2d`` patch projection as seqmap's ``PatchEmbedding`` Linear (the same channel, row, column order), the
  image processor's rescale and normalization (``preprocessor_config.json``) as the model's pixel mean and std
  on the 0..255 scale. Images are resized to the model's ``image_size`` as seqmap reads them.

The class names are the model's ``id2label``. Weights are read under their current ``transformers`` names
and, for ViT, the names older checkpoints on the Hub use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seqmap.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from seqmap.data.hf_tokenizer import HFTokenizer
from seqmap.data.labels import LabelSet
from seqmap.data.tokenizer_base import TokenizerError
from seqmap.hub.source import HubError, Imported, read_json, read_weights, rows

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "silu": "silu", "swish": "silu"}


def _ints(config: dict[str, Any], where: Path, *keys: str) -> None:
    for key in keys:
        if not isinstance(config.get(key), int) or config[key] <= 0:
            raise HubError(f"{where}: {key} must be a positive integer, got {config.get(key)!r}")


def _weight(w: dict[str, Tensor], names: list[str], shape: tuple[int, ...], where: Path) -> Tensor:
    """The first of ``names`` present (each tried bare and under the model's prefix), checked against ``shape``."""
    for name in names:
        if name in w:
            t = w[name]
            if tuple(t.shape) != shape:
                raise HubError(f"{where}: {name} has shape {tuple(t.shape)}, but config.json implies {shape}")
            return t.to(torch.float32)
    raise HubError(f"{where}: the weight {names[0]} is missing (is config.json from the same model?)")


def _common(config: dict[str, Any], where: Path) -> tuple[str, float]:
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise HubError(f"{where}: hidden_act {act!r} has no seqmap equivalent ({', '.join(ACTIVATIONS)})")
    eps = config.get("layer_norm_eps", 1e-12)
    if not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise HubError(f"{where}: layer_norm_eps must be a number in (0, 1), got {eps!r}")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise HubError(f"{where}: hidden_size {config['hidden_size']} is not divisible by num_attention_heads "
                       f"{config['num_attention_heads']}")
    return ACTIVATIONS[act], float(eps)


def _architecture(config: dict[str, Any], where: Path, classifier: str, bare: tuple[str, ...], task: str) -> None:
    """A checkpoint whose head is not ``classifier`` (one of the ``bare`` models gets an untrained head) is one line:
    a token-classification or question-answering BERT lacks the pooler a classifier reads."""
    names = config.get("architectures") or []
    other = [name for name in names if name not in (classifier, *bare)]
    if other:
        raise HubError(f"{where}: architectures {other[0]} is not supported; seqmap imports {task} classifiers "
                       f"({classifier}, or {' / '.join(bare)} with an untrained head)")


def _labels(config: dict[str, Any], where: Path) -> LabelSet:
    id2label = config.get("id2label") or {str(i): f"LABEL_{i}" for i in range(config.get("num_labels", 2))}
    try:
        names = tuple(str(id2label[k]) for k in sorted(id2label, key=int))
        if sorted(int(k) for k in id2label) != list(range(len(names))):
            raise ValueError
        return LabelSet(names)
    except (ValueError, TypeError):  # LabelSet's DataError too: fewer than two, or repeated, names
        raise HubError(f"{where}: id2label must number its classes 0..N-1 (N >= 2) with distinct names") from None


def _layers(w: dict[str, Tensor], names: dict[str, list[str]], n: int, d: int, ff: int, where: Path
            ) -> dict[str, Tensor]:
    """Encoder layers: ``names`` maps each seqmap part to its hf name templates ({i}: the layer)."""
    shapes = {"q": (d, d), "k": (d, d), "v": (d, d), "o": (d, d), "w1": (ff, d), "w2": (d, ff),
              "n1": (d,), "n2": (d,)}
    out = {}
    for i in range(n):
        def get(part, kind, i=i):
            shape = shapes[part] if kind == "weight" else (shapes[part][0],)
            return _weight(w, [t.format(i=i) + f".{kind}" for t in names[part]], shape, where)

        p = f"encoder.layers.{i}"
        out[f"{p}.self_attn.in_proj.weight"] = torch.cat([get(x, "weight") for x in "qkv"])
        out[f"{p}.self_attn.in_proj.bias"] = torch.cat([get(x, "bias") for x in "qkv"])
        for ours, theirs in (("self_attn.out_proj", "o"), ("ff.w1", "w1"), ("ff.w2", "w2"), ("norm1", "n1"),
                             ("norm2", "n2")):
            for kind in ("weight", "bias"):
                out[f"{p}.{ours}.{kind}"] = get(theirs, kind)
    return out


# -- BERT ----------------------------------------------------------------------------------------------


def _bert_tokenizer(source: Path, config: dict[str, Any]) -> HFTokenizer:
    path = source / "tokenizer.json"
    tok_config = read_json(source / "tokenizer_config.json") if (source / "tokenizer_config.json").is_file() \
        else {}

    def name(key, default):
        value = tok_config.get(key, default)
        return value.get("content", default) if isinstance(value, dict) else value

    names = {"bos": name("cls_token", "[CLS]"), "eos": name("sep_token", "[SEP]"), "pad": name("pad_token", "[PAD]"),
             "unk": name("unk_token", "[UNK]")}
    plain = HFTokenizer.from_file(path, {})
    roles = {}
    for role, token in names.items():
        i = plain.tok.token_to_id(token)
        if i is None:
            raise HubError(f"{path} has no {token} token (BERT's {role} token): the tokenizer does not belong to "
                           "this model")
        roles[role] = i
    tok = HFTokenizer(plain.backend, roles, append_eos=True)
    if tok.hf_vocab != config["vocab_size"]:
        raise HubError(f"{path} has {tok.hf_vocab} tokens but config.json's vocab_size is {config['vocab_size']}: "
                       "the tokenizer does not belong to this model")
    return tok


def bert(source: Path, config: dict[str, Any]) -> Imported:
    where = source / "config.json"
    _ints(config, where, "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
          "max_position_embeddings", "vocab_size")
    activation, eps = _common(config, where)
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise HubError(f"{where}: position_embedding_type {config['position_embedding_type']!r} is not supported "
                       "(seqmap maps BERT's absolute positions)")
    if config.get("is_decoder") or config.get("add_cross_attention"):
        raise HubError(f"{where}: a BERT decoder (is_decoder / add_cross_attention) is not supported")
    _architecture(config, where, "BertForSequenceClassification", ("BertModel", "BertForPreTraining"), "text")
    try:
        tok = _bert_tokenizer(source, config)
    except TokenizerError as e:
        raise HubError(str(e)) from None
    labels = _labels(config, where)
    d, n, ff, v, p = (config[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size",
                                          "max_position_embeddings"))
    model_cfg = ModelConfig(family="classifier", src_vocab=tok.vocab_size, tgt_vocab=tok.vocab_size, d_model=d,
                            n_heads=config["num_attention_heads"], d_ff=ff, enc_layers=n, dropout=0.0,
                            activation=activation, positional="learned", max_len=p, norm_position="post",
                            norm_eps=eps, scale_embeddings=False, embedding_norm=True, pooler="tanh",
                            pooling="cls", n_classes=len(labels.names))
    w = {k.removeprefix("bert."): t for k, t in read_weights(source).items()}
    word = _weight(w, ["embeddings.word_embeddings.weight"], (v, d), source)
    types = _weight(w, ["embeddings.token_type_embeddings.weight"], (config.get("type_vocab_size", 2), d), source)
    hf_ids = tok.hf_ids()
    table = rows(word + types[0], hf_ids)
    out = {"encoder.embedding.table.weight": table,
           "encoder.positional.table.weight": _weight(w, ["embeddings.position_embeddings.weight"], (p, d), source),
           "cls": word[tok.roles["bos"]] + types[0],
           "encoder.embedding_norm.weight": _weight(w, ["embeddings.LayerNorm.weight"], (d,), source),
           "encoder.embedding_norm.bias": _weight(w, ["embeddings.LayerNorm.bias"], (d,), source),
           "pooler.0.weight": _weight(w, ["pooler.dense.weight"], (d, d), source),
           "pooler.0.bias": _weight(w, ["pooler.dense.bias"], (d,), source)}
    layer = "encoder.layer.{i}"
    out.update(_layers(w, {"q": [f"{layer}.attention.self.query"], "k": [f"{layer}.attention.self.key"],
                           "v": [f"{layer}.attention.self.value"], "o": [f"{layer}.attention.output.dense"],
                           "n1": [f"{layer}.attention.output.LayerNorm"], "w1": [f"{layer}.intermediate.dense"],
                           "w2": [f"{layer}.output.dense"], "n2": [f"{layer}.output.LayerNorm"]}, n, d, ff, source))
    c = len(labels.names)
    if "classifier.weight" in w:
        out["head.weight"] = _weight(w, ["classifier.weight"], (c, d), source)
        out["head.bias"] = _weight(w, ["classifier.bias"], (c,), source)
    data = DataConfig(task="classification", tokenizer="word", vocab_size=tok.vocab_size, max_len=p - 2)
    cfg = RunConfig(model=model_cfg, data=data, train=TrainConfig(max_steps=1, warmup=0, schedule="constant",
                                                                  lr=2e-5,
                                                                  early_stopping="accuracy"))
    return Imported(cfg, out, tok, tok, labels)


# -- ViT -----------------------------------------------------------------------------------------------


def _pixels(source: Path, channels: int) -> tuple[list[float], list[float]]:
    """The image processor's rescale and normalization as a pixel mean and std on the 0..255 scale."""
    path = source / "preprocessor_config.json"
    if not path.is_file():
        raise HubError(f"{path} is missing (the image processor's normalization); save the ViTImageProcessor "
                       "with save_pretrained into the same directory")
    proc = read_json(path)
    scale = proc.get("rescale_factor", 1 / 255) if proc.get("do_rescale", True) else 1.0
    mean = proc.get("image_mean", [0.5] * channels) if proc.get("do_normalize", True) else [0.0] * channels
    std = proc.get("image_std", [0.5] * channels) if proc.get("do_normalize", True) else [1.0] * channels
    if len(mean) != channels or len(std) != channels or min(std) <= 0:
        raise HubError(f"{path}: image_mean and image_std must hold {channels} numbers each (num_channels), std > 0")
    return [m / scale for m in mean], [s / scale for s in std]


def vit(source: Path, config: dict[str, Any]) -> Imported:
    where = source / "config.json"
    _ints(config, where, "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
          "image_size", "patch_size", "num_channels")
    activation, eps = _common(config, where)
    size, patch, channels = config["image_size"], config["patch_size"], config["num_channels"]
    if size % patch:
        raise HubError(f"{where}: patch_size {patch} does not divide image_size {size}")
    _architecture(config, where, "ViTForImageClassification", ("ViTModel",), "image")
    if not config.get("qkv_bias", True):
        raise HubError(f"{where}: qkv_bias false is not supported (seqmap's attention projections have biases)")
    labels = _labels(config, where)
    mean, std = _pixels(source, channels)
    d, n, ff = config["hidden_size"], config["num_hidden_layers"], config["intermediate_size"]
    tokens = (size // patch) ** 2 + 1
    model_cfg = ModelConfig(family="vit", d_model=d, n_heads=config["num_attention_heads"], d_ff=ff, enc_layers=n,
                            dropout=0.0, activation=activation, positional="learned", max_len=tokens,
                            norm_position="pre", norm_eps=eps, pooling="cls", n_classes=len(labels.names),
                            patch_size=patch, image_channels=channels, image_height=size, image_width=size,
                            pixel_mean=mean, pixel_std=std)
    w = {k.removeprefix("vit."): t for k, t in read_weights(source).items()}
    conv = _weight(w, ["embeddings.patch_embeddings.projection.weight"], (d, channels, patch, patch), source)
    out = {"cls": _weight(w, ["embeddings.cls_token"], (1, 1, d), source)[0, 0],
           "encoder.positional.table.weight": _weight(w, ["embeddings.position_embeddings"], (1, tokens, d),
                                                      source)[0],
           "encoder.embedding.proj.weight": conv.reshape(d, -1),
           "encoder.embedding.proj.bias": _weight(w, ["embeddings.patch_embeddings.projection.bias"], (d,), source),
           "encoder.embedding.mean": torch.tensor(mean).view(1, channels, 1, 1),
           "encoder.embedding.std": torch.tensor(std).view(1, channels, 1, 1),
           "encoder.final_norm.weight": _weight(w, ["layernorm.weight"], (d,), source),
           "encoder.final_norm.bias": _weight(w, ["layernorm.bias"], (d,), source)}
    new, old = "layers.{i}", "encoder.layer.{i}"  # transformers 5 names, and the names of older checkpoints
    out.update(_layers(w, {"q": [f"{new}.attention.q_proj", f"{old}.attention.attention.query"],
                           "k": [f"{new}.attention.k_proj", f"{old}.attention.attention.key"],
                           "v": [f"{new}.attention.v_proj", f"{old}.attention.attention.value"],
                           "o": [f"{new}.attention.o_proj", f"{old}.attention.output.dense"],
                           "n1": [f"{new}.layernorm_before", f"{old}.layernorm_before"],
                           "w1": [f"{new}.mlp.fc1", f"{old}.intermediate.dense"],
                           "w2": [f"{new}.mlp.fc2", f"{old}.output.dense"],
                           "n2": [f"{new}.layernorm_after", f"{old}.layernorm_after"]}, n, d, ff, source))
    c = len(labels.names)
    if "classifier.weight" not in w:
        raise HubError(f"{source}: no classifier.weight; seqmap imports ViTForImageClassification (a ViTModel "
                       "without its head is not supported)")
    out["head.weight"] = _weight(w, ["classifier.weight"], (c, d), source)
    out["head.bias"] = _weight(w, ["classifier.bias"], (c,), source)
    data = DataConfig(task="image", image_size=[size, size], image_mode="L" if channels == 1 else "RGB")
    cfg = RunConfig(model=model_cfg, data=data, train=TrainConfig(max_steps=1, warmup=0, schedule="constant",
                                                                  lr=2e-5,
                                                                  early_stopping="accuracy"))
    return Imported(cfg, out, None, None, labels)
