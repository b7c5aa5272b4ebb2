"""Speech data: recordings with their transcripts, read from WAV files or one .npz, and utterances joined from them.

Inputs (``data.train`` / ``data.valid`` / ``data.test`` of ``data.task: speech``):

* a ``.tsv`` manifest, one utterance per line: ``path.wav<TAB>transcript[<TAB>speaker]`` (paths relative to the
  manifest); read with ``soundfile``, stereo mixed down to mono, other sample rates resampled (``soxr``);
* a ``.npz`` of recordings in one array: ``audio`` (all samples), ``offsets`` (recording k is
  ``audio[offsets[k]:offsets[k+1]]``), ``sample_rate``, ``text`` (or ``digit``: the Free Spoken Digit
  Dataset), optional ``speaker`` and ``split`` (train / valid / test per recording). The FSDD file
  (``seqmap data prepare fsdd``) has ``index`` (the take) instead of ``split``: takes 0-4 are its official
  test set; seqmap holds out takes 5-9 for validation and trains on takes 10-49.

``data.join: [lo, hi]`` turns isolated recordings into longer utterances: each one joins lo..hi
recordings of one speaker with random silences between them (``data.join_silence`` seconds), and its
transcript is theirs joined by spaces. The recipe of every utterance is drawn from a generator seeded
by (``train.seed``, split), so the same config always gives the same utterances; the audio is built
when a batch needs it.
"""

from __future__ import annotations

import csv
import io
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqmap.data.corpus import DataError

FSDD_TEST_TAKES = range(0, 5)  # the official FSDD test set: takes 0-4 of every (digit, speaker)
FSDD_VALID_TAKES = range(5, 10)  # held out here for validation (checkpoint choice), never for training
SPLITS = ("train", "valid", "test")


@dataclass
class Recordings:
    """Recordings as one float32 array in [-1, 1] at ``sample_rate``: recording k is audio[offsets[k]:offsets[k+1]]."""

    audio: np.ndarray
    offsets: np.ndarray
    texts: list[str]
    speakers: list[str]
    sample_rate: int
    splits: list[str] | None = None  # per recording, when the file says (an .npz with ``split`` or FSDD takes)

    def __len__(self) -> int:
        return len(self.texts)

    def wave(self, k: int) -> np.ndarray:
        return self.audio[self.offsets[k]:self.offsets[k + 1]]

    def select(self, keep: list[int]) -> Recordings:
        waves = [self.wave(k) for k in keep]
        offsets = np.zeros(len(keep) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(w) for w in waves])
        return Recordings(np.concatenate(waves) if waves else np.zeros(0, np.float32), offsets,
                          [self.texts[k] for k in keep], [self.speakers[k] for k in keep], self.sample_rate,
                          None if self.splits is None else [self.splits[k] for k in keep])


@dataclass
class Utterances:
    """Utterances built from recordings: utterance i joins recordings ``parts[i]`` with ``gaps[i]`` samples of
    silence before each and after the last (one recording, no silence, when nothing is joined)."""

    recordings: Recordings
    parts: list[list[int]]
    gaps: list[list[int]]

    def __len__(self) -> int:
        return len(self.parts)

    @property
    def sample_rate(self) -> int:
        return self.recordings.sample_rate

    def text(self, i: int) -> str:
        return " ".join(self.recordings.texts[k] for k in self.parts[i])

    def speaker(self, i: int) -> str:
        return self.recordings.speakers[self.parts[i][0]]

    def length(self, i: int) -> int:
        rec = self.recordings
        return sum(int(rec.offsets[k + 1] - rec.offsets[k]) for k in self.parts[i]) + sum(self.gaps[i])

    def wave(self, i: int) -> np.ndarray:
        pieces = []
        for k, gap in zip(self.parts[i], self.gaps[i]):
            pieces += [np.zeros(gap, np.float32), self.recordings.wave(k)]
        pieces.append(np.zeros(self.gaps[i][-1] if len(self.gaps[i]) > len(self.parts[i]) else 0, np.float32))
        return np.concatenate(pieces)


def single(recordings: Recordings) -> Utterances:
    """Every recording an utterance of its own."""
    return Utterances(recordings, [[k] for k in range(len(recordings))], [[0] for _ in range(len(recordings))])


def join(recordings: Recordings, count: int, lo: int, hi: int, silence: tuple[float, float], seed: int) -> Utterances:
    """``count`` utterances, each lo..hi recordings of one speaker (drawn at random, uniformly) with silences of
    ``silence`` = (shortest, longest) seconds before each recording and after the last."""
    if not 1 <= lo <= hi:
        raise DataError(f"data.join must be [lo, hi] with 1 <= lo <= hi, got [{lo}, {hi}]")
    by_speaker: dict[str, list[int]] = {}
    for k, speaker in enumerate(recordings.speakers):
        by_speaker.setdefault(speaker, []).append(k)
    speakers = sorted(by_speaker)
    if not speakers:
        raise DataError("no recordings to join")
    rng = random.Random(seed)
    rate = recordings.sample_rate
    short, long = int(silence[0] * rate), int(silence[1] * rate)
    parts, gaps = [], []
    for _ in range(count):
        pool = by_speaker[rng.choice(speakers)]
        n = rng.randint(lo, hi)
        parts.append([rng.choice(pool) for _ in range(n)])
        gaps.append([rng.randint(short, long) for _ in range(n + 1)])
    return Utterances(recordings, parts, gaps)


# -- reading ---------------------------------------------------------------------------

# Float samples are at full scale at 1. A file past a million (120 dB above it) holds no audio, and the float32
# power spectrum of samples near 1e13-1e16 (by window size) overflows to inf, which decoding cannot read.
MAX_SAMPLE = 1e6


def _pcm_to_float(audio: np.ndarray, where: str) -> np.ndarray:
    """int16 PCM or float samples as float32; float samples are checked as ``_read_audio`` checks a file's."""
    if audio.dtype == np.int16:
        return audio.astype(np.float32) / 32768.0
    if not np.issubdtype(audio.dtype, np.floating):
        raise DataError(f"{where}: audio must be int16 PCM or float samples, got {audio.dtype}")
    finite = np.isfinite(audio)
    if not finite.all():
        raise DataError(f"{where}: audio holds NaN or infinite samples (the first at sample "
                        f"{int(np.argmin(finite))}); give recordings of finite samples")
    peak = float(np.abs(audio).max()) if audio.size else 0.0
    if peak > MAX_SAMPLE:
        raise DataError(f"{where}: audio has samples up to {peak:.3g}, more than {MAX_SAMPLE:g} times full scale; "
                        "scale the recordings to [-1, 1]")
    return audio.astype(np.float32)


def read_npz(path: Path) -> Recordings:
    """Recordings from an .npz (see the module docstring for its arrays)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {path} as an .npz of recordings: {e}") from None
    missing = [k for k in ("audio", "offsets", "sample_rate") if k not in arrays]
    if missing or ("text" not in arrays and "digit" not in arrays):
        raise DataError(f"{path}: an .npz of recordings needs arrays audio, offsets, sample_rate and text (or digit); "
                        f"missing {', '.join(missing) or 'text'}")
    if arrays["audio"].ndim != 1:
        raise DataError(f"{path}: audio must be one 1-D array of all the samples (mono, recordings end to end), got "
                        f"shape {arrays['audio'].shape}")
    offsets = arrays["offsets"].astype(np.int64)
    n = len(offsets) - 1
    if n < 1 or offsets[0] != 0 or offsets[-1] != len(arrays["audio"]) or bool((np.diff(offsets) < 0).any()):
        raise DataError(f"{path}: offsets must rise from 0 to len(audio) = {len(arrays['audio'])}")
    texts = ([str(t) for t in arrays["text"]] if "text" in arrays else [str(int(d)) for d in arrays["digit"]])
    speakers = [str(s) for s in arrays["speaker"]] if "speaker" in arrays else ["-"] * n
    if len(texts) != n or len(speakers) != n:
        raise DataError(f"{path}: {n} recordings (offsets) but {len(texts)} texts and {len(speakers)} speakers")
    splits = None
    if "split" in arrays:
        splits = [str(s) for s in arrays["split"]]
    elif "index" in arrays and "digit" in arrays:  # the Free Spoken Digit Dataset's takes
        splits = ["test" if int(i) in FSDD_TEST_TAKES else "valid" if int(i) in FSDD_VALID_TAKES else "train"
                  for i in arrays["index"]]
    if splits is not None and (len(splits) != n or set(splits) - set(SPLITS)):
        raise DataError(f"{path}: split must name train, valid or test for each of the {n} recordings")
    return Recordings(_pcm_to_float(arrays["audio"], str(path)), offsets, texts, speakers,
                      int(arrays["sample_rate"]), splits)


def read_wav(path: str | Path, sample_rate: int | None = None) -> tuple[np.ndarray, int]:
    """(mono float32 samples in [-1, 1], rate) of an audio file; resampled to ``sample_rate`` when given.

    Stereo (or more channels) is mixed down to mono by averaging. One line for a file that is
    missing, not audio, or empty.
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path} is a directory; give the audio files in it (e.g. {path / '*.wav'})")
    if not path.is_file():
        raise DataError(f"audio file not found: {path}")
    return _read_audio(str(path), str(path), sample_rate)


def read_audio_bytes(data: bytes, name: str, sample_rate: int | None = None,
                     max_seconds: float | None = None) -> tuple[np.ndarray, int]:
    """``read_wav`` for the bytes of an audio file (e.g. sent to the server); ``name`` says which in errors.

    With ``max_seconds``, a longer recording is refused from its header, before its samples are decoded.
    """
    if not data:
        raise DataError(f"{name} is empty (0 bytes); give the bytes of a WAV/FLAC/OGG file")
    return _read_audio(io.BytesIO(data), name, sample_rate, max_seconds)


def _read_audio(source, name: str, sample_rate: int | None, max_seconds: float | None = None) -> tuple[np.ndarray, int]:
    """Decode ``source`` (a path or a file object) to mono float32, resampled to ``sample_rate`` when given."""
    import soundfile

    try:
        with soundfile.SoundFile(source) as f:
            if max_seconds is not None and f.frames > max_seconds * f.samplerate:
                raise DataError(f"{name} lasts {f.frames / f.samplerate:.1f} s; at most {max_seconds:g} s per file")
            audio, rate = f.read(dtype="float32", always_2d=True), f.samplerate
    except DataError:
        raise
    except (RuntimeError, soundfile.LibsndfileError, ValueError) as e:
        detail = " ".join(str(e).replace(repr(source), name).split())  # not "<_io.BytesIO object at 0x...>"
        raise DataError(f"cannot read {name} as audio ({detail}); give a WAV/FLAC/OGG file") from None
    if audio.shape[0] == 0:
        raise DataError(f"{name} holds no samples")
    if not np.isfinite(audio).all():
        raise DataError(f"{name} holds NaN or infinite samples; give a recording of finite samples")
    peak = float(np.abs(audio).max())
    if peak > MAX_SAMPLE:
        raise DataError(f"{name} has samples up to {peak:.3g}, more than {MAX_SAMPLE:g} times full scale; scale "
                        "the recording to [-1, 1]")
    audio = audio.mean(axis=1) if audio.shape[1] > 1 else audio[:, 0]
    if sample_rate and rate != sample_rate:
        audio, rate = resample(audio, rate, sample_rate), sample_rate
    return np.ascontiguousarray(audio, dtype=np.float32), rate


def resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """``audio`` at ``rate`` Hz resampled to ``target`` Hz (soxr, high quality)."""
    import soxr

    return soxr.resample(audio, rate, target).astype(np.float32)


def read_manifest(path: Path, sample_rate: int | None = None) -> Recordings:
    """Recordings listed in a TSV: ``path<TAB>transcript[<TAB>speaker]``, paths relative to the manifest."""
    waves, texts, speakers = [], [], []
    rate = sample_rate
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        line = path.read_bytes()[:e.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not valid UTF-8; convert the manifest to UTF-8, e.g. iconv -f latin1 -t "
                        "utf-8") from None
    for line_no, row in enumerate(csv.reader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE), 1):
        if not row or not row[0].strip():
            continue
        if len(row) < 2 or not row[1].strip():
            raise DataError(f"{path}:{line_no}: expected path<TAB>transcript[<TAB>speaker], got {row!r}")
        wave, rate = read_wav(path.parent / row[0], rate)
        waves.append(wave)
        texts.append(row[1].strip())
        speakers.append(row[2].strip() if len(row) > 2 else "-")
    if not waves:
        raise DataError(f"{path} lists no recordings")
    offsets = np.zeros(len(waves) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(w) for w in waves])
    return Recordings(np.concatenate(waves), offsets, texts, speakers, int(rate))


def read_recordings(path: str | Path, sample_rate: int | None = None) -> Recordings:
    """Recordings from an .npz or a .tsv manifest, at ``sample_rate`` (an .npz must already have it)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"speech data not found: {path}")
    if path.suffix == ".npz":
        rec = read_npz(path)
        if sample_rate and rec.sample_rate != sample_rate:
            rec.audio, rec.offsets = _resample_all(rec, sample_rate)
            rec.sample_rate = sample_rate
        return rec
    if path.suffix in (".tsv", ".txt"):
        return read_manifest(path, sample_rate)
    raise DataError(f"{path}: speech data must be an .npz of recordings or a .tsv manifest (path<TAB>transcript)")


def _resample_all(rec: Recordings, target: int) -> tuple[np.ndarray, np.ndarray]:
    waves = [resample(rec.wave(k), rec.sample_rate, target) for k in range(len(rec))]
    offsets = np.zeros(len(waves) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(w) for w in waves])
    return np.concatenate(waves), offsets
