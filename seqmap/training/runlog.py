"""What a run writes about itself: a log file, a metrics file, TensorBoard scalars.

    RUN_DIR/train.log        human-readable lines (also printed)
    RUN_DIR/metrics.jsonl    one JSON object per event: {"kind": "train"|"valid"|..., "step": ..., ...}
    RUN_DIR/tensorboard/     scalars, when the tensorboard package is installed

Only the main process writes; other ranks get a logger that prints nothing.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm


class RunLog:
    def __init__(self, run_dir: Path | None, *, enabled: bool = True, stream: TextIO | None = None):
        self.enabled = enabled and run_dir is not None
        self.stream = stream if stream is not None else sys.stdout
        self._log = self._metrics = self._tb = None
        if not self.enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(run_dir / "train.log", "a", encoding="utf-8")
        self._metrics = open(run_dir / "metrics.jsonl", "a", encoding="utf-8")
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"))
        except ImportError:  # tensorboard is optional
            self._tb = None

    def info(self, message: str) -> None:
        if not self.enabled:
            return
        line = f"{time.strftime('%H:%M:%S')} {message}"
        tqdm.write(line, file=self.stream)  # keeps a progress bar intact
        self._log.write(line + "\n")
        self._log.flush()

    def metrics(self, kind: str, step: int, **values: Any) -> None:
        """Append one event to metrics.jsonl (and TensorBoard as kind/name scalars)."""
        if not self.enabled:
            return
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()}
        self._metrics.write(json.dumps({"kind": kind, "step": step, **clean}, ensure_ascii=False) + "\n")
        self._metrics.flush()
        if self._tb is not None:
            for name, value in clean.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and value is not None:
                    self._tb.add_scalar(f"{kind}/{name}", value, step)

    def close(self) -> None:
        for f in (self._log, self._metrics):
            if f is not None:
                f.close()
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: Path, kind: str | None = None) -> list[dict]:
    """The events of metrics.jsonl (optionally one kind), for plots and tests."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if kind is None or r["kind"] == kind]
