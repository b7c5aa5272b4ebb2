"""One module per ``data.task``: everything a task does differently from the others, behind one protocol.

    registry.py        what the config, CLI and server know of each task (``TASKS``): its model families,
                       validation metrics, the words and commands that name it; imports nothing heavy
    base.py            ``Task``: the protocol (read the data, size the model, stream batches, validate, test)
    translation.py     source -> target text (summarization is a translation config)
    lm.py              a language model of one token stream
    classification.py  one label per text
    image.py           one label per image
    graph.py           one label per node of a graph
    speech.py          audio -> transcript

The trainer, the command line, the server and evaluation ask ``get(cfg.data.task)`` for the task
and call it; they do not branch on its name. To add a task: write ``seqmap/tasks/NAME.py`` with a
``TASK = NameTask()`` (a ``Task`` subclass overriding what ``base.py`` documents), and add its
``TaskInfo`` to ``TASKS`` in ``registry.py``; ``data.task: NAME`` then trains, validates and tests it.
"""

from __future__ import annotations

import importlib


def get(name: str):
    """The ``Task`` (``seqmap.tasks.base``) of ``data.task`` = ``name``; its module is imported on first use.

    Not annotated: this package's ``__init__`` is imported with ``registry`` (by the config), so it imports
    nothing from the task modules, not even for type checking."""
    from seqmap.tasks.registry import TASKS

    return importlib.import_module(f"seqmap.tasks.{TASKS[name].module}").TASK
