"""The run directory's checks and their one-line errors: each says what to do about RUN_DIR.

Before ``RunTrainer`` writes a new run, ``refuse_another_run`` refuses a directory where another run started
(its tokenizer would be reused) and ``copy_tokenizer`` brings ``--init``'s tokenizer in. When a file of the run
cannot be written, ``write_error`` names it, the fix and the checkpoint to continue from (``resume_command``);
when ``--resume`` finds its latest checkpoint damaged, ``resume_advice`` says which one it would continue from.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from seqmap.checkpoints import TOKENIZER_DIR, CheckpointError, CheckpointManager, find_tokenizer
from seqmap.config import ConfigError, DataConfig, RunConfig, differing_fields, from_dict, load_config, read_yaml
from seqmap.data.pipeline import READ_AFTER_FIT, TOKENIZER_DATA
from seqmap.training import distributed
from seqmap.training.trainer import TrainingError


def copy_tokenizer(checkpoint: Path, dest: Path) -> None:
    """The initial run's tokenizer (and class list) into the new run, so its ids keep their meaning."""
    source = find_tokenizer(checkpoint)
    if source is None:
        return  # a run without a tokenizer (graphs)
    if dest.exists():
        raise TrainingError(f"{dest} already exists; --init starts a new run: choose a new --run-dir")
    shutil.copytree(source, dest)


def resume_command(run_dir: Path, world_size: int = 1) -> str:
    """The command that continues the run in ``run_dir`` as it was launched: one process, or torchrun's."""
    launcher = f"torchrun --nproc_per_node {world_size} -m seqmap" if world_size > 1 else "seqmap"
    return f"{launcher} train --resume {run_dir}"


def refuse_another_run(cfg: RunConfig, run_dir: Path) -> None:
    """A new run where another one started but saved no checkpoint (it was killed, or failed) would reuse that
    run's tokenizer (and classes): refused when that run's data options differ in one they were fitted on (all
    but ``READ_AFTER_FIT``). Its config.yaml says them, or, when it failed before writing that, the record written
    beside the tokenizer as it was fitted (``TOKENIZER_DATA``)."""
    if not (run_dir / TOKENIZER_DIR).is_dir():
        return
    saved_path = next((p for p in (run_dir / "config.yaml", run_dir / TOKENIZER_DATA) if p.is_file()), None)
    if saved_path is None:
        return  # nothing says what it was fitted on (a seqmap before the record, or --init's copy)
    try:
        saved = (load_config(saved_path).data if saved_path.name == "config.yaml"
                 else from_dict(DataConfig, read_yaml(saved_path), "data"))
    except (ConfigError, OSError, ValueError):
        saved = None
    name = None if saved is None else next(iter(differing_fields(saved, cfg.data, skip=READ_AFTER_FIT)), None)
    if saved is not None and name is None:
        return  # the same data again (e.g. after a crash before the first checkpoint): its tokenizer fits
    what = ("does not load" if saved is None else
            f"has data.{name}={getattr(saved, name)!r} (this run: {getattr(cfg.data, name)!r})")
    raise TrainingError(f"{run_dir} holds the start of another run (no checkpoint; its {saved_path.name} {what}) "
                        f"whose {TOKENIZER_DIR}/ this run would reuse: delete {run_dir}, or choose another --run-dir")


# what to do about a file of the run that cannot be written, by errno (``where``: the file or its folder)
_WRITE_FIXES = {errno.EACCES: "make {where} writable (chmod u+w {where})",
                errno.EPERM: "make {where} writable (chmod u+w {where})",
                errno.EROFS: "{where} is on a read-only file system: copy the run to a writable disk",
                errno.ENOTDIR: "{where} is not a folder",
                errno.ENOSPC: "free some space on the disk of {where}",
                errno.EDQUOT: "free some space within your disk quota"}


def write_error(err: OSError, run_dir: Path) -> str | None:
    """One line for a file in (or a folder above) ``run_dir`` that could not be written, with what to do and
    what was kept; None when ``err`` is about another file (the data, say: not the run's to explain)."""
    if err.filename is None:
        return None
    path, run = Path(os.fsdecode(err.filename)), run_dir.resolve()
    if not (path.resolve().is_relative_to(run) or run.is_relative_to(path.resolve())):
        return None
    where = next(p for p in (path, *path.parents) if p.exists())  # where to act: the file, or its nearest folder
    fix = _WRITE_FIXES.get(err.errno, "check {where}").format(where=where)
    try:
        latest = CheckpointManager(run_dir).latest()
    except CheckpointError:
        latest = None
    message = f"cannot write {path} ({err.strerror or err}): {fix}"
    if latest is None:
        return message + ", or choose another --run-dir"
    return (message + f"; the checkpoints saved are intact (the latest is {latest.name}): then continue with "
            f"`{resume_command(run_dir, distributed.launched_world_size())}`")


def resume_advice(damaged: Path) -> str:
    """What to do when ``--resume`` finds its latest checkpoint ``damaged``: say which one it would continue from."""
    def step(p: Path) -> int:
        number = p.name.removeprefix("step-")
        return int(number) if number.isdigit() else -1

    earlier = sorted((p for p in damaged.parent.glob("step-*") if p.is_dir() and 0 <= step(p) < step(damaged)),
                     key=step)  # by step: step-999999 is before step-1000000
    if not earlier:
        return (f"the checkpoint is damaged and no earlier one is left: start again with `seqmap train "
                f"{damaged.parent.parent / 'config.yaml'} --run-dir NEW_DIR`")
    return (f"the checkpoint is damaged: move {damaged} out of {damaged.parent} and resume again, to continue "
            f"from {earlier[-1].name}")
