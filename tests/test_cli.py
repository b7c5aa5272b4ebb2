"""The command line, run as a user would: ``python -m seqmap ...`` in a subprocess."""

import json
import subprocess
import sys
from pathlib import Path

import seqmap

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "toy" / "reverse_transformer.yaml"
TINY = ["--model.d_model", "16", "--model.n_heads", "2", "--model.d_ff", "32", "--model.enc_layers", "1",
        "--model.dec_layers", "1", "--toy.steps", "5", "--toy.warmup", "2", "--toy.eval_size", "8",
        "--toy.log_every", "5", "--threads", "1"]


def seqmap_cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "seqmap", *args], capture_output=True, text=True, timeout=timeout)


def test_version():
    out = seqmap_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"seqmap {seqmap.__version__}"


def test_toy_runs_and_prints_metrics():
    out = seqmap_cli("toy", str(CONFIG), *TINY)
    assert out.returncode == 0, out.stderr
    assert "step     5  loss" in out.stdout
    assert "src " in out.stdout and "hyp " in out.stdout
    (line,) = [line for line in out.stdout.splitlines() if line.startswith("metrics ")]
    metrics = json.loads(line.removeprefix("metrics "))
    assert metrics["eval_size"] == 8 and 0.0 <= metrics["exact_match"] <= 1.0
    assert metrics["family"] == "transformer" and metrics["task"] == "reverse"


def test_unknown_key_names_the_nearest_one():
    out = seqmap_cli("toy", str(CONFIG), "--model.d_modle", "32")
    assert out.returncode == 2
    assert "model.d_model" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_missing_config_file_is_named():
    out = seqmap_cli("toy", "no/such/config.yaml")
    assert out.returncode == 2
    assert "no/such/config.yaml" in out.stderr and "Traceback" not in out.stderr


def test_bad_yaml_and_bad_values_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [1\n")
    out = seqmap_cli("toy", str(bad))
    assert out.returncode == 2 and "bad.yaml" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = seqmap_cli("toy", str(CONFIG), "--toy.task", "rotate")
    assert out.returncode == 2 and "toy.task" in out.stderr and "Traceback" not in out.stderr


def test_help_lists_every_verb():
    out = seqmap_cli("--help")
    assert out.returncode == 0
    for verb in ("train", "translate", "evaluate", "generate", "average", "data", "plot", "toy", "serve"):
        assert f"    {verb} " in out.stdout or f"    {verb}\n" in out.stdout, verb


def test_each_verb_reads_in_one_screen():
    """The command line is a package with one module per verb (``seqmap/cli/``), none of them long."""
    package = Path(seqmap.__file__).parent / "cli"
    lengths = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in package.glob("*.py")}
    assert {"train.py", "translate.py", "evaluate.py", "generate.py", "plot.py", "toy.py"} <= set(lengths)
    assert max(lengths.values()) <= 150, lengths
