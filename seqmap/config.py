"""Typed configuration: one dataclass per concern, YAML as their serialised form.

Every field has a default documented beside it; ``__post_init__`` checks values
and says which option to change. ``from_dict`` rejects unknown keys and names the
nearest valid one, so a misspelt option never passes silently.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass
from typing import Any

from seqmap.nn.positional import POSITIONAL_KINDS


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message says what to change."""


def _choice(section: str, name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{section}.{name} = {value!r} is not valid; choose one of {list(allowed)}")


def _positive(section: str, name: str, value: int) -> None:
    if value <= 0:
        raise ConfigError(f"{section}.{name} must be > 0, got {value!r}")


@dataclass
class ModelConfig:
    """The network: which family, how wide, how deep, which attention and positions."""

    family: str = "transformer"  # transformer (encoder-decoder) | lm (decoder-only) | rnn (encoder-decoder)
    src_vocab: int = 0  # source vocabulary size (set from the tokenizer by `train`; unused by lm)
    tgt_vocab: int = 0  # target vocabulary size (the LM's vocabulary)
    pad_id: int = 0  # padding token id (its embedding is kept at zero)

    # Transformer and LM
    d_model: int = 256  # width D
    n_heads: int = 4  # attention heads H
    n_kv_heads: int | None = None  # key/value heads: None = n_heads; 1 = multi-query; divisor = grouped-query
    d_ff: int = 1024  # feed-forward width F
    enc_layers: int = 3  # encoder layers (transformer, rnn)
    dec_layers: int = 3  # decoder layers (transformer, rnn, lm)
    dropout: float = 0.1  # dropout on embeddings, sublayer outputs and feed-forward
    attention_dropout: float = 0.0  # dropout on attention weights
    norm_position: str = "pre"  # pre (x + f(norm(x))) | post (norm(x + f(x)))
    norm: str = "layernorm"  # layernorm | rmsnorm
    activation: str = "relu"  # feed-forward non-linearity: relu | gelu | swiglu
    positional: str = "sinusoidal"  # sinusoidal | learned | relative | t5 | rope | alibi | none
    max_len: int = 1024  # longest sequence for learned positions (others extrapolate)
    relative_clip: int = 16  # relative (Shaw): offsets clipped to [-k, k]
    relative_values: bool = False  # relative (Shaw): also add relative embeddings to values
    scale_embeddings: bool = True  # multiply token embeddings by sqrt(D)
    tie_embeddings: bool = True  # target embedding and output projection share weights
    share_vocab: bool = False  # source and target embeddings are one table (needs equal vocabularies)

    # RNN encoder-decoder
    rnn_cell: str = "lstm"  # rnn | lstm | gru
    emb_size: int = 256  # RNN token embedding width
    hidden_size: int = 512  # RNN hidden width (per direction in the encoder)
    bidirectional: bool = True  # bidirectional RNN encoder
    rnn_attention: str = "bahdanau"  # none | bahdanau | dot | general | concat
    input_feeding: bool = True  # Luong input feeding: previous attentional vector joins the next input
    context_every_step: bool = False  # rnn_attention=none: feed the fixed context at every step (Cho et al.)

    def __post_init__(self) -> None:
        s = "model"
        _choice(s, "family", self.family, ("transformer", "lm", "rnn"))
        _choice(s, "norm_position", self.norm_position, ("pre", "post"))
        _choice(s, "norm", self.norm, ("layernorm", "rmsnorm"))
        _choice(s, "activation", self.activation, ("relu", "gelu", "swiglu"))
        _choice(s, "positional", self.positional, POSITIONAL_KINDS)
        _choice(s, "rnn_cell", self.rnn_cell, ("rnn", "lstm", "gru"))
        _choice(s, "rnn_attention", self.rnn_attention, ("none", "bahdanau", "dot", "general", "concat"))
        for name in ("d_model", "n_heads", "d_ff", "dec_layers", "max_len", "emb_size", "hidden_size"):
            _positive(s, name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model={self.d_model} must be divisible by model.n_heads={self.n_heads}")
        if self.n_kv_heads is not None and (self.n_kv_heads <= 0 or self.n_heads % self.n_kv_heads):
            raise ConfigError(f"model.n_kv_heads={self.n_kv_heads} must divide model.n_heads={self.n_heads}")
        if self.positional == "rope" and (self.d_model // self.n_heads) % 2:
            raise ConfigError("model.positional=rope needs an even head width d_model / n_heads")
        if self.family != "lm":
            _positive(s, "enc_layers", self.enc_layers)
        if not 0.0 <= self.dropout < 1.0 or not 0.0 <= self.attention_dropout < 1.0:
            raise ConfigError("model.dropout and model.attention_dropout must be in [0, 1)")
        if self.share_vocab and self.src_vocab and self.tgt_vocab and self.src_vocab != self.tgt_vocab:
            raise ConfigError(
                f"model.share_vocab=true needs src_vocab == tgt_vocab (got {self.src_vocab} and {self.tgt_vocab}); "
                "use a joint vocabulary or set model.share_vocab=false"
            )


# -- generic (de)serialisation --------------------------------------------------

def _field_types(cls) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _is_dataclass_type(tp) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def from_dict(cls, data: dict | None, section: str = ""):
    """Build dataclass ``cls`` from a plain dict, rejecting unknown keys.

    Nested dataclass fields take nested dicts. The error for an unknown key names
    the closest valid key.
    """
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"{section or cls.__name__} must be a mapping of options, got {type(data).__name__}")
    types_ = _field_types(cls)
    kwargs = {}
    for key, value in data.items():
        where = f"{section}.{key}" if section else key
        if key not in types_:
            near = difflib.get_close_matches(key, types_, n=1)
            hint = f"; did you mean {section + '.' if section else ''}{near[0]}?" if near else ""
            raise ConfigError(f"unknown option {where!r}{hint} (valid: {', '.join(types_)})")
        tp = types_[key]
        kwargs[key] = from_dict(tp, value, where) if _is_dataclass_type(tp) else _coerce(value, tp, where)
    return cls(**kwargs)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check (and gently convert) a YAML / command-line value against a field type."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{where} must be an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{where} must be a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where} must be a string, got {value!r}")
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        (item,) = typing.get_args(tp)[:1] or (Any,)
        return [v if item is Any else _coerce(v, item, where) for v in value]
    return value


def to_dict(cfg) -> dict:
    """A dataclass as plain dicts/lists, ready for YAML."""
    return dataclasses.asdict(cfg)


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``--section.key value`` / ``section.key=value`` overrides to a config dict.

    Values are parsed as YAML scalars (``3e-4``, ``true``, ``null``); type checks
    happen in ``from_dict``.
    """
    import yaml

    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    items = list(overrides)
    pairs = []
    while items:
        tok = items.pop(0)
        key = tok[2:] if tok.startswith("--") else tok
        if "=" in key:
            key, raw = key.split("=", 1)
        elif items:
            raw = items.pop(0)
        else:
            raise ConfigError(f"override {tok!r} has no value; write --{key} VALUE")
        pairs.append((key, raw))
    for key, raw in pairs:
        parts = key.split(".")
        node = data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r}: {part!r} is not a section")
        value = yaml.safe_load(raw) if raw != "" else ""
        # YAML reads 3e-4 as a string (no dot); let the field type decide.
        node[parts[-1]] = value
    return data


