"""``Task``: what one ``data.task`` does differently from the others, as one protocol.

The trainer (``seqmap.training.run_trainer``), evaluation, the command line and the server call a task's
methods and never branch on its name. A task reads and prepares its data (``load``), says which model
options that data decides (``model_fields``), streams resumable training batches (``batches``), checks
its training options (``check_trainable``), validates (``validate``) and scores its test split.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from seqmap.config import DataConfig, RunConfig
from seqmap.data.batching import Batch
from seqmap.data.corpus import DataError
from seqmap.data.samplers import token_budget_batches
from seqmap.tasks.registry import TASKS, TaskInfo
from seqmap.training.carry import CarriedState
from seqmap.training.distributed import Dist
from seqmap.training.trainer import TrainingError

Log = Callable[[str], None]
EpochBatches = Callable[[Callable[[int], list[list[int]]], Callable[[list[int], int, int], Batch]], Iterator[Batch]]


@dataclass
class TrainingContext:
    """What a task's training batch stream reads, and the run's state it moves on (given by ``RunTrainer``)."""

    cfg: RunConfig  # the resolved config (vocabulary sizes filled in)
    data: Any  # what the task's ``load`` returned
    model: nn.Module
    dist: Dist  # this process's rank among ``world_size``
    state: dict  # the trainer's state, checkpointed: ``state["data"]`` is the data position, ``state["epoch"]``
    carry: CarriedState | None  # the recurrent state carried across batches (``train.stateful``), else None
    epoch_batches: EpochBatches  # ``(batches_of_epoch, make_batch)``: shuffled, sharded, resumable batches


class Task:
    """One ``data.task``; a module defines a subclass and one instance of it, ``TASK`` (see ``seqmap.tasks``)."""

    name: str  # the data.task value, a key of ``seqmap.tasks.registry.TASKS``

    @property
    def info(self) -> TaskInfo:
        """The registry's facts of this task: model families, validation metrics, nouns, verbs, endpoint."""
        return TASKS[self.name]

    def load(self, cfg: DataConfig, run_dir: Path, log: Log = print) -> Any:
        """Read and prepare the task's data for training: fit (or reload) the tokenizer or classes in
        RUN_DIR, encode and filter the splits, log what was kept. A ``DataError`` says what is missing."""
        raise NotImplementedError

    def model_fields(self, data: Any) -> dict:
        """The model options the data decides (vocabulary sizes, classes, the input's shape), in
        ``ModelConfig`` names; a ``--init`` run checks its model against them."""
        raise NotImplementedError

    def batches(self, ctx: TrainingContext) -> Iterator[Batch]:
        """The training batches, endless unless ``train.max_epochs`` ends them; resumable from ``ctx.state``
        with the same order and random draws as an uninterrupted run."""
        raise NotImplementedError

    def check_trainable(self, cfg: RunConfig) -> None:
        """Before the data is read: a ``TrainingError`` for training options this task cannot train with (by
        default ``train.stateful``, which only a recurrent language model carries across batches)."""
        if cfg.train.stateful:
            raise TrainingError(STATEFUL)

    def validate(self, model: nn.Module, data: Any, cfg: RunConfig, device, log: Log) -> dict:
        """The model's metrics on the validation split (the registry's ``metrics``, and counts), logged in one
        line; the model is in eval mode meanwhile and back in its own mode after."""
        raise NotImplementedError

    def test(self, trainer) -> dict | None:
        """The best checkpoint of a finished run (``trainer``: a ``RunTrainer``) scored on the config's test
        split, logged and written to metrics.jsonl as a ``test`` event; None when the config names none."""
        raise NotImplementedError


STATEFUL = ("train.stateful=true carries a recurrent state across batches: it needs data.task=lm and "
            "model.family=rnn_lm")
DECODED = ("bleu", "chrf", "rougeL")  # validation metrics of a translation run's decoded validation set


def token_batches(ctx: TrainingContext, src_len, tgt_len, collate) -> Iterator[Batch]:
    """Token-budget batches of the training rows (``ctx.data.train``), length-bucketed and shuffled per epoch."""
    t, train = ctx.cfg.train, ctx.data.train
    return ctx.epoch_batches(
        lambda epoch: token_budget_batches(src_len, tgt_len, t.max_tokens, shuffle=True, seed=t.seed, epoch=epoch),
        lambda indices, *_: collate([train[i] for i in indices]))


def own_split(read, cfg: DataConfig, split: str, noun: str, keys: str, fix: str):
    """(the split's name in the config, what ``read(cfg, name)`` found) for ``--split`` ("val" is "valid"); a
    DataError that ends with ``fix`` when the config names none or its files cannot be read."""
    name = "valid" if split == "val" else split
    try:
        found = read(cfg, name)
    except DataError as e:  # moved away since training, or relative to the folder training ran in
        raise DataError(f"{e}; or {fix}") from None
    if not found:
        raise DataError(f"the run's config names no {name} {noun} ({keys.format(name, name, name)}); {fix}")
    return name, found
