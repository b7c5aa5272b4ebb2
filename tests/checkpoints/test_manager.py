"""``seqmap.checkpoints.manager``: rotation keeps the last few and the best; the index is rebuilt when lost."""

from __future__ import annotations

import json

import pytest

from seqmap.checkpoints import CheckpointError, CheckpointManager, load_checkpoint

from .test_checkpoint import CONFIG, Tiny


@pytest.mark.parametrize(
    ("mode", "best_step"),
    [("min", 2), ("max", 3)],
)
def test_manager_keeps_last_two_and_best(tmp_path, mode, best_step):
    manager = CheckpointManager(tmp_path, keep_last=2, metric="loss", mode=mode)
    model = Tiny()
    for step, value in zip([1, 2, 3, 4, 5], [3.0, 1.0, 5.0, 2.0, float("nan")], strict=True):
        manager.save(step, model=model, trainer_state={"step": step}, config=CONFIG, metric_value=value)
    kept = sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*"))
    assert kept == sorted({f"step-{best_step:06d}", "step-000004", "step-000005"})
    index = json.loads((tmp_path / "checkpoints" / "index.json").read_text())
    assert sorted(e["name"] for e in index["checkpoints"]) == kept
    assert index["last"] == "step-000005" and index["best"]["step"] == best_step
    assert manager.latest() == tmp_path / "checkpoints" / "step-000005"
    assert manager.best() == tmp_path / "checkpoints" / f"step-{best_step:06d}"
    assert load_checkpoint(manager.best()).trainer_state == {"step": best_step}


def test_a_damaged_index_says_to_delete_it_and_without_it_the_latest_is_the_highest_step(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=3)
    for step in (999_998, 999_999, 1_000_000):  # a million steps: names of 6 and of 7 digits
        manager.save(step, model=Tiny(), trainer_state={"step": step}, config=CONFIG)
    index = tmp_path / "checkpoints" / "index.json"
    index.write_text('{"checkpoints": [')  # a crash that truncated it
    with pytest.raises(CheckpointError, match=r"index\.json \(.*\); delete it and it is rebuilt from step-\* dirs"):
        manager.latest()
    index.write_text("[]")
    with pytest.raises(CheckpointError, match=r"index\.json is not a checkpoint index; delete it"):
        manager.latest()
    index.unlink()
    assert manager.latest() == tmp_path / "checkpoints" / "step-1000000"  # was step-999999, first by name
    (tmp_path / "checkpoints" / "step-notes").mkdir()  # a folder that is no step is not a checkpoint
    assert manager.latest() == tmp_path / "checkpoints" / "step-1000000"


def test_an_index_rebuilt_from_the_step_dirs_keeps_the_best_and_its_ties(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=1, metric="bleu", mode="max")
    for step, value, loss in [(1, 20.0, 3.0), (2, 30.0, 2.5), (3, 30.0, 2.0), (4, 10.0, 1.0)]:
        manager.save(step, model=Tiny(), trainer_state={"step": step}, config=CONFIG, metric_value=value,
                     tie_break=loss)
    (tmp_path / "checkpoints" / "index.json").unlink()  # as the damaged-index error says to
    assert manager.best() == tmp_path / "checkpoints" / "step-000003"  # 30.0 with the lower loss
    manager.save(5, model=Tiny(), trainer_state={"step": 5}, config=CONFIG, metric_value=5.0)
    kept = sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*"))
    assert kept == ["step-000003", "step-000005"]  # rotation kept the best (before: forgotten and deleted)
    index = json.loads((tmp_path / "checkpoints" / "index.json").read_text())
    assert index["best"] == {"name": "step-000003", "step": 3, "value": 30.0}
    # ranked by another metric, or saved by an older seqmap (no index_entry): no value, as before
    (tmp_path / "checkpoints" / "index.json").unlink()
    assert CheckpointManager(tmp_path, keep_last=1, metric="loss").best() is None
    trainer_json = tmp_path / "checkpoints" / "step-000003" / "trainer.json"
    trainer_json.write_text(json.dumps({k: v for k, v in json.loads(trainer_json.read_text()).items()
                                        if k != "index_entry"}))
    assert manager.best() == tmp_path / "checkpoints" / "step-000005"


def test_manager_without_metric_and_bad_options(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=1)
    assert manager.latest() is None and manager.best() is None
    for step in (10, 20):
        manager.save(step, model=Tiny(), trainer_state={}, config={})
    assert [p.name for p in (tmp_path / "checkpoints").glob("step-*")] == ["step-000020"]
    assert manager.best() is None
    with pytest.raises(ValueError, match="mode"):
        CheckpointManager(tmp_path, mode="highest")
    with pytest.raises(CheckpointError, match="metric"):
        CheckpointManager(tmp_path, metric="bleu", mode="max").save(30, model=Tiny(), trainer_state={}, config={})


@pytest.mark.parametrize(("mode", "values", "ties", "best_step"), [
    ("max", [80.0, 82.0, 82.0, 81.0], [0.9, 0.8, 0.7, 0.1], 3),  # equal accuracy: the lower loss wins
    ("max", [80.0, 82.0, 82.0, 81.0], [0.9, 0.7, 0.8, 0.1], 2),
    ("max", [80.0, 82.0, 82.0, 81.0], [0.9, 0.8, 0.8, 0.1], 2),  # equal in both: the earliest
    ("min", [1.0, 0.5, 0.5, 0.7], [0.0, 2.0, 1.0, 0.0], 3),
])
def test_manager_breaks_ties_by_the_lower_tie_break(tmp_path, mode, values, ties, best_step):
    manager = CheckpointManager(tmp_path, keep_last=1, metric="accuracy", mode=mode)
    for step, (value, tie) in enumerate(zip(values, ties, strict=True), start=1):
        manager.save(step, model=Tiny(), trainer_state={"step": step}, config=CONFIG, metric_value=value,
                     tie_break=tie)
    assert manager.best() == tmp_path / "checkpoints" / f"step-{best_step:06d}"
