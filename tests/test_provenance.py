"""Provenance: a run directory says where and with what it was trained (provenance.json, the start of train.log),
a resumed run keeps it, and ``seqmap evaluate`` notes a run trained on another machine. No CPU is named here: the
expectations are what this machine's torch reports, so they hold on every CPU kind."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from seqmap import __version__, provenance
from seqmap.cli import main
from seqmap.config import RunConfig, from_dict
from seqmap.provenance import PROVENANCE_FILE, ProvenanceError
from seqmap.training.run_trainer import train

sys.path.insert(0, str(Path(__file__).resolve().parent / "training"))
from test_trainer import config  # noqa: E402  (the tiny reverse-translation run of the training tests)

TIME = re.compile(r"^\d\d:\d\d:\d\d ")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Reversed sequences of letters, as the training tests use (train, valid, test)."""
    root, rng = tmp_path_factory.mktemp("corpus"), random.Random(1)
    for split, n in (("train", 200), ("valid", 8), ("test", 4)):
        pairs = [rng.choices("abcdefghij", k=rng.randint(2, 6)) for _ in range(n)]
        (root / f"{split}.src").write_text("".join(" ".join(w) + "\n" for w in pairs))
        (root / f"{split}.tgt").write_text("".join(" ".join(reversed(w)) + "\n" for w in pairs))
    return root


def _train(corpus: Path, run: Path, steps: int, resume: bool = False) -> None:
    cfg = from_dict(RunConfig, config(corpus, max_steps=steps, valid_every=2, valid_bleu=False))
    train(cfg, run, resume=resume, stream=open(os.devnull, "w"))


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    _train(corpus, run, 2)
    return run


def _log_lines(run: Path) -> list[str]:
    """train.log without the time each line starts with."""
    return [TIME.sub("", line) for line in (run / "train.log").read_text().splitlines()]


def test_a_run_records_where_it_was_trained_beside_its_config(trained):
    assert (trained / "config.yaml").is_file() and (trained / PROVENANCE_FILE).is_file()
    p = provenance.read(trained)
    assert p.seqmap == __version__ and p.python == platform.python_version()
    assert p.torch == torch.__version__
    assert p.isa == torch.backends.cpu.get_cpu_capability()
    assert p.threads == torch.get_num_threads()
    assert (p.device, p.device_type, p.gpu) == ("cpu", "cpu", None)
    assert isinstance(p.cpu, str) and p.cpu
    assert all(isinstance(n, int) for n in (p.cpu_family, p.cpu_model)) or p.cpu_family is p.cpu_model is None
    assert p.libraries["numpy"] == np.__version__ and "sentencepiece" in p.libraries
    assert set(p.libraries) <= set(provenance.LIBRARIES)
    if p.git_commit is None:  # seqmap installed as a package
        assert p.git_dirty is None
    else:
        assert re.fullmatch("[0-9a-f]{40}", p.git_commit) and isinstance(p.git_dirty, bool)


def test_train_log_starts_with_the_block(trained):
    p = provenance.read(trained)
    block = provenance.log_lines(p, resume=False)
    assert _log_lines(trained)[:len(block)] == block
    assert block[0].startswith(f"run started on {p.cpu}") and f"{p.isa} kernels, torch {p.torch}" in block[0]
    assert f"{p.threads} threads (saved in {PROVENANCE_FILE})" in block[0]
    assert block[1].startswith(f"seqmap {__version__}") and f"numpy {np.__version__}" in block[1]
    assert len(block) <= 3


def test_a_resumed_run_keeps_its_file_and_logs_the_machine_it_resumed_on(corpus, tmp_path):
    run = tmp_path / "run"
    _train(corpus, run, 2)
    started = dataclasses.replace(provenance.read(run), cpu="Another CPU", isa="OTHER")  # as if from elsewhere
    provenance.write(started, run)
    saved, log_before = (run / PROVENANCE_FILE).read_text(), (run / "train.log").read_text()
    _train(corpus, run, 4, resume=True)
    assert (run / PROVENANCE_FILE).read_text() == saved
    log = (run / "train.log").read_text()
    assert log.startswith(log_before)
    appended = [TIME.sub("", line) for line in log.removeprefix(log_before).splitlines()]
    here = provenance.collect(torch.device("cpu"))
    assert appended[:2] == provenance.log_lines(here, resume=True)
    assert appended[2] == (f"the run started on {started.machine()}: from here its numbers may differ in the last "
                           "digits from a run on one machine")


def test_a_resumed_run_without_a_file_writes_none(corpus, tmp_path):
    """A run of a seqmap that wrote no provenance: where it started is unknown, so none is made up."""
    run = tmp_path / "run"
    _train(corpus, run, 2)
    (run / PROVENANCE_FILE).unlink()
    _train(corpus, run, 4, resume=True)
    assert not (run / PROVENANCE_FILE).exists()
    assert any(line.startswith("run resumed on ") for line in _log_lines(run))


def _evaluate(run: Path, corpus: Path, capsys, *args: str) -> str:
    """stderr of `seqmap evaluate RUN` (a run or one of its checkpoints) on the test pairs."""
    capsys.readouterr()
    assert main(["evaluate", str(run), "--src", str(corpus / "test.src"), "--ref", str(corpus / "test.tgt"),
                 "--out", str(corpus / "hyps.txt"), *args]) == 0
    return capsys.readouterr().err


@pytest.fixture
def copied(trained, tmp_path) -> Path:
    """The trained run, copied: its provenance file is rewritten."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


def test_evaluate_says_nothing_for_a_run_trained_here(copied, corpus, capsys):
    assert _evaluate(copied, corpus, capsys) == ""
    assert _evaluate(copied, corpus, capsys, "--checkpoint", "last") == ""


def test_evaluate_says_nothing_for_a_run_without_the_file(copied, corpus, capsys):
    (copied / PROVENANCE_FILE).unlink()
    assert _evaluate(copied, corpus, capsys) == ""


def test_evaluate_notes_a_run_trained_on_another_cpu_in_one_line(copied, corpus, capsys):
    here = provenance.read(copied)
    elsewhere = dataclasses.replace(here, cpu=here.cpu + " (another)")
    provenance.write(elsewhere, copied)
    err = _evaluate(copied, corpus, capsys)
    assert err == (f"seqmap: note: this run was trained on {elsewhere.machine()}; this is {here.machine()}: scores "
                   "here may differ in the last digits\n")
    checkpoint = next((copied / "checkpoints").glob("step-*"))  # a checkpoint of the run: the same note
    assert _evaluate(checkpoint, corpus, capsys) == err


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"seqmap": "0.1.0"}', "\xff"])
def test_evaluate_warns_in_one_line_about_a_damaged_file(copied, corpus, capsys, text):
    path = copied / PROVENANCE_FILE
    path.write_bytes(text.encode("latin-1"))
    err = _evaluate(copied, corpus, capsys)
    assert err.startswith(f"seqmap: warning: {path} cannot be read (") and err.count("\n") == 1
    assert err.endswith("; it records where the run was trained: restore it, or delete it to skip this check\n")


@pytest.mark.parametrize("field", provenance.MACHINE_FIELDS)
def test_each_machine_field_makes_a_difference(field):
    here = provenance.collect(torch.device("cpu"))
    other = dataclasses.replace(here, **{field: "something else"})
    assert provenance.differs(here, other) == [field] and provenance.differs(here, here) == []


def test_threads_and_versions_other_than_torchs_make_no_difference():
    here = provenance.collect(torch.device("cpu"))
    other = dataclasses.replace(here, threads=here.threads + 1, python="0", libraries={}, git_commit=None)
    assert provenance.differs(here, other) == []


def test_a_file_round_trips_and_fields_a_later_seqmap_adds_are_ignored(tmp_path):
    here = provenance.collect(torch.device("cpu"))
    assert provenance.write(here, tmp_path) == tmp_path / PROVENANCE_FILE
    assert provenance.read(tmp_path) == here
    saved = json.loads((tmp_path / PROVENANCE_FILE).read_text())
    (tmp_path / PROVENANCE_FILE).write_text(json.dumps({**saved, "later": 1}))
    assert provenance.read(tmp_path) == here
    del saved["isa"]
    (tmp_path / PROVENANCE_FILE).write_text(json.dumps(saved))
    with pytest.raises(ProvenanceError, match=re.escape(f"{tmp_path / PROVENANCE_FILE} cannot be read (it has no "
                                                        "'isa' field)")):
        provenance.read(tmp_path)
    assert provenance.read(tmp_path / "elsewhere") is None


def test_the_cpu_is_named_without_proc_cpuinfo(monkeypatch):
    def unreadable(*args, **kwargs):
        raise FileNotFoundError("/proc/cpuinfo")

    monkeypatch.setattr(provenance, "open", unreadable, raising=False)
    name, family, model = provenance.cpu_identity()
    assert isinstance(name, str) and name and family is None and model is None


def test_a_checkout_gives_its_commit_and_whether_it_changed(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("x = 1\n")
    assert provenance.git_state(package) == (None, None)  # not a checkout
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, env=env, capture_output=True)
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    assert provenance.git_state(package) == (head, False)
    (package / "a.py").write_text("x = 2\n")
    assert provenance.git_state(package) == (head, True)


def test_only_a_checkpoint_inside_a_run_has_a_run_directory(tmp_path):
    assert provenance.run_dir_of(tmp_path / "run" / "checkpoints" / "step-000002") == tmp_path / "run"
    assert provenance.run_dir_of(tmp_path / "averaged") is None
