"""``seqmap average``: the checkpoints it refuses before reading any weights, and the directory it never overwrites."""

import pytest

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
