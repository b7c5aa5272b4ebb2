"""Speech recognition end to end through config / train / evaluate / transcribe / plot, and exact resume.

The task: three "words" that are tones (300 Hz, 1 kHz, 2.5 kHz), 1-3 of them per utterance with silences
between, spoken by two "speakers". A model that does not hear (e.g. one whose features lose the spectrum)
gets the count of words right but not which; one that hears learns it in a few hundred steps.
"""

from __future__ import annotations

import json
import wave

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

pytest.importorskip("librosa", reason="the speech extra (pip install 'seqmap[speech]') is not installed")

from seqmap.cli import main  # noqa: E402
from seqmap.runs import load_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
RATE = 8000
WORDS = {"low": 300.0, "mid": 1000.0, "high": 2500.0}


def tone(freq: float, rng, seconds: float | None = None) -> np.ndarray:
    n = int(RATE * (seconds or rng.uniform(0.10, 0.16)))
    t = np.arange(n) / RATE
    wave_ = rng.uniform(0.2, 0.8) * np.sin(2 * np.pi * freq * rng.uniform(0.95, 1.05) * t)
    return (0.5 * 32767 * (wave_ + 0.02 * rng.standard_normal(n))).astype(np.int16)


def tones_npz(path, per_word: int = 30, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    texts, waves, splits, speakers = [], [], [], []
    for word, freq in WORDS.items():
        for i in range(per_word):
            waves.append(tone(freq, rng))
            texts.append(word)
            splits.append("test" if i < 5 else "valid" if i < 10 else "train")
            speakers.append("ann" if i % 2 else "bob")
    offsets = np.concatenate([[0], np.cumsum([len(w) for w in waves])])
    np.savez(path, audio=np.concatenate(waves), offsets=offsets, text=np.array(texts), split=np.array(splits),
             speaker=np.array(speakers), sample_rate=np.array(RATE))


def config(tmp_path, steps: int = 300, **model) -> str:
    tones_npz(tmp_path / "tones.npz")
    cfg = {"model": {"family": "speech", "d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 1, "dec_layers": 1,
                     "dropout": 0.0, "n_mels": 20, "conv_channels": 4, **model},
           "data": {"task": "speech", "train": str(tmp_path / "tones.npz"), "tokenizer": "word", "vocab_size": 10,
                    "join": [1, 3], "join_silence": [0.03, 0.08], "join_count": [400, 30, 40]},
           "train": {"max_steps": steps, "max_tokens": 400, "lr": 3e-3, "warmup": 10, "schedule": "constant",
                     "valid_every": 100, "log_every": 50, "early_stopping": "wer", "label_smoothing": 0.0},
           "decode": {"beam_size": 2, "max_len_a": 0.5, "max_len_b": 3}}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def wav_file(path, samples: np.ndarray, rate: int = RATE, channels: int = 1) -> str:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return str(path)


def test_train_evaluate_transcribe_plot(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", config(tmp_path), "--run-dir", str(run_dir)]) == 0
    result = json.loads(capsys.readouterr().out.split("result ", 1)[1])
    assert result["test_wer"] <= 10.0  # a model that cannot tell the tones apart is near 67
    run = load_run(run_dir)
    assert run.cfg.model.sample_rate == RATE and run.src_tok is None
    assert main(["evaluate", str(run_dir)]) == 0  # the run's own test split, scored per speaker
    out = capsys.readouterr().out
    assert f"WER = {result['test_wer']:.2f}" in out and "ann" in out and "bob" in out
    # WAV files: mono at the model's rate, stereo, and 16 kHz (resampled)
    rng = np.random.default_rng(7)
    silence = np.zeros(int(0.05 * RATE), np.int16)
    words = ["high", "low", "mid"]
    mono = np.concatenate([silence, *[np.concatenate([tone(WORDS[w], rng, 0.13), silence]) for w in words]])
    files = [wav_file(tmp_path / "mono.wav", mono),
             wav_file(tmp_path / "stereo.wav", np.stack([mono, mono], 1).reshape(-1), channels=2),
             wav_file(tmp_path / "hi.wav", np.repeat(mono, 2), rate=2 * RATE)]
    assert main(["transcribe", str(run_dir), *files, "--decode.beam_size", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[0] for line in lines] == files
    assert lines[0].split("\t")[1] == "high low mid" == lines[1].split("\t")[1]
    assert main(["plot", "attention", str(run_dir), "--audio", files[0], "--out", str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "a.png").stat().st_size > 0
    assert main(["translate", str(run_dir), "x"]) == 2
    assert "use `seqmap transcribe / evaluate`" in capsys.readouterr().err


def test_resume_is_exact_with_spec_augment(tmp_path):
    cfg = config(tmp_path, steps=30, spec_augment=[1, 3, 1, 4], conformer=True, conv_kernel=3, ctc_weight=0.3)
    assert main(["train", cfg, "--run-dir", str(tmp_path / "straight"), "--train.valid_every", "15"]) == 0
    assert main(["train", cfg, "--run-dir", str(tmp_path / "resumed"), "--train.max_steps", "15",
                 "--train.valid_every", "15"]) == 0
    assert main(["train", "--resume", str(tmp_path / "resumed"), "--train.max_steps=30"]) == 0
    a = load_file(tmp_path / "straight" / "checkpoints" / "step-000030" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "checkpoints" / "step-000030" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_bad_audio_and_speech_configs_are_one_line(tmp_path, capsys):
    cfg = config(tmp_path, steps=2)
    run_dir = tmp_path / "r"
    assert main(["train", cfg, "--run-dir", str(run_dir), "--train.valid_every", "2"]) == 0
    capsys.readouterr()
    (tmp_path / "bad.wav").write_bytes(b"RIFF....WAVEjunk")
    (tmp_path / "a_file").write_text("")
    (tmp_path / "list.txt").write_text(str(tmp_path / "bad.wav") + "\n")
    for args, message in [
        # --out as a folder, or inside a file: found before decoding (they were tracebacks after it)
        (["evaluate", str(run_dir), "--out", str(tmp_path)], f"--out {tmp_path} is a directory; give a file path"),
        (["evaluate", str(run_dir), "--out", str(tmp_path / "a_file" / "t.hyp")], "cannot write the transcripts to"),
        (["evaluate", str(run_dir), "--src", "a.txt"], "--src is for translation runs; "
                                                       f"{run_dir} is a speech run: leave out --src"),
        (["transcribe", str(run_dir), str(tmp_path / "bad.wav"), "--input", str(tmp_path / "list.txt")],
         "give audio files as arguments or --input LIST, not both"),
        (["transcribe", str(run_dir)], "nothing to transcribe: give AUDIO files, or --input LIST"),
        (["transcribe", str(run_dir), str(tmp_path / "bad.wav")], "cannot read"),
        (["transcribe", str(run_dir), str(tmp_path / "none.wav")], "audio file not found"),
        (["transcribe", str(run_dir), wav_file(tmp_path / "short.wav", np.zeros(100, np.int16))], "too short"),
        (["plot", "attention", str(run_dir), "--text", "x", "--out", str(tmp_path / "x.png")],
         "is a speech run: plot it with --audio FILE"),
        (["train", cfg, "--run-dir", str(tmp_path / "r2"), "--model.family", "transformer"],
         "model.family=speech and data.task=speech go together"),
        (["train", cfg, "--run-dir", str(tmp_path / "r3"), "--train.early_stopping", "bleu"],
         "speech validates loss, ppl, wer and string_accuracy"),
        (["train", cfg, "--run-dir", str(tmp_path / "r4"), "--data.join", "[3, 2]"], "data.join must be [lo, hi]"),
    ]:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
