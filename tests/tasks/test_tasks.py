"""Every registered task has its module, which implements the protocol of ``seqmap.tasks.base.Task``."""

from __future__ import annotations

import pytest

from seqmap import tasks
from seqmap.config import DataConfig
from seqmap.data.corpus import DataError
from seqmap.tasks.base import Task, own_split
from seqmap.tasks.registry import TASKS


@pytest.mark.parametrize("name", list(TASKS))
def test_every_registered_task_has_its_module(name):
    task = tasks.get(name)
    assert isinstance(task, Task) and task.name == name and task.info is TASKS[name]
    for method in ("load", "model_fields", "batches"):  # each task overrides the protocol, none inherits a stub
        assert getattr(type(task), method) is not getattr(Task, method), method


def test_an_unknown_task_is_a_key_error():
    with pytest.raises(KeyError):
        tasks.get("summary")


def test_own_split_names_the_missing_split_and_the_fix():
    with pytest.raises(DataError, match=r"names no test text \(data.test\); give --data FILE"):
        own_split(lambda cfg, name: "", DataConfig(), "test", "text", "data.{}", "give --data FILE")
    assert own_split(lambda cfg, name: name, DataConfig(), "val", "text", "data.{}", "fix") == ("valid", "valid")


def test_a_read_error_keeps_its_message_and_adds_the_fix():
    def gone(cfg, name):
        raise DataError("data.test: no such file")

    with pytest.raises(DataError, match="^data.test: no such file; or give --data FILE$"):
        own_split(gone, DataConfig(), "test", "text", "data.{}", "give --data FILE")
