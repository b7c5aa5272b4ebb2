"""``seqmap translate`` and ``generate`` turn away a run of another task with the registry's one line."""

from __future__ import annotations

from argparse import Namespace
from types import SimpleNamespace

import pytest

from seqmap.cli.errors import UserError
from seqmap.cli.trained_run import refuse_unless
from seqmap.tasks.registry import TASKS

REFUSED = {  # (verb, data.task): the message after "RUN_DIR is "
    ("translate", "lm"): "a language model; use `seqmap generate` instead",
    ("translate", "speech"): "a speech run; use `seqmap transcribe / evaluate` instead",
    ("translate", "classification"): "a classifier; use `seqmap classify` instead",
    ("translate", "image"): "a classifier; use `seqmap classify` instead",
    ("translate", "graph"): "a graph (GAT) run; use `seqmap evaluate` or `seqmap plot attention --node`",
    ("generate", "translation"): "a translation model; use `seqmap translate` instead",
    ("generate", "speech"): "a speech run; use `seqmap transcribe / evaluate` instead",
    ("generate", "classification"): "a classifier; use `seqmap classify` instead",
    ("generate", "image"): "a classifier; use `seqmap classify` instead",
    ("generate", "graph"): "a graph (GAT) run; use `seqmap evaluate` or `seqmap plot attention --node`",
}


@pytest.mark.parametrize("verb", ["translate", "generate"])
@pytest.mark.parametrize("task", list(TASKS))
def test_a_run_of_another_task_is_refused_with_the_command_to_use(verb, task):
    run = SimpleNamespace(cfg=SimpleNamespace(data=SimpleNamespace(task=task)))
    message = REFUSED.get((verb, task))
    if message is None:  # the command's own task
        refuse_unless(Namespace(run_dir="runs/x"), run, verb)
        return
    with pytest.raises(UserError) as info:
        refuse_unless(Namespace(run_dir="runs/x"), run, verb)
    assert str(info.value) == f"runs/x is {message}"
