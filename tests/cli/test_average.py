"""``seqmap average``: the checkpoints it refuses (before reading any weights, or of different runs), and the
directory it never overwrites."""

import pytest
import torch

from seqmap.checkpoints import save_checkpoint
from seqmap.cli import main


@pytest.fixture
def checkpoints(tmp_path):
    """Two step directories of a run (their contents are not read by these refusals)."""
    steps = [tmp_path / "run" / "checkpoints" / f"step-00000{i}" for i in (1, 2)]
    for step in steps:
        step.mkdir(parents=True)
        (step / "model.safetensors").write_bytes(b"weights")
    return steps


def test_an_existing_out_is_never_overwritten(checkpoints, capsys):
    first, second = checkpoints
    assert main(["average", str(first), str(second), "--out", str(first)]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: --out {first} already exists; give a new directory "
                                       "(averaging never overwrites)\n")
    assert (first / "model.safetensors").read_bytes() == b"weights"


def test_a_run_directory_or_a_repeated_checkpoint_is_refused(checkpoints, tmp_path, capsys):
    first, second = checkpoints
    run = tmp_path / "run"
    assert main(["average", str(run), str(first), "--out", str(tmp_path / "avg")]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: {run} is a run directory; give its checkpoint directories "
                                       f"({run}/checkpoints/step-*)\n")
    assert main(["average", str(first), str(second), f"{first}/", "--out", str(tmp_path / "avg")]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: {first} is given twice; give each checkpoint once (each "
                                       "counts once in the mean)\n")
    assert not (tmp_path / "avg").exists()


def test_checkpoints_of_two_runs_are_refused_in_one_line(tmp_path, capsys):
    """Two runs of one shape (pre-LN and post-LN) used to be averaged into weights neither run could use."""
    steps = []
    for run, norm in (("pre", "pre"), ("post", "post")):
        step = tmp_path / run / "checkpoints" / "step-000100"
        save_checkpoint(step, model=torch.nn.Linear(3, 3), trainer_state={}, config={"model": {"norm_position": norm}})
        steps.append(step)
    assert main(["average", *map(str, steps), "--out", str(tmp_path / "avg")]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: cannot average {steps[0]} and {steps[1]}: they are not "
                                       "checkpoints of one run (model.norm_position 'pre' vs 'post'); average "
                                       "checkpoints of one run\n")
    assert not (tmp_path / "avg").exists()


def test_one_checkpoint_under_two_spellings_is_refused(checkpoints, tmp_path, monkeypatch, capsys):
    """A relative and an absolute path to one checkpoint used to count it twice in the mean."""
    first, second = checkpoints
    monkeypatch.chdir(first.parent)
    assert main(["average", first.name, str(first), str(second), "--out", str(tmp_path / "avg")]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: {first.name} is given twice; give each checkpoint once "
                                       "(each counts once in the mean)\n")
    assert not (tmp_path / "avg").exists()


def test_an_out_under_a_file_is_refused_in_one_line(checkpoints, tmp_path, capsys):
    """``--out FILE/avg`` used to end in a FileExistsError traceback after the weights were averaged."""
    first, second = checkpoints
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "avg"
    assert main(["average", str(first), str(second), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: {tmp_path / 'file'} is a file, so --out {out} cannot be made "
                                       "under it; give a new directory\n")
