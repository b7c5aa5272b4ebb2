"""Checkpoint averaging: the element-wise mean of several checkpoints' weights, and saving it as a checkpoint."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from safetensors import safe_open
from torch import Tensor

from seqmap.training.checkpoint import write_checkpoint
from seqmap.training.checkpoint_files import (
    MODEL_FILE,
    TOKENIZER_DIR,
    CheckpointError,
    checked_dir,
    expand_tied,
    read_config,
    read_weights,
)


def average_checkpoints(paths: Iterable[str | os.PathLike]) -> dict[str, Tensor]:
    """Element-wise mean of the checkpoints' weights (accumulated in float64); integer buffers from the last.

    Tied names share one tensor in the result, as in ``load_weights``.
    """
    dirs = [checked_dir(p) for p in paths]
    if not dirs:
        raise ValueError("average_checkpoints needs at least one checkpoint path")
    layouts = [read_weights(d, tensors=False) for d in dirs]  # shapes and dtypes only
    reference = expand_tied(*layouts[0])
    for d, layout in zip(dirs[1:], layouts[1:], strict=True):
        other = expand_tied(*layout)
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
    return expand_tied(averaged, layouts[0][1])


def save_averaged(paths: Iterable[str | os.PathLike], out_dir: str | os.PathLike) -> Path:
    """Write the average of ``paths`` as a checkpoint (config and tokenizer of the last one)."""
    paths = [Path(p) for p in paths]
    weights = average_checkpoints(paths)
    tokenizer = paths[-1] / TOKENIZER_DIR
    trainer = {"trainer_state": {"averaged_from": [str(p) for p in paths]}, "optimizer": None, "rng": None}
    return write_checkpoint(
        Path(out_dir), weights, trainer, {}, read_config(paths[-1]), tokenizer if tokenizer.is_dir() else None
    )
