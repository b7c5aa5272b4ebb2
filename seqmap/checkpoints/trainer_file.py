"""The trainer state of a checkpoint: ``trainer.json`` (plain JSON) and ``trainer.safetensors`` (its tensors).

The optimizer's state and the RNG states are nested structures holding tensors. ``encode`` turns such a
structure into JSON data with ``{"__tensor__": name}`` where a tensor goes (tuples and int keys marked too,
since JSON has neither), and ``decode`` turns it back; the tensors travel in ``trainer.safetensors``.
Nothing is pickled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from seqmap.checkpoints.errors import CheckpointError
from seqmap.checkpoints.files import FORMAT_VERSION, TRAINER_FILE, TRAINER_JSON, damaged_advice, save_tensors


def write_trainer(directory: Path, trainer: dict, tensors: dict[str, Tensor]) -> None:
    """``trainer.safetensors`` from ``tensors`` and ``trainer.json`` from ``trainer`` (with the format's header)."""
    save_tensors({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, directory / TRAINER_FILE)
    payload = {"format": "seqmap-checkpoint", "version": FORMAT_VERSION, "torch": torch.__version__, **trainer}
    (directory / TRAINER_JSON).write_text(json.dumps(payload, indent=1), encoding="utf-8")


def read_trainer(path: Path) -> dict[str, Any]:
    """The ``trainer.json`` of checkpoint ``path``, checked to be a seqmap trainer file this version can read."""
    file = path / TRAINER_JSON
    try:
        trainer = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"cannot read {file} ({err}); {damaged_advice(path)}") from err
    if not isinstance(trainer, dict) or not {"trainer_state", "optimizer", "rng"} <= trainer.keys():
        raise CheckpointError(f"{file} is not a seqmap trainer file; {damaged_advice(path)}")
    if trainer.get("version", 0) > FORMAT_VERSION:
        raise CheckpointError(f"{file} has format version {trainer['version']}; upgrade seqmap to read it")
    return trainer


def read_trainer_tensors(path: Path) -> dict[str, Tensor]:
    """The tensors of checkpoint ``path``'s ``trainer.safetensors``."""
    file = path / TRAINER_FILE
    try:
        return load_file(str(file))
    except (OSError, SafetensorError, ValueError) as err:
        raise CheckpointError(f"cannot read {file} ({err}); {damaged_advice(path)}") from err


def checked_json(value: Any, where: str) -> Any:
    """Return ``value`` if it survives JSON unchanged, else say which entry does not."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where} has key {k!r} ({type(k).__name__}); JSON keys must be str")
            checked_json(v, f"{where}[{k!r}]")
        return dict(value)
    if isinstance(value, list):
        for i, v in enumerate(value):
            checked_json(v, f"{where}[{i}]")
        return value
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    hint = " (use .item())" if isinstance(value, (Tensor, np.generic)) else ""
    hint = " (use a list)" if isinstance(value, tuple) else hint
    raise TypeError(f"{where} is a {type(value).__name__}, which JSON cannot store unchanged{hint}")


def encode(obj: Any, name: str, tensors: dict[str, Tensor]) -> Any:
    """Turn a state_dict-like structure into JSON data, moving tensors into ``tensors``."""
    if isinstance(obj, Tensor):
        tensors[name] = obj
        return {"__tensor__": name}
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(v, f"{name}.{i}", tensors) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [encode(v, f"{name}.{i}", tensors) for i, v in enumerate(obj)]
    if isinstance(obj, Mapping):
        if all(isinstance(k, int) and not isinstance(k, bool) for k in obj) and obj:
            return {"__int_keys__": {str(k): encode(v, f"{name}.{k}", tensors) for k, v in obj.items()}}
        if not all(isinstance(k, str) for k in obj):
            raise TypeError(f"{name} mixes key types {sorted({type(k).__name__ for k in obj})}; cannot store it")
        return {k: encode(v, f"{name}.{k}", tensors) for k, v in obj.items()}
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    raise TypeError(f"{name} is a {type(obj).__name__}; only tensors and plain data can be checkpointed")


def decode(obj: Any, tensors: Mapping[str, Tensor]) -> Any:
    """What ``encode`` was given, with the tensors taken from ``tensors`` (a KeyError names one that is missing)."""
    if isinstance(obj, list):
        return [decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tensor__" in obj:
        if obj["__tensor__"] not in tensors:
            raise KeyError(f"tensor {obj['__tensor__']!r}")
        return tensors[obj["__tensor__"]]
    if "__tuple__" in obj:
        return tuple(decode(v, tensors) for v in obj["__tuple__"])
    if "__int_keys__" in obj:
        return {int(k): decode(v, tensors) for k, v in obj["__int_keys__"].items()}
    return {k: decode(v, tensors) for k, v in obj.items()}
