"""Checkpoints that explain themselves, load without unpickling, and are written atomically.

A checkpoint is a directory, e.g. ``RUN_DIR/checkpoints/step-000120/``::

    model.safetensors    the weights; tied tensors stored once, their other names in the metadata
    trainer.safetensors  the tensors of the trainer state (optimizer moments and steps, RNG states)
    trainer.json         everything else: trainer counters, the optimizer's param_groups, the
                         python/numpy RNG states, with {"__tensor__": name} where a tensor goes
    config.yaml          the resolved config, so the checkpoint says what it is
    tokenizer/           optional: the tokenizer files, copied in

Nothing is pickled, so ``torch.load`` is never called. A save writes into a hidden sibling
directory (``.step-000120.tmp-*``), fsyncs it and renames it into place: a kill mid-save leaves
the previous checkpoint (or none) under the final name, never a half-written one.
``CheckpointManager`` rotates ``step-XXXXXX`` directories under ``RUN_DIR/checkpoints`` and keeps
``index.json`` (the list, the last and the best) up to date.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import shutil
import uuid
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

MODEL_FILE = "model.safetensors"
TRAINER_FILE = "trainer.safetensors"
TRAINER_JSON = "trainer.json"
CONFIG_FILE = "config.yaml"
TOKENIZER_DIR = "tokenizer"
INDEX_FILE = "index.json"
FORMAT_VERSION = 1
_TIED_KEY = "seqmap.tied"  # model.safetensors metadata: JSON {alias name: stored name}


class CheckpointError(RuntimeError):
    """A checkpoint is missing, damaged, or does not fit the model/optimizer it is loaded into."""


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
) -> Path:
    """Write model weights, optimizer and RNG state, ``trainer_state`` and ``config`` to ``directory``.

    ``trainer_state`` must be plain JSON data (dict with str keys, list, str, int, float, bool,
    None); ``config`` plain YAML data. An existing ``directory`` is replaced. Returns its path.
    """
    trainer = {"trainer_state": _checked_json(trainer_state, "trainer_state"), "optimizer": None, "rng": None}
    tensors: dict[str, Tensor] = {}
    if optimizer is not None:
        trainer["optimizer"] = _encode(optimizer.state_dict(), "optimizer", tensors)
    trainer["rng"] = _encode(_get_rng_state(), "rng", tensors)
    return _write_atomically(Path(directory), model.state_dict(), trainer, tensors, config, tokenizer_dir)


def _write_atomically(
    target: Path,
    weights: Mapping[str, Tensor],
    trainer: dict[str, Any],
    trainer_tensors: dict[str, Tensor],
    config: Mapping[str, Any],
    tokenizer_dir: str | os.PathLike | None,
) -> Path:
    """Write the checkpoint into a hidden sibling, fsync it, then rename it to ``target``."""
    config_text = _dump_config(config)
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
        _write_weights(tmp / MODEL_FILE, weights)
        _write_trainer(tmp, trainer, trainer_tensors)
        (tmp / CONFIG_FILE).write_text(config_text, encoding="utf-8")
        if tokenizer_dir is not None:
            shutil.copytree(tokenizer_dir, tmp / TOKENIZER_DIR)
        _fsync_tree(tmp)
        if target.exists():  # a directory cannot be renamed onto a non-empty one: move the old aside
            os.replace(target, old)
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    except BaseException:
        if old.exists() and not target.exists():
            os.replace(old, target)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for stale in target.parent.glob(f".{target.name}.old-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return target


def _write_weights(path: Path, state_dict: Mapping[str, Tensor]) -> None:
    """Save ``state_dict`` with tied (identical) tensors stored once, the other names recorded."""
    stored: dict[str, Tensor] = {}
    tied: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    for name, t in state_dict.items():
        key = _storage_key(t)
        if key is not None and key in seen:
            tied[name] = seen[key]
            continue
        if key is not None:
            seen[key] = name
        stored[name] = t.detach().cpu().contiguous()
    metadata = {"format": "pt", "seqmap.version": str(FORMAT_VERSION), _TIED_KEY: json.dumps(tied)}
    try:
        save_file(stored, str(path), metadata=metadata)
    except (ValueError, SafetensorError) as err:
        raise CheckpointError(f"could not write {path.name}: {err}") from err


def _storage_key(t: Tensor) -> tuple | None:
    if t.numel() == 0 or t.device.type == "meta":
        return None
    return (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)


def _write_trainer(directory: Path, trainer: dict, tensors: dict[str, Tensor]) -> None:
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(directory / TRAINER_FILE))
    payload = {"format": "seqmap-checkpoint", "version": FORMAT_VERSION, "torch": torch.__version__, **trainer}
    (directory / TRAINER_JSON).write_text(json.dumps(payload, indent=1), encoding="utf-8")


def _dump_config(config: Mapping[str, Any]) -> str:
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (the resolved config), got {type(config).__name__}")
    try:
        return yaml.safe_dump(dict(config), sort_keys=False)
    except yaml.YAMLError as err:
        raise TypeError(f"config must hold plain data (dict, list, str, int, float, bool, None): {err}") from err


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(folder))


def _fsync_dir(path: Path) -> None:
    if os.name != "posix":  # directories cannot be opened for fsync on Windows
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


def _get_rng_state() -> dict[str, Any]:
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
) -> LoadedCheckpoint:
    """Load weights into ``model`` (strictly), state into ``optimizer``, and the RNG states if asked.

    Raises ``CheckpointError`` naming the file when something is missing, damaged or does not fit.
    """
    path = _checked_dir(directory)
    config = read_config(path)
    trainer = _read_trainer_json(path)
    if model is not None:
        _load_into_model(model, path)
    if optimizer is not None or restore_rng:
        tensors = _read_safetensors(path / TRAINER_FILE)
        try:
            if optimizer is not None:
                if trainer["optimizer"] is None:
                    raise CheckpointError(f"{path} holds no optimizer state; load it without optimizer=")
                _load_optimizer(optimizer, _decode(trainer["optimizer"], tensors), path)
            if restore_rng:
                if trainer["rng"] is None:
                    raise CheckpointError(f"{path} holds no RNG state; load it with restore_rng=False")
                _set_rng_state(_decode(trainer["rng"], tensors))
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(
                f"{path / TRAINER_JSON} does not match {TRAINER_FILE} ({err}); {_earlier(path)}"
            ) from err
    return LoadedCheckpoint(path=path, config=config, trainer_state=trainer["trainer_state"])


def load_weights(directory: str | os.PathLike) -> dict[str, Tensor]:
    """The weights by name, tied names sharing one tensor (``model.load_state_dict`` accepts them)."""
    stored, tied = _read_weights(_checked_dir(directory))
    return _expand(stored, tied)


def read_config(directory: str | os.PathLike) -> dict[str, Any]:
    """The resolved config saved with the checkpoint."""
    path = _checked_dir(directory) / CONFIG_FILE
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise CheckpointError(f"cannot read {path} ({err}); {_earlier(path.parent)}") from err
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} does not hold a mapping; {_earlier(path.parent)}")
    return config


def _checked_dir(directory: str | os.PathLike) -> Path:
    path = Path(directory)
    if path.is_dir():
        return path
    msg = f"checkpoint directory {path} does not exist"
    backups = sorted(path.parent.glob(f".{path.name}.old-*")) if path.parent.is_dir() else []
    if backups:
        msg += f"; a save was interrupted and the previous version is in {backups[-1]}: rename it to {path.name}"
    raise CheckpointError(msg)


def _earlier(path: Path) -> str:
    return f"the checkpoint is damaged: use an earlier checkpoint in {path.parent}"


def _read_safetensors(path: Path) -> dict[str, Tensor]:
    try:
        return load_file(str(path))
    except (OSError, SafetensorError, ValueError) as err:
        raise CheckpointError(f"cannot read {path} ({err}); {_earlier(path.parent)}") from err


def _read_trainer_json(path: Path) -> dict[str, Any]:
    file = path / TRAINER_JSON
    try:
        trainer = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"cannot read {file} ({err}); {_earlier(path)}") from err
    if not isinstance(trainer, dict) or not {"trainer_state", "optimizer", "rng"} <= trainer.keys():
        raise CheckpointError(f"{file} is not a seqmap trainer file; {_earlier(path)}")
    if trainer.get("version", 0) > FORMAT_VERSION:
        raise CheckpointError(f"{file} has format version {trainer['version']}; upgrade seqmap to read it")
    return trainer


def _read_weights(path: Path, tensors: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    """The stored tensors (with ``tensors=False``: their (shape, dtype name) only) and the tie record."""
    file = path / MODEL_FILE
    try:
        with safe_open(str(file), framework="pt") as f:
            tied = json.loads((f.metadata() or {}).get(_TIED_KEY, "{}"))
            if tensors:
                stored = {k: f.get_tensor(k) for k in f.keys()}
            else:
                stored = {k: (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in f.keys()}
    except (OSError, SafetensorError, ValueError) as err:
        raise CheckpointError(f"cannot read {file} ({err}); {_earlier(path)}") from err
    if not all(target in stored for target in tied.values()):
        raise CheckpointError(f"{file} names tied weights it does not hold; {_earlier(path)}")
    return stored, tied


def _expand(stored: Mapping[str, Tensor], tied: Mapping[str, str]) -> dict[str, Tensor]:
    return {**stored, **{alias: stored[target] for alias, target in tied.items()}}


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


# --- averaging --------------------------------------------------------------------------------


def average_checkpoints(paths: Iterable[str | os.PathLike]) -> dict[str, Tensor]:
    """Element-wise mean of the checkpoints' weights (accumulated in float64); integer buffers from the last.

    Tied names share one tensor in the result, as in ``load_weights``.
    """
    dirs = [_checked_dir(p) for p in paths]
    if not dirs:
        raise ValueError("average_checkpoints needs at least one checkpoint path")
    layouts = [_read_weights(d, tensors=False) for d in dirs]  # shapes and dtypes only
    reference = _expand(*layouts[0])
    for d, layout in zip(dirs[1:], layouts[1:], strict=True):
        other = _expand(*layout)
        for name in sorted(reference.keys() | other.keys()):
            if name not in other or name not in reference:
                has, lacks = (dirs[0], d) if name not in other else (d, dirs[0])
                raise CheckpointError(f"cannot average: {has} has weight {name!r} but {lacks} does not")
            if reference[name] != other[name]:
                raise CheckpointError(
                    f"cannot average: weight {name!r} is {reference[name]} (shape, dtype) "
                    f"in {dirs[0]} but {other[name]} in {d}"
                )
    in_file = [{**{k: k for k in stored}, **tied} for stored, tied in layouts]  # name -> its name in each file
    averaged: dict[str, Tensor] = {}
    with contextlib.ExitStack() as stack:  # one tensor at a time, so memory stays near one model
        files = [stack.enter_context(safe_open(str(d / MODEL_FILE), framework="pt")) for d in dirs]
        for name in layouts[0][0]:
            first = files[0].get_tensor(name)
            if not first.is_floating_point():
                averaged[name] = files[-1].get_tensor(in_file[-1][name])
                continue
            total = first.double()
            for f, names in zip(files[1:], in_file[1:], strict=True):
                total += f.get_tensor(names[name]).double()
            averaged[name] = (total / len(files)).to(first.dtype)
    return _expand(averaged, layouts[0][1])


def save_averaged(paths: Iterable[str | os.PathLike], out_dir: str | os.PathLike) -> Path:
    """Write the average of ``paths`` as a checkpoint (config and tokenizer of the last one)."""
    paths = [Path(p) for p in paths]
    weights = average_checkpoints(paths)
    tokenizer = paths[-1] / TOKENIZER_DIR
    trainer = {"trainer_state": {"averaged_from": [str(p) for p in paths]}, "optimizer": None, "rng": None}
    return _write_atomically(
        Path(out_dir), weights, trainer, {}, read_config(paths[-1]), tokenizer if tokenizer.is_dir() else None
    )


# --- rotation ---------------------------------------------------------------------------------


class CheckpointManager:
    """Saves ``step-XXXXXX`` checkpoints under ``run_dir/checkpoints``, keeping the last few and the best.

    ``keep_last`` most recently saved checkpoints are kept, plus the best by ``metric`` (lower is
    better for ``mode="min"``), which rotation never deletes. ``checkpoints/index.json`` lists them
    in save order and names the last and the best; it is rewritten atomically after each save.
    """

    def __init__(self, run_dir: str | os.PathLike, keep_last: int = 3, metric: str | None = None, mode: str = "min"):
        if keep_last < 1:
            raise ValueError(f"keep_last = {keep_last} must be >= 1 (the last checkpoint is needed to resume)")
        if mode not in ("min", "max"):
            raise ValueError(f"mode = {mode!r} is not valid; choose 'min' (e.g. loss) or 'max' (e.g. BLEU)")
        self.dir = Path(run_dir) / "checkpoints"
        self.keep_last, self.metric, self.mode = keep_last, metric, mode

    def save(self, step: int, *, metric_value: float | None = None, **kwargs: Any) -> Path:
        """``save_checkpoint`` to ``step-XXXXXX`` (same keyword arguments), then rotate and update the index.

        ``metric_value`` (None between validations; NaN never counts as best) is the value of ``metric``.
        """
        if metric_value is not None and self.metric is None:
            raise ValueError("metric_value given but the manager tracks no metric; pass metric='name' to it")
        index = self._read_index()
        if index and (index.get("metric"), index.get("mode")) != (self.metric, self.mode):
            raise CheckpointError(
                f"{self.dir / INDEX_FILE} tracks metric {index.get('metric')!r} ({index.get('mode')}), not "
                f"{self.metric!r} ({self.mode}); use the same metric and mode, or another run_dir"
            )
        path = save_checkpoint(self.dir / f"step-{step:06d}", **kwargs)
        value = None if metric_value is None or math.isnan(metric_value) else float(metric_value)
        entries = [e for e in self._entries(index) if e["step"] != step]
        entries.append({"step": step, "name": path.name, "metric": value})
        best = self._best(entries)
        keep = [e for i, e in enumerate(entries) if i >= len(entries) - self.keep_last or e is best]
        self._write_index(keep, best)
        for entry in entries:
            if not any(entry is k for k in keep):
                shutil.rmtree(self.dir / entry["name"], ignore_errors=True)
        return path

    def latest(self) -> Path | None:
        """The most recently saved checkpoint, or None."""
        entries = self._entries(self._read_index())
        return self.dir / entries[-1]["name"] if entries else None

    def best(self) -> Path | None:
        """The checkpoint with the best metric value so far, or None."""
        best = self._read_index().get("best")
        return self.dir / best["name"] if best and (self.dir / best["name"]).is_dir() else None

    def _best(self, entries: list[dict]) -> dict | None:
        scored = [e for e in entries if e["metric"] is not None]
        if not scored:
            return None
        pick = min if self.mode == "min" else max
        return pick(scored, key=lambda e: e["metric"])  # ties: the earliest saved

    def _entries(self, index: dict) -> list[dict]:
        """Indexed checkpoints in save order; step directories missing from the index count as older."""
        indexed = [e for e in index.get("checkpoints", []) if (self.dir / e["name"]).is_dir()]
        names = {e["name"] for e in indexed}
        orphans = sorted(p.name for p in self.dir.glob("step-*") if p.is_dir() and p.name not in names)
        return [{"step": int(n.split("-")[1]), "name": n, "metric": None} for n in orphans] + indexed

    def _read_index(self) -> dict:
        file = self.dir / INDEX_FILE
        if not file.exists():
            return {}
        try:
            index = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise CheckpointError(f"cannot read {file} ({err}); delete it and it is rebuilt from step-* dirs") from err
        if not isinstance(index, dict):
            raise CheckpointError(f"{file} is not a checkpoint index; delete it and it is rebuilt from step-* dirs")
        return index

    def _write_index(self, entries: list[dict], best: dict | None) -> None:
        index = {
            "metric": self.metric,
            "mode": self.mode,
            "checkpoints": entries,
            "last": entries[-1]["name"] if entries else None,
            "best": None if best is None else {"name": best["name"], "step": best["step"], "value": best["metric"]},
        }
        tmp = self.dir / f".{INDEX_FILE}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(index, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.dir / INDEX_FILE)
        _fsync_dir(self.dir)
