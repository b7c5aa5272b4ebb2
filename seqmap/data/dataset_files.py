"""One file of a dataset: its upstream path and content checksum, reading and verifying it, writing it safely.

A ``SourceFile``'s SHA-256 is of its content: the bytes after decompression when they start with the
gzip, bzip2 or xz magic number, the bytes as they are otherwise (see "Checksums" in ``datasets.py``). Prepared files
are written through a temporary name, so a reader never sees half a file. ``DatasetError`` and its
subclasses are the errors of the dataset modules.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"
# magic number -> decompressor (the Debian archive serves its index files as .xz and .bz2)
_COMPRESSED = {GZIP_MAGIC: gzip.decompress, b"BZh": bz2.decompress, b"\xfd7zXZ\x00": lzma.decompress}


class DatasetError(Exception):
    """A dataset could not be found, fetched, verified or written; the message says what to change."""


class ChecksumError(DatasetError):
    """A file's content does not have the recorded SHA-256 (or is broken gzip)."""


class DownloadError(DatasetError):
    """A file could not be fetched (network or HTTP error)."""


class MissingFilesError(DatasetError):
    """A local copy given to :func:`prepare` lacks some of the dataset's files."""


@dataclass(frozen=True)
class SourceFile:
    """One upstream file of a dataset.

    Attributes:
        path: where it lives under the dataset's base URL; its last part is the file name on disk.
        sha256: SHA-256 of the content (after gunzip when the file is gzip), lowercase hex; "" when none is
            recorded and the dataset's writer verifies what it makes of the file instead (Planetoid).
        out: its name in the prepared layout, or "" when the dataset has its own writer.
        bundled: the file in ``seqmap/data/bundled/`` holding a copy of it, or "" if none ships.
        digest: what ``sha256`` is of: "bytes" (the content, see above) or "npz-arrays" (the arrays of an
            ``.npz``, see :func:`npz_arrays_sha256`: a compressed and an uncompressed copy verify alike).
    """

    path: str
    sha256: str
    out: str = ""
    bundled: str = ""
    digest: str = "bytes"

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def _content(raw: bytes, where: str) -> bytes:
    """The content of a file's bytes: decompressed when they start with the gzip, bzip2 or xz magic number."""
    for magic, decompress in _COMPRESSED.items():
        if raw.startswith(magic):
            try:
                return decompress(raw)
            except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as err:
                kind = decompress.__module__
                raise ChecksumError(f"{where} starts like a {kind} file but does not decompress ({err})") from None
    return raw


def npz_arrays_sha256(raw: bytes, where: str) -> str:
    """SHA-256 over an ``.npz``'s arrays in name order (each: name, dtype, shape, then its C-order bytes).

    Independent of how the archive was written (``savez`` or ``savez_compressed``, file order, dates).
    """
    digest = hashlib.sha256()
    try:
        import numpy as np

        with np.load(io.BytesIO(raw), allow_pickle=False) as arrays:
            for name in sorted(arrays.files):
                a = np.ascontiguousarray(arrays[name])
                digest.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
                digest.update(a.tobytes())
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise ChecksumError(f"{where} is not a readable .npz file ({' '.join(str(err).split())})") from None
    return digest.hexdigest()


def verified_content(file: SourceFile, raw: bytes, where: str) -> bytes:
    """The content of ``raw`` after checking it against ``file.sha256``."""
    if file.digest == "npz-arrays":
        raw = _content(raw, where)  # a gzipped copy (mnist.npz.gz) verifies as the .npz it holds
        actual = npz_arrays_sha256(raw, where)
        if actual != file.sha256:
            raise ChecksumError(f"checksum mismatch for {where}: expected the arrays' sha256 {file.sha256}, "
                                f"got {actual}; use an unmodified copy of the file")
        return raw
    content = _content(raw, where)
    if not file.sha256:  # checked after conversion, by the dataset's writer
        return content
    actual = hashlib.sha256(content).hexdigest()
    if actual != file.sha256:
        raise ChecksumError(f"checksum mismatch for {where}: expected sha256 {file.sha256}, got {actual}; use an "
                            "unmodified copy of the file")
    return content


def read_text(path: str | os.PathLike) -> str:
    """A UTF-8 text file's content, gunzipped first when it is gzip (whatever its name)."""
    return _content(Path(path).read_bytes(), str(path)).decode("utf-8")


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file, so a reader never sees half a file."""
    tmp = part_path(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as err:
        raise DatasetError(f"cannot write {path} ({err.strerror or err}); give a --dest folder you can write to, "
                           "with no folder of that name in it") from None
    finally:
        tmp.unlink(missing_ok=True)


def part_path(path: Path) -> Path:
    """A hidden temporary name next to ``path`` (created with the usual permissions, unlike mkstemp's 0600)."""
    return path.with_name(f".{path.name}.{os.getpid()}.part")


def write_lines(path: Path, lines: list[str]) -> None:
    write_file(path, "".join(line + "\n" for line in lines).encode("utf-8"))
