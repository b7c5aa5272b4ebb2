"""The task registry: one entry per data.task, and the config, CLI and server reading it."""

from __future__ import annotations

import pytest

from seqmap.config import ConfigError, DataConfig, RunConfig, from_dict
from seqmap.tasks.registry import TASKS, task_of_family, tasks_for


def test_the_config_lists_the_registered_tasks_in_order():
    with pytest.raises(ConfigError) as err:
        DataConfig(task="summary")
    assert str(err.value).endswith(f"choose one of {list(TASKS)}")
    assert list(TASKS) == ["translation", "lm", "speech", "classification", "image", "graph"]


def test_a_family_belongs_to_at_most_one_task():
    owners = [family for info in TASKS.values() for family in info.families]
    assert len(owners) == len(set(owners))
    assert task_of_family("vit") == "image" and task_of_family("rnn_lm") == "lm"
    assert task_of_family("transformer") is None  # translation takes the families no other task claims


def test_a_task_family_mismatch_names_the_registered_pair():
    with pytest.raises(ConfigError, match="model.family=gat and data.task=graph go together"):
        from_dict(RunConfig, {"model": {"family": "transformer"}, "data": {"task": "graph", "train": "g.npz"}})
    with pytest.raises(ConfigError, match="model.family=speech and data.task=speech go together"):
        from_dict(RunConfig, {"model": {"family": "speech"}, "data": {"task": "translation"}})


def test_labelled_tasks_measure_classification_metrics_only():
    for info in TASKS.values():
        assert info.labelled == ("accuracy" in info.metrics)
        assert "loss" in info.metrics


def test_verbs_name_the_commands_that_take_a_run():
    assert tasks_for("classify") == ("classification", "image")
    assert tasks_for("translate") == ("translation",)
    assert set(tasks_for("evaluate")) == set(TASKS)


def test_served_tasks_say_their_route():
    for info in TASKS.values():
        assert (info.endpoint is None) == (info.request is None) == (info.holds is None)
        if info.endpoint is not None:
            assert info.request.startswith(f"POST {info.endpoint} ")
    assert TASKS["graph"].endpoint is None


def test_a_task_with_its_own_validation_set_refuses_valid_size():
    with pytest.raises(ConfigError, match="data.task=graph validates on the graph's val_idx nodes"):
        DataConfig(task="graph", train="g.npz", valid_size=5)
