"""Configs as YAML files and plain dicts: reading, ``--section.key`` overrides, and typed (de)serialisation.

Generic over any dataclass: the ``seqmap.config`` package defines the sections (``RunConfig`` and its parts)
and builds them with ``from_dict``; the toy runner reads its own config with ``read_yaml``. ``from_dict``
rejects unknown keys and names the nearest valid one; ``check_types`` checks (and gently converts) the fields
of a dataclass built in Python the same way; ``check_choice`` and ``check_positive`` check one value. Every
error is a ``ConfigError`` that says what to change. The public names are importable from ``seqmap.config``
too.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import numbers
import os
import types
import typing
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message says what to change."""


# -- YAML files and overrides ---------------------------------------------------

def read_yaml(path, overrides: list[str] | None = None) -> dict:
    """A YAML config file as a dict of sections, with dotted ``overrides`` applied (not yet type-checked).

    The one reader of config files: ``seqmap.config.load_config`` builds a ``RunConfig`` from it, the toy runner
    its own.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"cannot parse {path} as YAML: {_yaml_problem(e)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sections (model:, data:, ...), not a {type(data).__name__}")
    return apply_overrides(data, overrides or [])


def _yaml_problem(error: yaml.YAMLError) -> str:
    """One line from a YAML error: what is wrong and where."""
    problem = getattr(error, "problem", None)
    mark = getattr(error, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(error).split())


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``--section.key value`` / ``section.key=value`` overrides to a config dict.

    Values are parsed as YAML scalars (``3e-4``, ``true``, ``null``); type checks
    happen in ``from_dict``.
    """
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
        if len(parts) != 2 or not all(parts):
            raise ConfigError(f"override --{key}: options are SECTION.KEY (e.g. --train.lr), two names and one dot")
        node = data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r}: {part!r} is not a section")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override --{key} {raw!r} is not a YAML value: {_yaml_problem(e)}; quote it, or fix "
                              "the brackets") from None
        # YAML reads 3e-4 as a string (no dot); let the field type decide.
        node[parts[-1]] = value
    return data


def save_config(cfg, path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True), encoding="utf-8")


# -- generic (de)serialisation --------------------------------------------------

@functools.cache
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


def check_types(section_config, section: str) -> None:
    """Check (and gently convert, as ``from_dict`` does for YAML and ``--overrides``) every field of a section,
    so a section built in Python (``DecodeConfig(max_new_tokens=10.5)``) is checked like one read from a file.

    Each section's ``__post_init__`` calls it first; values of the right type are kept as they are.
    """
    for name, tp in _field_types(type(section_config)).items():
        value = getattr(section_config, name)
        checked = _coerce(value, tp, f"{section}.{name}" if section else name)
        if checked is not value:
            setattr(section_config, name, checked)


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}  # as _coerce names them


def check_choice(section: str, name: str, value: Any, allowed: tuple) -> None:
    """``value`` is one of ``allowed``; else one line naming the nearest (a misspelt ``transfomer``)."""
    if value not in allowed:
        near = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ConfigError(f"{section}.{name} = {value!r} is not valid; {hint}choose one of {list(allowed)}")


def check_positive(section: str, name: str, value: int) -> None:
    """``value`` is above zero; else one line naming the option."""
    if value <= 0:
        raise ConfigError(f"{section}.{name} must be > 0, got {value!r}")


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
        if len(errors) > 1:  # e.g. bool | str: say every kind of value the key takes, not only the first
            kinds = [_KINDS.get(arg, str(arg)) for arg in args if arg is not type(None)]
            raise ConfigError(f"{where} must be {' or '.join(kinds)}, got {value!r}")
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
        if isinstance(value, numbers.Integral):  # int, or NumPy's integers in a config built in Python
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{where} must be an integer, got {value!r}")
    if tp is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
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
        if isinstance(value, os.PathLike):  # a pathlib.Path in a config built in Python: kept as the str YAML holds
            return os.fspath(value)
        raise ConfigError(f"{where} must be a string, got {value!r}")
    if _is_dataclass_type(tp):  # a section of a RunConfig built in Python (from_dict builds it from a mapping)
        if isinstance(value, tp):
            return value
        raise ConfigError(f"{where} must be a {tp.__name__}, got {type(value).__name__}")
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


def differing_fields(first, other, skip: tuple[str, ...] = ()) -> list[str]:
    """The names of the fields in which two configs of one section differ, in field order, but for ``skip``: what
    a resume, an average of checkpoints and a run dir's reused tokenizer check against the config they were
    made with."""
    return [f.name for f in dataclasses.fields(first)
            if f.name not in skip and getattr(first, f.name) != getattr(other, f.name)]
