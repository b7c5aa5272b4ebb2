"""Speech data: recordings from an .npz or WAV files, splits, joined utterances, and one-line errors."""

from __future__ import annotations

import io
import wave
import zipfile
from pathlib import Path

import numpy as np
import pytest

soundfile = pytest.importorskip("soundfile", reason="the speech extra (pip install 'seqmap[speech]') is not installed")

from seqmap.config import DataConfig  # noqa: E402
from seqmap.data.audio import join, read_audio_bytes, read_npz, read_recordings, read_wav, single  # noqa: E402
from seqmap.data.corpus import DataError  # noqa: E402
from seqmap.data.dataset_files import DatasetError, npz_arrays_sha256  # noqa: E402
from seqmap.data.fsdd import FSDD_ARRAYS_SHA256, build_npz  # noqa: E402
from seqmap.tasks.speech import speech_split  # noqa: E402


def wav_bytes(samples: np.ndarray, rate: int = 8000, channels: int = 1) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return out.getvalue()


def fsdd_like(path, speakers=("ann", "bob"), takes=12, seed=0) -> None:
    """A tiny FSDD-shaped .npz: digits 0-2, the given speakers, ``takes`` takes each, random lengths."""
    rng = np.random.default_rng(seed)
    rows = [(d, s, i) for d in range(3) for s in speakers for i in range(takes)]
    waves = [rng.integers(-3000, 3000, rng.integers(900, 1500)).astype(np.int16) for _ in rows]
    offsets = np.concatenate([[0], np.cumsum([len(w) for w in waves])])
    np.savez(path, audio=np.concatenate(waves), offsets=offsets, digit=np.array([d for d, _, _ in rows], np.uint8),
             speaker=np.array([s for _, s, _ in rows]), index=np.array([i for _, _, i in rows], np.uint16),
             sample_rate=np.array(8000))


def test_fsdd_takes_give_the_official_split(tmp_path):
    fsdd_like(tmp_path / "f.npz")
    rec = read_npz(tmp_path / "f.npz")
    assert len(rec) == 72 and rec.sample_rate == 8000 and rec.texts[:2] == ["0", "0"]
    assert rec.splits[:12] == ["test"] * 5 + ["valid"] * 5 + ["train"] * 2
    assert rec.audio.dtype == np.float32 and np.abs(rec.audio).max() <= 1.0


def test_splits_exclusions_and_joined_utterances_are_deterministic(tmp_path):
    fsdd_like(tmp_path / "f.npz")
    cfg = DataConfig(task="speech", train=str(tmp_path / "f.npz"), join=[2, 3], join_count=[40, 10, 20],
                     exclude_speakers=["bob"])
    train, valid, test = (speech_split(cfg, s) for s in ("train", "valid", "test"))
    assert (len(train), len(valid), len(test)) == (40, 10, 20)
    assert {train.speaker(i) for i in range(40)} == {"ann"}  # bob is left out of train and valid ...
    assert {test.speaker(i) for i in range(20)} == {"ann", "bob"}  # ... but tested
    again = speech_split(cfg, "train")
    assert again.parts == train.parts and again.gaps == train.gaps
    for u in (train, test):
        for i in range(len(u)):
            words = u.text(i).split()
            assert 2 <= len(words) <= 3 and all(w in "012" for w in words)
            assert len(u.wave(i)) == u.length(i)
            assert len({u.recordings.speakers[k] for k in u.parts[i]}) == 1  # one speaker per utterance
    # each part is a recording of that split: test utterances only from takes 0-4
    rec = read_npz(tmp_path / "f.npz")
    test_waves = {rec.wave(k).tobytes() for k in range(len(rec)) if rec.splits[k] == "test"}
    assert all(test.recordings.wave(k).tobytes() in test_waves for parts in test.parts for k in parts)


def test_joined_audio_is_the_recordings_with_silences_between():
    from seqmap.data.audio import Recordings

    rec = Recordings(np.arange(1, 11, dtype=np.float32), np.array([0, 4, 10]), ["a", "b"], ["s", "s"], 10)
    u = join(rec, 5, 2, 2, (0.1, 0.3), seed=3)
    for i in range(5):
        w, parts, gaps = u.wave(i), u.parts[i], u.gaps[i]
        assert u.text(i) == " ".join("ab"[k] for k in parts)
        assert np.count_nonzero(w) == sum(4 if k == 0 else 6 for k in parts)
        assert w[:gaps[0]].tolist() == [0.0] * gaps[0] and 1 <= gaps[0] <= 3
    assert single(rec).text(1) == "b" and single(rec).wave(1).tolist() == list(range(5, 11))


def test_wav_files_mono_stereo_and_resampling(tmp_path):
    tone = (10000 * np.sin(np.arange(1600) / 5)).astype(np.int16)
    (tmp_path / "m.wav").write_bytes(wav_bytes(tone))
    (tmp_path / "s.wav").write_bytes(wav_bytes(np.stack([tone, tone // 2], 1).reshape(-1), channels=2))
    (tmp_path / "hi.wav").write_bytes(wav_bytes(np.repeat(tone, 2), rate=16000))
    mono, rate = read_wav(tmp_path / "m.wav")
    assert rate == 8000 and mono.shape == (1600,) and abs(mono[10] - tone[10] / 32768) < 1e-6
    stereo, _ = read_wav(tmp_path / "s.wav")
    np.testing.assert_allclose(stereo, (tone + tone // 2) / 2 / 32768, atol=1e-4)  # mixed down
    resampled, rate = read_wav(tmp_path / "hi.wav", 8000)
    assert rate == 8000 and abs(len(resampled) - 1600) <= 1


def test_manifest_of_wav_files(tmp_path):
    (tmp_path / "a.wav").write_bytes(wav_bytes(np.full(900, 1000, np.int16)))
    (tmp_path / "b.wav").write_bytes(wav_bytes(np.full(1200, -1000, np.int16)))
    (tmp_path / "list.tsv").write_text("a.wav\tone two\tann\n\nb.wav\tthree\n", encoding="utf-8")
    rec = read_recordings(tmp_path / "list.tsv")
    assert rec.texts == ["one two", "three"] and rec.speakers == ["ann", "-"] and rec.offsets.tolist() == [0, 900, 2100]
    (tmp_path / "bad.tsv").write_text("a.wav\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.tsv:1: expected path<TAB>transcript"):
        read_recordings(tmp_path / "bad.tsv")


@pytest.mark.parametrize("content, match", [
    (b"RIFF\x00\x00\x00\x00WAVEjunk", "cannot read .* as audio"),
    (b"not audio at all", "cannot read .* as audio"),
])
def test_bad_audio_files_are_one_line_errors(tmp_path, content, match):
    (tmp_path / "x.wav").write_bytes(content)
    with pytest.raises(DataError, match=match) as e:
        read_wav(tmp_path / "x.wav")
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match="audio file not found"):
        read_wav(tmp_path / "missing.wav")


def test_a_directory_or_a_manifest_not_in_utf8_is_one_line(tmp_path):
    with pytest.raises(DataError, match=r"is a directory; give the audio files in it \(e.g. .*\*\.wav\)"):
        read_wav(tmp_path)
    (tmp_path / "a.wav").write_bytes(wav_bytes(np.full(900, 1000, np.int16)))
    (tmp_path / "list.tsv").write_bytes("a.wav\tone\na.wav\tdeux \xe9\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"list.tsv:2: not valid UTF-8; convert the manifest to UTF-8"):
        read_recordings(tmp_path / "list.tsv")
    (tmp_path / "crlf.tsv").write_bytes(b"a.wav\tone\r\na.wav\ttwo\r\n")
    assert read_recordings(tmp_path / "crlf.tsv").texts == ["one", "two"]


def test_an_empty_wav_is_refused(tmp_path):
    (tmp_path / "e.wav").write_bytes(wav_bytes(np.zeros(0, np.int16)))
    with pytest.raises(DataError, match="holds no samples"):
        read_wav(tmp_path / "e.wav")


def test_npz_problems_name_the_array(tmp_path):
    np.savez(tmp_path / "x.npz", audio=np.zeros(10, np.int16), offsets=np.array([0, 5, 9]), text=np.array(["a", "b"]),
             sample_rate=np.array(8000))
    with pytest.raises(DataError, match="offsets must rise from 0 to len"):
        read_npz(tmp_path / "x.npz")
    np.savez(tmp_path / "y.npz", audio=np.zeros(10, np.int16), offsets=np.array([0, 10]))
    with pytest.raises(DataError, match="missing sample_rate"):
        read_npz(tmp_path / "y.npz")


def _npz(path, audio, offsets, **arrays) -> Path:
    np.savez(path, audio=audio, offsets=np.asarray(offsets), sample_rate=np.array(8000), **arrays)
    return path


def test_an_npz_at_another_rate_is_resampled_to_the_models(tmp_path):
    """``read_recordings(path, rate)`` of an .npz at 8 kHz for a 16 kHz model: every recording resampled on its own
    (offsets follow), texts, speakers and splits kept; without a rate the file's own is kept."""
    tone = (0.5 * np.sin(2 * np.pi * 440 * np.arange(800) / 8000)).astype(np.float32)
    path = _npz(tmp_path / "r.npz", np.concatenate([tone, tone[:400]]), [0, 800, 1200], text=np.array(["a", "b"]),
                speaker=np.array(["ann", "bob"]), split=np.array(["train", "test"]))
    same = read_recordings(path)
    assert same.sample_rate == 8000 and same.offsets.tolist() == [0, 800, 1200]
    rec = read_recordings(path, 16000)
    assert rec.sample_rate == 16000 and rec.offsets.tolist() == [0, 1600, 2400] and len(rec.audio) == 2400
    assert (rec.texts, rec.speakers, rec.splits) == (["a", "b"], ["ann", "bob"], ["train", "test"])
    assert rec.audio.dtype == np.float32
    # the 440 Hz tone is still a 440 Hz tone: its spectrum peaks at bin 440 / (16000 / 1600) = 44
    assert int(np.argmax(np.abs(np.fft.rfft(rec.wave(0))))) == 44
    assert abs(float(np.abs(rec.wave(0)[200:1400]).max()) - 0.5) < 0.02


def test_speech_data_paths_that_cannot_be_read_are_one_line(tmp_path):
    with pytest.raises(DataError, match=r"^speech data not found: .*nope.npz$"):
        read_recordings(tmp_path / "nope.npz")
    (tmp_path / "a.wav").write_bytes(wav_bytes(np.zeros(100, np.int16)))
    with pytest.raises(DataError, match=r"a.wav: speech data must be an .npz of recordings or a .tsv manifest"):
        read_recordings(tmp_path / "a.wav")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match=r"^cannot read .*bad.npz as an .npz of recordings: "):
        read_recordings(tmp_path / "bad.npz")
    (tmp_path / "empty.tsv").write_text("\n\n")
    with pytest.raises(DataError, match=r"empty.tsv lists no recordings"):
        read_recordings(tmp_path / "empty.tsv")


@pytest.mark.parametrize("audio, offsets, arrays, message", [
    (np.zeros(10, np.int16), [0, 4, 10], dict(text=np.array(["a"])),
     r"2 recordings \(offsets\) but 1 texts and 2 speakers"),
    (np.zeros(10, np.int16), [0, 4, 10], dict(text=np.array(["a", "b"]), split=np.array(["train", "dev"])),
     "split must name train, valid or test for each of the 2 recordings"),
    (np.zeros(10, np.int32), [0, 10], dict(text=np.array(["a"])),
     "audio must be int16 PCM or float samples, got int32"),
    (np.zeros((10, 2), np.int16), [0, 10], dict(text=np.array(["a"])),
     r"audio must be one 1-D array of all the samples \(mono, recordings end to end\), got shape \(10, 2\)"),
    (np.array([0.1, 0.2, np.nan, 0.0], np.float32), [0, 4], dict(text=np.array(["a"])),
     r"audio holds NaN or infinite samples \(the first at sample 2\); give recordings of finite samples"),
    (np.array([0.1, -np.inf], np.float64), [0, 2], dict(text=np.array(["a"])), "the first at sample 1"),
    (np.array([0.1, 1e30], np.float64), [0, 2], dict(text=np.array(["a"])),
     r"audio has samples up to 1e\+30, more than 1e\+06 times full scale"),
])
def test_npz_recordings_that_cannot_be_used_are_one_line(tmp_path, audio, offsets, arrays, message):
    """A stereo array, NaN or huge float samples were read as they were (NaN features, then a failure deep in
    training, as ``read_wav`` refuses for a file); now each is one line naming the file."""
    path = _npz(tmp_path / "x.npz", audio, offsets, **arrays)
    with pytest.raises(DataError, match=message) as e:
        read_npz(path)
    assert str(e.value).startswith(str(path))


def test_fsdd_archive_builds_the_npz_layout():
    rng = np.random.default_rng(0)
    files = {f"repo-abc/recordings/{d}_{s}_{i}.wav": rng.integers(-99, 99, 50 + d + i).astype(np.int16)
             for d in (1, 0) for s in ("theo", "ann") for i in (10, 2)}
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        for name, samples in files.items():
            zf.writestr(name, wav_bytes(samples))
        zf.writestr("repo-abc/README.md", "x")
    with np.load(io.BytesIO(build_npz(archive.getvalue()))) as z:
        assert z["digit"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
        assert z["speaker"].tolist() == ["ann", "ann", "theo", "theo"] * 2
        assert z["index"].tolist() == [2, 10] * 4  # takes compared as numbers
        first = files["repo-abc/recordings/0_ann_2.wav"]
        assert z["audio"][:len(first)].tolist() == first.tolist() and int(z["sample_rate"]) == 8000
    with pytest.raises(DatasetError, match="holds no recordings"):
        build_npz(_zip({"x/readme.txt": b"x"}))


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


LOCAL_COPY = Path(__file__).resolve().parents[3] / "shared" / "data" / "fsdd" / "fsdd.npz"


@pytest.mark.skipif(not LOCAL_COPY.is_file(), reason="the shared copy is not next to the repository")
def test_the_download_recipe_rebuilds_the_local_copy_exactly():
    """WAV files made from the local copy, zipped as GitHub serves the repository, build the same arrays."""
    path = LOCAL_COPY
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    members = {}
    for k in range(len(arrays["digit"])):
        digit, speaker, take = arrays["digit"][k], arrays["speaker"][k], arrays["index"][k]
        name = f"free-spoken-digit-dataset-x/recordings/{digit}_{speaker}_{take}.wav"
        members[name] = wav_bytes(arrays["audio"][arrays["offsets"][k]:arrays["offsets"][k + 1]])
    built = build_npz(_zip(members))
    assert npz_arrays_sha256(built, "built") == FSDD_ARRAYS_SHA256 == npz_arrays_sha256(path.read_bytes(), "copy")


@pytest.mark.parametrize("samples, message", [
    (np.full(800, np.nan, np.float32), "x.wav holds NaN or infinite samples; give a recording of finite samples"),
    (np.full(800, np.inf, np.float32), "x.wav holds NaN or infinite samples"),
    (np.full(800, 1e30, np.float32), "x.wav has samples up to 1e+30, more than 1e+06 times full scale; scale the "
                                     "recording to [-1, 1]"),
])
def test_samples_no_spectrogram_can_hold_are_refused_when_read(samples, message):
    """`seqmap transcribe` of such a file ended in an IndexError inside decoding; the server failed the batch."""
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, 8000, format="WAV", subtype="FLOAT")
    with pytest.raises(DataError) as e:
        read_audio_bytes(buffer.getvalue(), "x.wav")
    assert str(e.value).startswith(message)
    loud = np.full(800, 1e5, np.float32)  # far above full scale, yet a spectrogram holds it
    soundfile.write(buffer := io.BytesIO(), loud, 8000, format="WAV", subtype="FLOAT")
    assert read_audio_bytes(buffer.getvalue(), "x.wav")[0].max() == 1e5


def test_a_file_object_is_named_not_printed():
    with pytest.raises(DataError) as e:
        read_audio_bytes(b"not audio at all", "audio[3]")
    assert "BytesIO" not in str(e.value) and str(e.value).startswith("cannot read audio[3] as audio (")
