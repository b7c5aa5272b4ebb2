"""Checkpoints that explain themselves, load without unpickling, and are written atomically.

A checkpoint is a directory, e.g. ``RUN_DIR/checkpoints/step-000120/``::

    model.safetensors    the weights; tied tensors stored once, their other names in the metadata
    trainer.safetensors  the tensors of the trainer state (optimizer moments and steps, RNG states)
    trainer.json         everything else: trainer counters, the optimizer's param_groups, the
                         python/numpy RNG states, with {"__tensor__": name} where a tensor goes;
                         in a run of several processes the RNG states of each (``rank_rng``);
                         the metric value the checkpoint index ranks it by (``index_entry``)
    config.yaml          the resolved config, so the checkpoint says what it is
    tokenizer/           optional: the tokenizer files, copied in

Nothing is pickled, so ``torch.load`` is never called. A save writes into a hidden sibling
directory (``.step-000120.tmp-*``), fsyncs it and renames it into place: a kill mid-save leaves
the previous checkpoint (or none) under the final name, never a half-written one.

This module saves and loads one checkpoint (``save_checkpoint``, ``load_checkpoint``); the single
files (names, weights, config, ``CheckpointError``) are in ``checkpoint_files.py``, and the names
callers need from there are importable from here too. Two modules build on this one: rotation
(``CheckpointManager``: ``step-XXXXXX`` directories under ``RUN_DIR/checkpoints`` and
``index.json``) in ``checkpoint_manager.py``, and averaging (``average_checkpoints``,
``save_averaged``) in ``averaging.py``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import uuid
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor, nn

from seqmap.training.checkpoint_files import (
    CONFIG_FILE,
    FORMAT_VERSION,
    MODEL_FILE,
    TOKENIZER_DIR,
    TRAINER_FILE,
    TRAINER_JSON,
    CheckpointError,
    checked_dir,
    damaged_advice,
    dump_config,
    expand_tied,
    fsync_dir,
    fsync_tree,
    read_config,
    read_weights,
    save_tensors,
    write_weights,
)

__all__ = [
    "CONFIG_FILE",
    "FORMAT_VERSION",
    "MODEL_FILE",
    "TOKENIZER_DIR",
    "TRAINER_FILE",
    "TRAINER_JSON",
    "CheckpointError",
    "LoadedCheckpoint",
    "WeightsOnlyError",
    "load_checkpoint",
    "load_weights",
    "read_config",
    "rng_state",
    "save_checkpoint",
    "write_checkpoint",
]


class WeightsOnlyError(CheckpointError):
    """The checkpoint holds weights but no optimizer or RNG state to continue training from (one written by
    ``seqmap import hf`` or ``seqmap average``): it can start a new run (``--init``), not be resumed."""


@dataclass
class LoadedCheckpoint:
    """What ``load_checkpoint`` read besides the tensors it loaded in place."""

    path: Path
    config: dict[str, Any]
    trainer_state: dict[str, Any]


# --- saving -----------------------------------------------------------------------------------


def save_checkpoint(
    directory: str | os.PathLike,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    trainer_state: Mapping[str, Any],
    config: Mapping[str, Any],
    tokenizer_dir: str | os.PathLike | None = None,
    rank_rng: Sequence[Mapping[str, Any]] = (),
    index_entry: Mapping[str, Any] | None = None,
) -> Path:
    """Write model weights, optimizer and RNG state, ``trainer_state`` and ``config`` to ``directory``.

    ``trainer_state`` must be plain JSON data (dict with str keys, list, str, int, float, bool,
    None); ``config`` plain YAML data. ``rank_rng``: in a run of several processes, the ``rng_state()``
    of ranks 1, 2, ... (this process is rank 0), so each draws on after a resume as it would have.
    ``index_entry``: what ``CheckpointManager`` ranks this checkpoint by (JSON data, kept in trainer.json),
    so that an index rebuilt from the step directories still knows it. An existing ``directory`` is
    replaced. Returns its path.
    """
    trainer = {"trainer_state": _checked_json(trainer_state, "trainer_state"), "optimizer": None, "rng": None}
    if index_entry is not None:
        trainer["index_entry"] = _checked_json(index_entry, "index_entry")
    tensors: dict[str, Tensor] = {}
    if optimizer is not None:
        trainer["optimizer"] = _encode(optimizer.state_dict(), "optimizer", tensors)
    trainer["rng"] = _encode(rng_state(), "rng", tensors)
    if rank_rng:
        trainer["rank_rng"] = [_encode(state, f"rng_rank{rank}", tensors) for rank, state in enumerate(rank_rng, 1)]
    return write_checkpoint(Path(directory), model.state_dict(), trainer, tensors, config, tokenizer_dir)


def write_checkpoint(
    target: Path,
    weights: Mapping[str, Tensor],
    trainer: dict[str, Any],
    trainer_tensors: dict[str, Tensor],
    config: Mapping[str, Any],
    tokenizer_dir: str | os.PathLike | None,
) -> Path:
    """Write a checkpoint of ``weights`` to ``target``: into a hidden sibling, fsynced, then renamed into place.

    ``trainer`` is the ``trainer.json`` payload (``trainer_state``, ``optimizer``, ``rng``) with
    ``{"__tensor__": name}`` where a tensor of ``trainer_tensors`` goes. ``save_checkpoint`` builds
    these from a model and optimizer; ``averaging.save_averaged`` from averaged weights. A write that
    fails (a full disk, no permission) raises its ``OSError``, naming a file, and leaves ``target`` as it was.
    """
    config_text = dump_config(config)
    if tokenizer_dir is not None and not Path(tokenizer_dir).is_dir():
        raise FileNotFoundError(f"tokenizer_dir {str(tokenizer_dir)!r} is not a directory; pass the folder to copy")
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{target} exists and is not a checkpoint directory; choose another path")
    target.parent.mkdir(parents=True, exist_ok=True)
    for leftover in target.parent.glob(f".{target.name}.tmp-*"):  # from a save that was killed
        shutil.rmtree(leftover, ignore_errors=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
    try:
        write_weights(tmp / MODEL_FILE, weights)
        _write_trainer(tmp, trainer, trainer_tensors)
        (tmp / CONFIG_FILE).write_text(config_text, encoding="utf-8")
        if tokenizer_dir is not None:
            shutil.copytree(tokenizer_dir, tmp / TOKENIZER_DIR)
        fsync_tree(tmp)
        if target.exists():  # a directory cannot be renamed onto a non-empty one: move the old aside
            os.replace(target, old)
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except BaseException as err:
        if old.exists() and not target.exists():
            os.replace(old, target)
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, OSError) and err.errno and err.filename is None:  # os.fsync names no file: name it
            raise OSError(err.errno, err.strerror, str(target)) from err
        raise
    for stale in target.parent.glob(f".{target.name}.old-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return target


def _write_trainer(directory: Path, trainer: dict, tensors: dict[str, Tensor]) -> None:
    save_tensors({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, directory / TRAINER_FILE)
    payload = {"format": "seqmap-checkpoint", "version": FORMAT_VERSION, "torch": torch.__version__, **trainer}
    (directory / TRAINER_JSON).write_text(json.dumps(payload, indent=1), encoding="utf-8")


# --- JSON with tensors set aside --------------------------------------------------------------


def _checked_json(value: Any, where: str) -> Any:
    """Return ``value`` if it survives JSON unchanged, else say which entry does not."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where} has key {k!r} ({type(k).__name__}); JSON keys must be str")
            _checked_json(v, f"{where}[{k!r}]")
        return dict(value)
    if isinstance(value, list):
        for i, v in enumerate(value):
            _checked_json(v, f"{where}[{i}]")
        return value
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    hint = " (use .item())" if isinstance(value, (Tensor, np.generic)) else ""
    hint = " (use a list)" if isinstance(value, tuple) else hint
    raise TypeError(f"{where} is a {type(value).__name__}, which JSON cannot store unchanged{hint}")


def _encode(obj: Any, name: str, tensors: dict[str, Tensor]) -> Any:
    """Turn a state_dict-like structure into JSON data, moving tensors into ``tensors``."""
    if isinstance(obj, Tensor):
        tensors[name] = obj
        return {"__tensor__": name}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, f"{name}.{i}", tensors) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, f"{name}.{i}", tensors) for i, v in enumerate(obj)]
    if isinstance(obj, Mapping):
        if all(isinstance(k, int) and not isinstance(k, bool) for k in obj) and obj:
            return {"__int_keys__": {str(k): _encode(v, f"{name}.{k}", tensors) for k, v in obj.items()}}
        if not all(isinstance(k, str) for k in obj):
            raise TypeError(f"{name} mixes key types {sorted({type(k).__name__ for k in obj})}; cannot store it")
        return {k: _encode(v, f"{name}.{k}", tensors) for k, v in obj.items()}
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    raise TypeError(f"{name} is a {type(obj).__name__}; only tensors and plain data can be checkpointed")


def _decode(obj: Any, tensors: Mapping[str, Tensor]) -> Any:
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tensor__" in obj:
        if obj["__tensor__"] not in tensors:
            raise KeyError(f"tensor {obj['__tensor__']!r}")
        return tensors[obj["__tensor__"]]
    if "__tuple__" in obj:
        return tuple(_decode(v, tensors) for v in obj["__tuple__"])
    if "__int_keys__" in obj:
        return {int(k): _decode(v, tensors) for k, v in obj["__int_keys__"].items()}
    return {k: _decode(v, tensors) for k, v in obj.items()}


def rng_state() -> dict[str, Any]:
    """This process's RNG states (torch, CUDA where initialised, Python, NumPy), as a checkpoint stores them."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state["numpy"] = (name, keys.tolist(), int(pos), int(has_gauss), float(cached))
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # never initialise CUDA just to save
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state:
        if torch.cuda.is_available() and torch.cuda.device_count() == len(state["cuda"]):
            torch.cuda.set_rng_state_all(state["cuda"])
        else:
            warnings.warn("checkpoint holds CUDA RNG states for another GPU count; not restored", stacklevel=3)


# --- loading ----------------------------------------------------------------------------------


def load_checkpoint(
    directory: str | os.PathLike,
    *,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    restore_rng: bool = False,
    rank: int = 0,
) -> LoadedCheckpoint:
    """Load weights into ``model`` (strictly), state into ``optimizer``, and the RNG states if asked.

    ``rank``: this process's rank in a run of several processes; it restores the RNG states saved for that
    rank (``save_checkpoint(rank_rng=...)``), or rank 0's where the checkpoint holds none for it.

    Raises ``CheckpointError`` naming the file when something is missing, damaged or does not fit.
    """
    path = checked_dir(directory)
    config = read_config(path)
    trainer = _read_trainer_json(path)
    if model is not None:
        _load_into_model(model, path)
    if optimizer is not None or restore_rng:
        tensors = _read_safetensors(path / TRAINER_FILE)
        try:
            if optimizer is not None:
                if trainer["optimizer"] is None:
                    raise WeightsOnlyError(f"{path} holds no optimizer state; load it without optimizer=")
                _load_optimizer(optimizer, _decode(trainer["optimizer"], tensors), path)
            if restore_rng:
                if trainer["rng"] is None:
                    raise WeightsOnlyError(f"{path} holds no RNG state; load it with restore_rng=False")
                per_rank = trainer.get("rank_rng") or []
                saved = per_rank[rank - 1] if 0 < rank <= len(per_rank) else trainer["rng"]
                _set_rng_state(_decode(saved, tensors))
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(
                f"{path / TRAINER_JSON} does not match {TRAINER_FILE} ({err}); {damaged_advice(path)}"
            ) from err
    return LoadedCheckpoint(path=path, config=config, trainer_state=trainer["trainer_state"])


def load_weights(directory: str | os.PathLike) -> dict[str, Tensor]:
    """The weights by name, tied names sharing one tensor (``model.load_state_dict`` accepts them)."""
    stored, tied = read_weights(checked_dir(directory))
    return expand_tied(stored, tied)


def _read_safetensors(path: Path) -> dict[str, Tensor]:
    try:
        return load_file(str(path))
    except (OSError, SafetensorError, ValueError) as err:
        raise CheckpointError(f"cannot read {path} ({err}); {damaged_advice(path.parent)}") from err


def _read_trainer_json(path: Path) -> dict[str, Any]:
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


def _load_into_model(model: nn.Module, path: Path) -> None:
    weights = load_weights(path)
    expected = model.state_dict()
    missing = [k for k in expected if k not in weights]
    unexpected = [k for k in weights if k not in expected]
    if missing or unexpected:
        raise CheckpointError(
            f"{path / MODEL_FILE} does not fit {type(model).__name__}: "
            f"{_few('missing', missing)}{'; ' if missing and unexpected else ''}{_few('unexpected', unexpected)}; "
            "build the model from the checkpoint's config.yaml"
        )
    for name, t in expected.items():
        if t.shape != weights[name].shape:
            raise CheckpointError(
                f"{path / MODEL_FILE}: parameter {name!r} has shape {tuple(weights[name].shape)} in the checkpoint "
                f"but {tuple(t.shape)} in the model; build the model from the checkpoint's config.yaml"
            )
    model.load_state_dict(weights, strict=True)  # copies in place, so tied parameters stay tied


def _few(kind: str, names: list[str], shown: int = 5) -> str:
    if not names:
        return ""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"{len(names)} {kind} ({', '.join(names[:shown])}{more})"


def _load_optimizer(optimizer: torch.optim.Optimizer, state: dict, path: Path) -> None:
    for group, saved in zip(optimizer.param_groups, state["param_groups"], strict=False):
        for key, value in group.items():  # JSON has no tuples: give back the optimizer's own types
            if isinstance(value, tuple) and isinstance(saved.get(key), list):
                saved[key] = tuple(saved[key])
    try:
        optimizer.load_state_dict(state)
    except (ValueError, KeyError) as err:
        raise CheckpointError(f"optimizer state in {path} does not fit this optimizer: {err}") from err
