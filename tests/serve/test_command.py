"""The ``serve`` subcommand: its options, one-line user errors with exit status 2, and what it hands uvicorn."""

import argparse

import pytest
import uvicorn
from fastapi.testclient import TestClient

from seqmap.serve import add_parser, main


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="seqmap")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    args.overrides = []  # what seqmap.cli.main adds (dotted --section.key overrides)
    return args


def test_defaults_bind_to_loopback():
    args = parse(["serve", "runs/x"])
    assert (args.host, args.port, args.checkpoint) == ("127.0.0.1", 8000, "best")
    assert (args.max_batch, args.wait_ms, args.threads) == (32, 5.0, None)
    assert args.handler is main
    assert parse(["serve", "runs/x", "--which", "last"]).checkpoint == "last"
    assert parse(["serve", "runs/x", "--checkpoint", "last"]).checkpoint == "last"


@pytest.mark.parametrize("extra, words", [
    (["--max-batch", "0"], "--max-batch must be >= 1"),
    (["--wait-ms", "-1"], "--wait-ms must be >= 0"),
    (["--threads", "0"], "--threads must be > 0"),
    (["--port", "70000"], "--port must be in 1..65535"),
    (["--max-chars", "0"], "--max-chars must be >= 1"),
    (["--max-audio-seconds", "nan"], "--max-audio-seconds must be > 0"),
    (["--max-body-bytes", "0"], "--max-body-bytes must be >= 1"),
    (["--device", "toaster"], "--device 'toaster' is not a device"),
    (["--quantize", "int4"], "--quantize 'int4' with --device cpu: use --quantize none, or int8 on the CPU"),
    (["--quantize", "int8", "--device", "cuda"], "--quantize 'int8' with --device cuda: use --quantize none"),
    (["--ct2", "x", "--device", "cuda:0"], "--ct2 runs CTranslate2 on the CPU; leave out --device cuda:0 or --ct2"),
    (["--ct2", "x", "--precision", "bf16"], "--precision bf16 is not available with --ct2 (it decodes in the "
                                            "export's compute type"),
    (["--precision", "bf16"], "--precision bf16 decodes on a CUDA GPU only"),
    (["--max-waiting", "0"], "--max-waiting must be >= 1, got 0"),
])
def test_bad_options_are_one_line_errors(translation_run_dir, capsys, extra, words):
    assert main(parse(["serve", str(translation_run_dir), *extra])) == 2
    err = capsys.readouterr().err
    assert err.startswith("seqmap: error: ") and words in err and err.count("\n") == 1


def test_a_missing_run_or_an_override_is_a_one_line_error(tmp_path, translation_run_dir, capsys):
    assert main(parse(["serve", str(tmp_path / "nowhere")])) == 2
    assert f"{tmp_path / 'nowhere'} does not exist" in capsys.readouterr().err
    args = parse(["serve", str(translation_run_dir)])
    args.overrides = ["--decode.beam_size", "4"]
    assert main(args) == 2
    assert "per request" in capsys.readouterr().err


def test_main_serves_the_run_on_the_address_given(translation_run_dir, monkeypatch, capsys):
    served = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.update(app=app, **kwargs))
    args = parse(["serve", str(translation_run_dir), "--port", "8123", "--max-batch", "4", "--threads", "1"])
    assert main(args) == 0
    assert (served["host"], served["port"]) == ("127.0.0.1", 8123)
    assert "http://127.0.0.1:8123/" in capsys.readouterr().out
    with TestClient(served["app"]) as client:
        assert client.get("/info").json()["batching"]["max_batch"] == 4
        assert client.post("/translate", json={"text": "a b"}).status_code == 200


def test_the_seqmap_command_line_has_serve(translation_run_dir, monkeypatch, capsys):
    from seqmap.cli import main as cli_main

    served = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.update(app=app, **kwargs))
    assert cli_main(["serve", str(translation_run_dir), "--port", "8124", "--threads", "1"]) == 0
    assert served["port"] == 8124 and "http://127.0.0.1:8124/" in capsys.readouterr().out
    assert cli_main(["serve", str(translation_run_dir), "--decode.beam_size", "4"]) == 2
    assert "per request" in capsys.readouterr().err


def test_a_speech_run_is_served_with_its_audio_limit(speech_run_dir, monkeypatch, capsys):
    served = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.update(app=app, **kwargs))
    assert main(parse(["serve", str(speech_run_dir), "--max-audio-seconds", "5", "--max-body-bytes", "2600000",
                       "--threads", "1"])) == 0
    assert "speech, checkpoint" in capsys.readouterr().out
    with TestClient(served["app"]) as client:
        info = client.get("/info").json()
        assert info["task"] == "speech" and info["limits"]["max_audio_seconds"] == 5.0
        assert info["limits"]["max_body_bytes"] == 2_600_000  # a 60 s WAV of 16-bit 16 kHz audio, base64
        assert client.post("/generate", json={"prompt": "a"}).json()["detail"].endswith(
            "POST /transcribe with base64 audio files instead")


def test_a_graph_run_is_refused_in_one_line(tmp_path, capsys):
    """A GAT run classifies the nodes of its one graph: nothing a request could send, so serve says what to use."""
    import os

    import numpy as np

    from seqmap.config import RunConfig, from_dict
    from seqmap.training.run_trainer import train

    n = 12
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n])
    np.savez(tmp_path / "g.npz", features=np.eye(n, 4, dtype=np.float32), labels=np.arange(n) % 2,
             edge_index=np.concatenate([ring, ring[::-1]], axis=1), train_idx=np.arange(6), val_idx=np.arange(6, 9),
             test_idx=np.arange(9, 12))
    cfg = from_dict(RunConfig, {"model": {"family": "gat", "d_model": 4, "n_heads": 2},
                                "data": {"task": "graph", "train": str(tmp_path / "g.npz")},
                                "train": {"max_steps": 2, "valid_every": 2, "warmup": 0, "schedule": "constant",
                                          "device": "cpu"}})
    with open(os.devnull, "w") as devnull:
        train(cfg, tmp_path / "run", stream=devnull)
    assert main(parse(["serve", str(tmp_path / "run")])) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"seqmap: error: {tmp_path / 'run'} is a graph (GAT) run; the server translates")
    assert "seqmap plot attention --node" in err and err.count("\n") == 1


def test_python_dash_m_seqmap_serve_is_the_serve_command(tmp_path):
    """``python -m seqmap.serve RUN_DIR``: the same options and one-line errors (exit 2) as ``seqmap serve``."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "seqmap.serve", str(tmp_path / "nowhere"), "--port", "8125"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"seqmap: error: {tmp_path / 'nowhere'} does not exist; give a run directory or a "
                           "checkpoint directory\n")
    bad = subprocess.run([sys.executable, "-m", "seqmap.serve", "x", "--prot", "1"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("usage: python -m seqmap.serve ")
    assert "unrecognized arguments: --prot 1" in bad.stderr
