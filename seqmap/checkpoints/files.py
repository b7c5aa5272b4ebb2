"""The files of one checkpoint directory, each read or written on its own.

What the checkpoint (``checkpoint.py``), rotation (``manager.py``) and averaging (``averaging.py``) share:
the file names, the weights file (tied tensors stored once, their other names in the metadata),
``config.yaml``, and fsync of files and directories.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor

from seqmap.checkpoints.errors import CheckpointError

MODEL_FILE = "model.safetensors"
TRAINER_FILE = "trainer.safetensors"
TRAINER_JSON = "trainer.json"
CONFIG_FILE = "config.yaml"
TOKENIZER_DIR = "tokenizer"
FORMAT_VERSION = 1
_TIED_KEY = "seqmap.tied"  # model.safetensors metadata: JSON {alias name: stored name}


# --- writing ----------------------------------------------------------------------------------


def write_weights(path: Path, state_dict: Mapping[str, Tensor]) -> None:
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
        save_tensors(stored, path, metadata)
    except (ValueError, SafetensorError) as err:
        raise CheckpointError(f"could not write {path.name}: {err}") from err


def save_tensors(tensors: Mapping[str, Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """safetensors' ``save_file``, with its I/O failures (a full disk, no permission) as the ``OSError`` they are,
    naming ``path``, as Python's own file writes raise them (safetensors reports "... (os error 28)")."""
    try:
        save_file(dict(tensors), str(path), metadata=metadata)
    except SafetensorError as err:
        code = re.search(r"\(os error (\d+)\)", str(err))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(path)) from err


def _storage_key(t: Tensor) -> tuple | None:
    if t.numel() == 0 or t.device.type == "meta":
        return None
    return (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)


def dump_config(config: Mapping[str, Any]) -> str:
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (the resolved config), got {type(config).__name__}")
    try:
        return yaml.safe_dump(dict(config), sort_keys=False)
    except yaml.YAMLError as err:
        raise TypeError(f"config must hold plain data (dict, list, str, int, float, bool, None): {err}") from err


def fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(Path(folder))


def fsync_dir(path: Path) -> None:
    if os.name != "posix":  # directories cannot be opened for fsync on Windows
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- reading ----------------------------------------------------------------------------------


def read_config(directory: str | os.PathLike) -> dict[str, Any]:
    """The resolved config saved with the checkpoint."""
    path = checked_dir(directory) / CONFIG_FILE
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise CheckpointError(f"cannot read {path} ({_one_line(err)}); {damaged_advice(path.parent)}") from err
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} does not hold a mapping; {damaged_advice(path.parent)}")
    return config


def _one_line(err: Exception) -> str:
    """An error's message on one line: a YAML error's problem and where it is (its text spans several lines)."""
    problem, mark = getattr(err, "problem", None), getattr(err, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(err).split())


def checked_dir(directory: str | os.PathLike) -> Path:
    path = Path(directory)
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(f"{path} is a file, not a checkpoint directory (RUN/checkpoints/step-N)")
    msg = f"checkpoint directory {path} does not exist"
    backups = sorted(path.parent.glob(f".{path.name}.old-*")) if path.parent.is_dir() else []
    if backups:
        msg += f"; a save was interrupted and the previous version is in {backups[-1]}: rename it to {path.name}"
    raise CheckpointError(msg)


def find_tokenizer(checkpoint: Path) -> Path | None:
    """The tokenizer a checkpoint decodes with: its own ``tokenizer/``, else its run's (``RUN/tokenizer``, where
    checkpoints saved without one find it), else None (graph runs have none)."""
    for folder in (checkpoint / TOKENIZER_DIR, checkpoint.parent.parent / TOKENIZER_DIR):
        if folder.is_dir():
            return folder
    return None


def damaged_advice(path: Path) -> str:
    """What to do about a damaged checkpoint at ``path``."""
    return f"the checkpoint is damaged: use an earlier checkpoint in {path.parent}"


def read_weights(path: Path, tensors: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
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
        raise CheckpointError(f"cannot read {file} ({err}); {damaged_advice(path)}") from err
    if not all(target in stored for target in tied.values()):
        raise CheckpointError(f"{file} names tied weights it does not hold; {damaged_advice(path)}")
    return stored, tied


def expand_tied(stored: Mapping[str, Tensor], tied: Mapping[str, str]) -> dict[str, Tensor]:
    return {**stored, **{alias: stored[target] for alias, target in tied.items()}}
