"""Open a trained run for use: ``translate``, ``evaluate``, ``generate`` need nothing but the run directory.

A checkpoint carries its own config and tokenizer, so a run directory (its best
or last checkpoint) or a single checkpoint directory is enough.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from seqmap.checkpoints import (
    MODEL_FILE,
    TOKENIZER_DIR,
    CheckpointManager,
    find_tokenizer,
    load_checkpoint,
    read_config,
)
from seqmap.config import ConfigError, RunConfig, from_dict
from seqmap.data.labels import LabelSet
from seqmap.data.pipeline import LABELS_FILE
from seqmap.data.tokenizers import Tokenizer, load_pair
from seqmap.decoding.memory import keep_freed_memory
from seqmap.models.builder import build_model
from seqmap.nn.attention import avoid_cudnn_attention
from seqmap.nn.packed import pack_linears
from seqmap.tasks.registry import TASKS


class RunError(ValueError):
    """The run directory or checkpoint cannot be used; the message says why."""


@dataclass
class LoadedRun:
    cfg: RunConfig
    model: nn.Module
    src_tok: Tokenizer | None  # None for a language model, images and graphs
    tgt_tok: Tokenizer | None  # None for images and graphs (no tokens)
    checkpoint: Path
    device: torch.device
    labels: LabelSet | None = None  # a classifier's classes (text or images; None for the other tasks)


def find_checkpoint(path: str | Path, which: str = "best") -> Path:
    """The checkpoint directory for ``path``: itself if it is one, else the run's best or last."""
    path = Path(path)
    if (path / MODEL_FILE).exists():
        return path
    if not path.exists():
        where = "" if path.is_absolute() else f" (relative paths start at {Path.cwd()})"
        raise RunError(f"{path} does not exist; give a run directory or a checkpoint directory{where}")
    if not path.is_dir():
        raise RunError(f"{path} is not a run directory or a checkpoint directory")
    if which not in ("best", "last"):  # a checkpoint directory: as given, or by name inside the run
        candidates = [Path(which), path / "checkpoints" / which, path / which]
        for candidate in candidates:
            if (candidate / MODEL_FILE).exists():
                return candidate
        raise RunError(f"--checkpoint must be best, last or a checkpoint directory; {which!r} is none of them "
                       f"(no {MODEL_FILE} in {', '.join(str(c) for c in candidates)})")
    manager = CheckpointManager(path)
    found = manager.best() if which == "best" else manager.latest()
    found = found or manager.latest()
    if found is None:
        if (path / "model.bin").is_file():  # seqmap export ct2 (or ct2-transformers-converter) writes these
            raise RunError(f"{path} is a CTranslate2 model, not a run directory: give the run it came from and "
                           f"this folder as --ct2 {path}")
        if (path / "config.json").is_file():
            raise RunError(f"{path} is a Hugging Face model folder, not a run directory: import it first with "
                           f"`seqmap import hf {path} --out RUN_DIR`, then give RUN_DIR")
        raise RunError(f"{path} holds no checkpoint (looked in {path / 'checkpoints'}); train first with "
                       "`seqmap train CONFIG --run-dir " + str(path) + "`")
    return found


def run_device(device: str | torch.device) -> torch.device:
    """``device`` (``--device``) as a torch device this machine can use; a RunError naming it otherwise."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise RunError(f"--device {device!r} is not a device; use cpu, cuda or cuda:N") from None
    if device.type == "meta":
        raise RunError("--device meta holds no weights; use cpu, cuda or cuda:N")
    if device.type != "cpu":
        try:
            torch.empty(0, device=device)  # a torch built without CUDA, no GPU, a GPU index beyond the count
        except (RuntimeError, AssertionError) as e:
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0]
            raise RunError(f"--device {device} cannot be used here ({reason}); use --device cpu") from None
    if device.type == "cuda":
        avoid_cudnn_attention()  # decoding's shapes change every step (seqmap.nn.attention)
    return device


def load_run(path: str | Path, which: str = "best", device: str | torch.device = "cpu",
             quantize: str | None = None, pack: bool = True, precision: str | None = None) -> LoadedRun:
    """Rebuild the model from a checkpoint's own config and load its weights and tokenizer.

    ``quantize="int8"``: Linear layers dynamically quantized for CPU decoding (``seqmap.decoding.quantize``).
    ``precision="bf16"`` or ``"fp16"``: weights cast to 16 bits for decoding on a GPU
    (``seqmap.decoding.precision``; None or "fp32": as trained).
    ``pack``: on the CPU, the float Linear layers multiply through packed weights (oneDNN or MKL)
    (``seqmap.nn.packed``; same parameters and state dict, faster decoding), and the process keeps
    freed memory for reuse (``seqmap.decoding.memory``: fewer page faults per decode step).
    """
    run = _load_run(path, which, device)
    if quantize not in (None, "none"):
        from seqmap.decoding.quantize import QuantizeError
        from seqmap.decoding.quantize import quantize as quantize_model

        try:
            run.model = quantize_model(run.model, quantize, run.device)
        except QuantizeError as e:
            raise RunError(str(e)) from None
    if precision not in (None, "fp32"):
        from seqmap.decoding.precision import PrecisionError, half_precision

        try:
            run.model = half_precision(run.model, precision, run.device, run.cfg.data.task)
        except PrecisionError as e:
            raise RunError(str(e)) from None
    if pack and run.device.type == "cpu":
        try:
            pack_linears(run.model)
        except ValueError as e:  # SEQMAP_PACKED_LINEAR names no backend this torch has
            raise RunError(str(e)) from None
        keep_freed_memory()
    return run


def _load_run(path: str | Path, which: str, device: str | torch.device) -> LoadedRun:
    checkpoint = find_checkpoint(path, which)
    device = run_device(device)  # before the weights are read
    try:
        cfg = from_dict(RunConfig, read_config(checkpoint))
    except ConfigError as e:
        raise RunError(f"{checkpoint / 'config.yaml'}: {e}") from None
    model = build_model(cfg.model)
    task = TASKS[cfg.data.task]
    if task.input == "graph":  # no tokens: the graph itself is the input (seqmap.tasks.graph.load_graph)
        load_checkpoint(checkpoint, model=model)
        return LoadedRun(cfg, model.to(device).eval(), None, None, checkpoint, device)
    tok_dir = find_tokenizer(checkpoint) or checkpoint.parent.parent / TOKENIZER_DIR  # none: load_pair names it
    src_tok, tgt_tok = load_pair(tok_dir) if task.tokenized else (None, None)
    load_checkpoint(checkpoint, model=model)
    model.to(device).eval()
    labels = LabelSet.load(tok_dir / LABELS_FILE) if task.labelled else None
    return LoadedRun(cfg, model, src_tok if "source" in task.tokenized else None, tgt_tok, checkpoint, device, labels)
