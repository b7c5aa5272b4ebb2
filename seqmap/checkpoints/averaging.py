"""Checkpoint averaging: the element-wise mean of several checkpoints' weights, and saving it as a checkpoint.

Only checkpoints of one run are averaged: besides weights of the same names and shapes, they must have the same
``model`` section in their ``config.yaml``, the same ``data`` options but file paths (``seqmap.config.DATA_PATHS``,
which a resumed run may point elsewhere), the same tokenizer files (a checkpoint without ``tokenizer/`` uses
its run's, ``RUN/tokenizer``, as ``find_tokenizer`` says) and the same ``train.seed``. Two runs of one shape
(pre-LN and post-LN, two vocabularies of one size, one tokenizer over lowercased and cased text, or one config
trained from two seeds) would otherwise average into weights that neither can use. The rest of the config (the
training schedule, decoding) may differ: checkpoints of one run differ in their step, and a resumed run may have
changed its learning rate.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from safetensors import safe_open
from torch import Tensor

from seqmap.checkpoints.checkpoint import write_checkpoint
from seqmap.checkpoints.errors import CheckpointError
from seqmap.checkpoints.files import MODEL_FILE, checked_dir, expand_tied, find_tokenizer, read_config, read_weights
from seqmap.config import DATA_PATHS, DataConfig, ModelConfig, TrainConfig, differing_fields, from_dict, to_dict


def average_checkpoints(paths: Iterable[str | os.PathLike]) -> dict[str, Tensor]:
    """Element-wise mean of the checkpoints' weights (accumulated in float64); integer buffers from the last.

    Tied names share one tensor in the result, as in ``load_weights``. Raises ``CheckpointError`` for
    checkpoints of different runs (module docstring).
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
    check_one_run(dirs)
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
    tokenizer = find_tokenizer(paths[-1])
    trainer = {"trainer_state": {"averaged_from": [str(p) for p in paths]}, "optimizer": None, "rng": None}
    return write_checkpoint(Path(out_dir), weights, trainer, {}, read_config(paths[-1]), tokenizer)


def check_one_run(dirs: list[Path]) -> None:
    """Refuse checkpoints whose ``model`` config, ``data`` options (but paths) or tokenizer files differ from the
    first's (module docstring)."""
    first = dirs[0]
    config, tokenizer = read_config(first), _files(find_tokenizer(first))
    for d in dirs[1:]:
        other = read_config(d)
        differs = (_section_difference("model", ModelConfig, config.get("model"), other.get("model"))
                   or _section_difference("data", DataConfig, config.get("data"), other.get("data"), DATA_PATHS)
                   or _tokenizer_difference(tokenizer, _files(find_tokenizer(d)))
                   or _seed_difference(config, other))
        if differs:
            raise CheckpointError(f"cannot average {first} and {d}: they are not checkpoints of one run ({differs}); "
                                  "average checkpoints of one run")


_UNSET = object()


def _section_difference(name: str, cls: type, first: Any, other: Any, skip: tuple[str, ...] = (),
                        shown: int = 3) -> str:
    """'' if the two config sections ``name`` are equal but for the options in ``skip``, else the settings that
    differ, e.g. "model.norm_position 'pre' vs 'post'". Sections that are both a ``cls`` are compared with every
    default filled in: a run resumed by a newer seqmap has checkpoints with and without a new option."""
    try:
        parsed = [from_dict(cls, section, name) for section in (first, other)]
    except (TypeError, ValueError):  # ConfigError among them: not both a ``cls``, compared as saved
        parsed = None
    if parsed:
        keys = differing_fields(*parsed, skip=skip)
        first, other = (to_dict(section) for section in parsed)
    elif isinstance(first, dict) and isinstance(other, dict):
        keys = sorted(k for k in first.keys() | other.keys()
                      if k not in skip and first.get(k, _UNSET) != other.get(k, _UNSET))
    else:
        return "" if first == other else f"{name} {first!r} vs {other!r}"
    if not keys:
        return ""
    listed = ", ".join(f"{name}.{k} {_shown(first, k)} vs {_shown(other, k)}" for k in keys[:shown])
    return listed + (f", and {len(keys) - shown} more {name} settings" if len(keys) > shown else "")


def _shown(section: dict, key: str) -> str:
    return repr(section[key]) if key in section else "unset"


def _files(folder: Path | None) -> dict[str, str] | None:
    """Each file under ``folder`` (a path relative to it) and the SHA-256 of its bytes; None without a folder."""
    if folder is None:
        return None
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _seed_difference(first: dict, other: dict) -> str:
    """'' for one ``train.seed`` (two runs of one config from different seeds start from different weights)."""
    seeds = [section.get("seed", TrainConfig.seed) if isinstance(section := config.get("train"), dict)
             else TrainConfig.seed for config in (first, other)]
    return "" if seeds[0] == seeds[1] else f"train.seed {seeds[0]!r} vs {seeds[1]!r}"


def _tokenizer_difference(first: dict[str, str] | None, other: dict[str, str] | None) -> str:
    if first == other:
        return ""
    if first is None or other is None:
        return f"only the {'first' if other is None else 'second'} has a tokenizer"
    names = sorted(n for n in first.keys() | other.keys() if first.get(n) != other.get(n))
    return f"their tokenizer files differ: {', '.join(names)}"
