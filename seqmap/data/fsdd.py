"""The Free Spoken Digit Dataset (FSDD) as one .npz: 3,000 recordings of spoken digits, 6 speakers, 8 kHz.

Upstream is a Git repository of WAV files ``recordings/{digit}_{speaker}_{take}.wav``; ``seqmap data download
fsdd`` fetches its archive at a pinned commit and ``build_npz`` packs the recordings into the arrays
``seqmap.data.audio.read_npz`` reads (the layout of the project's local copy): ``audio`` (int16, all
recordings concatenated), ``offsets``, ``digit``, ``speaker``, ``index`` (the take) and ``sample_rate``, sorted
by (digit, speaker, take). The arrays' checksum then pins the result, whatever the archive's bytes.
"""

from __future__ import annotations

import io
import re
import wave
import zipfile
import zlib

import numpy as np

from seqmap.data.dataset_files import DatasetError

FSDD_COMMIT = "26eb9aaf76e81b692f806f9140c2d2777410d7a1"  # the recordings/ tree of release v1.0.10
FSDD_ARCHIVE = f"{FSDD_COMMIT}.zip"  # under https://github.com/Jakobovski/free-spoken-digit-dataset/archive
FSDD_ARRAYS_SHA256 = "233999004d3a0ecddc68e85bde39a50ad134ac547580eaecccddaf3ac60eb0f5"
_NAME = re.compile(r"(?:^|/)recordings/(\d)_([a-z]+)_(\d+)\.wav$")


def read_pcm16(raw: bytes, where: str) -> tuple[np.ndarray, int]:
    """(int16 mono samples, sample rate) of a 16-bit PCM WAV file's bytes; one line for anything else."""
    try:
        with wave.open(io.BytesIO(raw)) as w:
            if w.getsampwidth() != 2 or w.getnchannels() != 1:
                raise DatasetError(f"{where}: expected 16-bit mono PCM, got {8 * w.getsampwidth()}-bit with "
                                   f"{w.getnchannels()} channels")
            return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16), w.getframerate()
    except (wave.Error, EOFError) as e:
        raise DatasetError(f"{where} is not a PCM WAV file ({e})") from None


def build_npz(archive: bytes) -> bytes:
    """The .npz of every ``recordings/*.wav`` in a zip archive of the FSDD repository."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(archive))
    except zipfile.BadZipFile as e:
        raise DatasetError(f"the FSDD archive is not a zip file ({e})") from None
    found = []
    for name in zf.namelist():
        m = _NAME.search(name)
        if m:
            found.append((int(m.group(1)), m.group(2), int(m.group(3)), name))
    if not found:
        raise DatasetError("the FSDD archive holds no recordings/{digit}_{speaker}_{take}.wav files")
    found.sort()
    waves, rates = [], set()
    for *_, name in found:
        try:
            raw = zf.read(name)
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as e:
            raise DatasetError(f"{name} in the FSDD archive does not decompress ({e}); the archive is damaged: "
                               "fetch it again") from None
        samples, rate = read_pcm16(raw, name)
        waves.append(samples)
        rates.add(rate)
    if len(rates) != 1:
        raise DatasetError(f"the FSDD recordings have several sample rates: {sorted(rates)}")
    offsets = np.zeros(len(waves) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(w) for w in waves])
    out = io.BytesIO()
    np.savez_compressed(
        out, audio=np.concatenate(waves), offsets=offsets,
        digit=np.array([d for d, *_ in found], dtype=np.uint8),
        speaker=np.array([s for _, s, *_ in found], dtype="<U8"),
        index=np.array([i for _, _, i, _ in found], dtype=np.uint16),
        sample_rate=np.array(rates.pop(), dtype=np.int64))
    return out.getvalue()
