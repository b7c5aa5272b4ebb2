"""Checkpoint rotation: ``step-XXXXXX`` directories under ``RUN_DIR/checkpoints`` and their ``index.json``.

``CheckpointManager`` saves each checkpoint with ``save_checkpoint`` (see ``seqmap.checkpoints`` for what a
checkpoint holds), keeps the last few and the best by a metric, and keeps ``index.json`` (the list,
the last and the best) up to date.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from seqmap.checkpoints.checkpoint import save_checkpoint
from seqmap.checkpoints.errors import CheckpointError
from seqmap.checkpoints.files import TRAINER_JSON, fsync_dir

INDEX_FILE = "index.json"


class CheckpointManager:
    """Saves ``step-XXXXXX`` checkpoints under ``run_dir/checkpoints``, keeping the last few and the best.

    ``keep_last`` most recently saved checkpoints are kept, plus the best by ``metric`` (lower is
    better for ``mode="min"``; equal values go to the lower ``tie_break`` given with them, then to the
    earliest), which rotation never deletes. ``checkpoints/index.json`` lists them
    in save order and names the last and the best; it is rewritten atomically after each save.
    """

    def __init__(self, run_dir: str | os.PathLike, keep_last: int = 3, metric: str | None = None, mode: str = "min"):
        if keep_last < 1:
            raise ValueError(f"keep_last = {keep_last} must be >= 1 (the last checkpoint is needed to resume)")
        if mode not in ("min", "max"):
            raise ValueError(f"mode = {mode!r} is not valid; choose 'min' (e.g. loss) or 'max' (e.g. BLEU)")
        self.dir = Path(run_dir) / "checkpoints"
        self.keep_last, self.metric, self.mode = keep_last, metric, mode

    def save(self, step: int, *, metric_value: float | None = None, tie_break: float | None = None,
             **kwargs: Any) -> Path:
        """``save_checkpoint`` to ``step-XXXXXX`` (same keyword arguments), then rotate and update the index.

        ``metric_value`` (None between validations; NaN never counts as best) is the value of ``metric``;
        ``tie_break`` (lower is better, e.g. the validation loss) ranks checkpoints with equal values.
        """
        if metric_value is not None and self.metric is None:
            raise ValueError("metric_value given but the manager tracks no metric; pass metric='name' to it")
        index = self._read_index()
        if index and (index.get("metric"), index.get("mode")) != (self.metric, self.mode):
            raise CheckpointError(
                f"{self.dir / INDEX_FILE} tracks metric {index.get('metric')!r} ({index.get('mode')}), not "
                f"{self.metric!r} ({self.mode}); use the same metric and mode, or another run_dir"
            )
        value = None if metric_value is None or math.isnan(metric_value) else float(metric_value)
        ranked = {"metric": value} | ({} if tie_break is None else {"tie_break": float(tie_break)})
        path = save_checkpoint(self.dir / f"step-{step:06d}", index_entry={"by": self.metric, **ranked}, **kwargs)
        entries = [e for e in self._entries(index) if e["step"] != step]
        entries.append({"step": step, "name": path.name, **ranked})
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
        """The checkpoint with the best metric value so far, or None (also while the index is being rebuilt)."""
        index = self._read_index()
        best = index.get("best") if index else self._best(self._entries(index))
        return self.dir / best["name"] if best and (self.dir / best["name"]).is_dir() else None

    def _best(self, entries: list[dict]) -> dict | None:
        scored = [e for e in entries if e["metric"] is not None]
        if not scored:
            return None
        sign = 1.0 if self.mode == "min" else -1.0  # the best is the smallest (sign * metric, tie_break)
        return min(scored, key=lambda e: (sign * e["metric"], e.get("tie_break", math.inf)))  # then the earliest

    def _entries(self, index: dict) -> list[dict]:
        """Indexed checkpoints in save order; step directories missing from the index count as older."""
        indexed = [e for e in index.get("checkpoints", []) if (self.dir / e["name"]).is_dir()]
        names = {e["name"] for e in indexed}
        # step directories the index does not name, by step number (step-1000000 comes after step-999999)
        orphans = sorted((int(p.name.removeprefix("step-")), p.name) for p in self.dir.glob("step-*")
                         if p.is_dir() and p.name not in names and p.name.removeprefix("step-").isdigit())
        return [{"step": step, "name": n, **self._ranked(n)} for step, n in orphans] + indexed

    def _ranked(self, name: str) -> dict:
        """How checkpoint ``name`` ranks, as its save recorded in its trainer.json (``index_entry``): an index
        rebuilt from the step directories keeps the best one. Unknown (saved by an older seqmap, or ranked by
        another metric, or unreadable): no metric value."""
        try:
            saved = json.loads((self.dir / name / TRAINER_JSON).read_text(encoding="utf-8")).get("index_entry")
        except (OSError, ValueError, AttributeError):
            saved = None
        if not isinstance(saved, dict) or saved.get("by") != self.metric or not _number(saved.get("metric")):
            return {"metric": None}
        return {"metric": float(saved["metric"])} | ({"tie_break": float(saved["tie_break"])}
                                                     if _number(saved.get("tie_break")) else {})

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
        fsync_dir(self.dir)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
