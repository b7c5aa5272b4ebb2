"""What the config, the command line and the server know of each ``data.task``, without importing its code.

``TASKS`` has one ``TaskInfo`` per task, in the order the config lists them; the behaviour (data,
batches, validation, test scoring) is the task's module, ``seqmap.tasks.get(name)``. This module imports
nothing heavy: ``seqmap.config`` checks options against it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seqmap.config_io import ConfigError


@dataclass(frozen=True)
class TaskInfo:
    """The facts of one task: its model families, its validation metrics, the words and commands that name it."""

    name: str  # the data.task value
    module: str  # seqmap.tasks.<module>: the ``Task`` with its behaviour
    families: tuple[str, ...]  # the model families that learn it; () = any family no other task claims
    metrics: tuple[str, ...]  # what its validation measures (train.early_stopping / patience_metrics may name)
    one: str  # a run of it, as messages name it: "a translation run"
    many: str  # runs of it: "translation runs"
    use: str  # the commands to run on it, as a refusal names them: "seqmap translate / evaluate"
    refusal: str  # how translate and generate turn a run of it away: "RUN_DIR is " + this
    verbs: tuple[str, ...]  # the seqmap commands on a trained run that take it
    endpoint: str | None = None  # the server's route for it (None: not served)
    request: str | None = None  # what that route takes: "POST /translate with a text"
    holds: str | None = None  # what the server says it holds: "a translation model"
    labelled: bool = False  # one label per example (accuracy, macro_f1) rather than a token sequence
    windows: bool = False  # reads data.context windows of one token stream (a language model)
    own_validation: str | None = None  # where its validation set always comes from (data.valid_size is refused)
    check: Callable[[Any], None] | None = None  # its own checks of a RunConfig (ConfigError), beside config's
    input: str = "text"  # what its model reads: "text", "audio", "image" or "graph"
    tokenized: tuple[str, ...] = ("source", "target")  # the sides the run's tokenizer encodes
    evaluate_reads: tuple[str, ...] = ()  # the `seqmap evaluate` options (dest names) its evaluation reads
    half_precision: bool = False  # decodes in fp16 / bf16 on a GPU (``--precision``); the others in fp32


def _check_graph(cfg) -> None:
    d = cfg.data
    if d.train is None or d.valid is not None or d.test is not None:
        raise ConfigError("data.task=graph reads one .npz holding the graph and its train/val/test node "
                          f"ids: set data.train (and not data.valid / data.test), got data.train={d.train!r}, "
                          f"data.valid={d.valid!r}, data.test={d.test!r}")
    if cfg.train.accum_steps != 1:
        raise ConfigError(f"data.task=graph takes one full-graph step per epoch; train.accum_steps must "
                          f"be 1, got {cfg.train.accum_steps}")


_LABELLED = ("loss", "accuracy", "macro_f1")
_TRANSLATION_EVALUATE = ("src", "ref", "nbest", "tokenize", "tok_ref", "compare", "lead", "baseline_run", "out",
                         "split", "ct2", "decode")  # "decode": the --decode.* overrides

TASKS: dict[str, TaskInfo] = {info.name: info for info in (
    TaskInfo("translation", "translation", (), ("loss", "ppl", "bleu", "chrf", "rougeL"),
             "a translation run", "translation runs", "seqmap translate / evaluate",
             "a translation model; use `seqmap translate` instead", ("translate", "evaluate"),
             "/translate", "POST /translate with a text", "a translation model",
             evaluate_reads=_TRANSLATION_EVALUATE, half_precision=True),
    TaskInfo("lm", "lm", ("lm", "rnn_lm"), ("loss", "ppl"), "a language model", "language models",
             "seqmap generate", "a language model; use `seqmap generate` instead", ("generate", "evaluate"),
             "/generate", "POST /generate with a prompt", "a language model", windows=True,
             tokenized=("target",), evaluate_reads=("data", "split"), half_precision=True),
    TaskInfo("speech", "speech", ("speech",), ("loss", "ppl", "wer", "string_accuracy"), "a speech run",
             "speech runs", "seqmap transcribe / evaluate", "a speech run; use `seqmap transcribe / evaluate` instead",
             ("transcribe", "evaluate"), "/transcribe", "POST /transcribe with base64 audio files",
             "a speech recognizer", input="audio", tokenized=("target",), evaluate_reads=("data", "out", "decode")),
    TaskInfo("classification", "classification", ("classifier",), _LABELLED, "a classifier", "classifiers",
             "seqmap classify", "a classifier; use `seqmap classify` instead", ("classify", "evaluate"),
             "/classify", "POST /classify with a text", "a text classifier", labelled=True,
             evaluate_reads=("data", "confusion", "no_baseline")),
    TaskInfo("image", "image", ("vit",), _LABELLED, "an image classifier", "image classifiers", "seqmap classify",
             "a classifier; use `seqmap classify` instead", ("classify", "evaluate"),
             "/classify", "POST /classify with a base64 image", "an image classifier", labelled=True,
             input="image", tokenized=(), evaluate_reads=("data", "confusion", "no_baseline")),
    TaskInfo("graph", "graph", ("gat",), _LABELLED, "a graph (GAT) run", "graph runs",
             "seqmap evaluate / seqmap plot attention --node",
             "a graph (GAT) run; use `seqmap evaluate` or `seqmap plot attention --node`", ("evaluate",),
             labelled=True, own_validation="the graph's val_idx nodes", check=_check_graph, input="graph",
             tokenized=(), evaluate_reads=("data", "split", "confusion")),
)}


def task_of_family(family: str) -> str | None:
    """The task that ``model.family`` is made for, or None when it is not any one task's own."""
    return next((info.name for info in TASKS.values() if family in info.families), None)


def tasks_for(verb: str) -> tuple[str, ...]:
    """The tasks whose runs ``seqmap VERB`` takes, in ``TASKS`` order."""
    return tuple(name for name, info in TASKS.items() if verb in info.verbs)
