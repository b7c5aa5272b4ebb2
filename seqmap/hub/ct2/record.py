"""Which checkpoint an export came from: a record written into every export, read back when it is opened."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from seqmap.checkpoints import MODEL_FILE
from seqmap.hub.source import HubError

SOURCE_RECORD = "seqmap_source.json"  # written into every export: the digest of the checkpoint it came from


@functools.lru_cache(maxsize=8)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def checkpoint_digest(run) -> str:
    """SHA-256 of the run's weights file: the identity of the checkpoint an export is checked against (exact on
    every CPU, unlike a comparison of scores, which int8 kernels move by different amounts on different ISAs)."""
    path = Path(run.checkpoint) / MODEL_FILE
    stat = path.stat()
    return _file_digest(str(path), stat.st_size, stat.st_mtime_ns)


def write_source_record(run, out: Path, quantization: str | None) -> None:
    """Record in the export which checkpoint it was written from and how its weights are stored."""
    from seqmap import __version__

    record = {"checkpoint_sha256": checkpoint_digest(run), "checkpoint": str(run.checkpoint),
              "quantization": quantization or "float32", "seqmap": __version__}
    (out / SOURCE_RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def read_source_record(path: Path) -> dict | None:
    """The export's record of its checkpoint; None for an export without one (another converter, an older
    seqmap); a HubError naming the file when it is damaged."""
    file = path / SOURCE_RECORD
    if not file.is_file():
        return None
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
        digest = record["checkpoint_sha256"]
        if not isinstance(digest, str):
            raise TypeError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise HubError(f"{file} is damaged (no checkpoint_sha256 in its JSON); write the export again with "
                       "seqmap export ct2 RUN_DIR --out DIR") from None
    return record
