"""One checkpoint directory: ``save_checkpoint`` writes it atomically, ``load_checkpoint`` reads it back.

What a checkpoint holds is described in the package docstring (``seqmap.checkpoints``). A save writes into
a hidden sibling directory (``.step-000120.tmp-*``), fsyncs it and renames it into place: a kill mid-save
leaves the previous checkpoint (or none) under the final name, never a half-written one.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from seqmap.checkpoints.errors import CheckpointError, WeightsOnlyError
from seqmap.checkpoints.files import (
    CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_DIR,
    TRAINER_FILE,
    TRAINER_JSON,
    checked_dir,
    damaged_advice,
    dump_config,
    expand_tied,
    fsync_dir,
    fsync_tree,
    read_config,
    read_weights,
    write_weights,
)
from seqmap.checkpoints.rng import rng_state, set_rng_state
from seqmap.checkpoints.trainer_file import (
    checked_json,
    decode,
    encode,
    read_trainer,
    read_trainer_tensors,
    write_trainer,
)


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
    trainer = {"trainer_state": checked_json(trainer_state, "trainer_state"), "optimizer": None, "rng": None}
    if index_entry is not None:
        trainer["index_entry"] = checked_json(index_entry, "index_entry")
    tensors: dict[str, Tensor] = {}
    if optimizer is not None:
        trainer["optimizer"] = encode(optimizer.state_dict(), "optimizer", tensors)
    trainer["rng"] = encode(rng_state(), "rng", tensors)
    if rank_rng:
        trainer["rank_rng"] = [encode(state, f"rng_rank{rank}", tensors) for rank, state in enumerate(rank_rng, 1)]
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
        write_trainer(tmp, trainer, trainer_tensors)
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
    trainer = read_trainer(path)
    if model is not None:
        _load_into_model(model, path)
    if optimizer is not None or restore_rng:
        tensors = read_trainer_tensors(path)
        try:
            if optimizer is not None:
                if trainer["optimizer"] is None:
                    raise WeightsOnlyError(f"{path} holds no optimizer state; load it without optimizer=")
                _load_optimizer(optimizer, decode(trainer["optimizer"], tensors), path)
            if restore_rng:
                if trainer["rng"] is None:
                    raise WeightsOnlyError(f"{path} holds no RNG state; load it with restore_rng=False")
                per_rank = trainer.get("rank_rng") or []
                saved = per_rank[rank - 1] if 0 < rank <= len(per_rank) else trainer["rng"]
                set_rng_state(decode(saved, tensors))
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(
                f"{path / TRAINER_JSON} does not match {TRAINER_FILE} ({err}); {damaged_advice(path)}"
            ) from err
    return LoadedCheckpoint(path=path, config=config, trainer_state=trainer["trainer_state"])


def load_weights(directory: str | os.PathLike) -> dict[str, Tensor]:
    """The weights by name, tied names sharing one tensor (``model.load_state_dict`` accepts them)."""
    stored, tied = read_weights(checked_dir(directory))
    return expand_tied(stored, tied)


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
