"""Run set-up: ``RunTrainer`` turns one config on real data into a run directory that explains itself.

    RUN_DIR/config.yaml         the resolved config (vocabulary sizes filled in)
    RUN_DIR/provenance.json     where and with what it was trained (``seqmap.provenance``; also train.log's start)
    RUN_DIR/tokenizer/          the tokenizer(s), trained on the training text
    RUN_DIR/tokenizer_data.yaml the data options they were fitted with
    RUN_DIR/prepared/           the training split as memory-mapped token ids (or data.prepared_dir, shared)
    RUN_DIR/cache/              the validation split's token ids
    RUN_DIR/train.log           what was printed
    RUN_DIR/metrics.jsonl       train / valid / test events, one JSON object per line
    RUN_DIR/checkpoints/        step-N/ (weights, optimizer, RNG, data position, config, tokenizer)

It loads the data, builds the model, and feeds the one training loop (``seqmap.training.trainer.Trainer``)
resumable batches of each task; at each validation it ranks and saves checkpoints. Checkpoints are
written after validation, at a step boundary, with everything needed to continue bit-for-bit
(``resume=True``). Scoring the best checkpoint on the test split is the caller's (``train(test=...)``;
``seqmap train`` passes ``seqmap.evaluation.evaluate_test_split``). The run directory's checks and their
one-line errors (another run's start in it, a file that cannot be written, a damaged checkpoint to resume
from) are in ``run_dir.py``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from seqmap import provenance, tasks
from seqmap.checkpoints import (
    TOKENIZER_DIR,
    CheckpointError,
    CheckpointManager,
    WeightsOnlyError,
    load_checkpoint,
    rng_state,
)
from seqmap.checkpoints.files import damaged_advice
from seqmap.config import HIGHER_IS_BETTER, RunConfig, save_config, to_dict
from seqmap.data.samplers import EpochIterator, shard
from seqmap.models.builder import build_model
from seqmap.tasks.base import TrainingContext
from seqmap.training import distributed
from seqmap.training.carry import CarriedState
from seqmap.training.run_dir import copy_tokenizer, refuse_another_run, resume_advice, resume_command, write_error
from seqmap.training.runlog import RunLog
from seqmap.training.trainer import Trainer, TrainingError

TIE_BREAK_BY_LOSS = ("accuracy", "macro_f1")  # early_stopping metrics whose equal values go to the lower loss


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise TrainingError(f"train.device={name} but CUDA is not available; use train.device=cpu or auto")
    return device


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def check_trainable(cfg: RunConfig) -> None:
    """Before the data is read: the options that train together, the task's own (``Task.check_trainable``:
    a best-checkpoint or patience metric its validation never measures would rank no checkpoint) included."""
    t = cfg.train
    if t.schedule == "inverse_sqrt" and t.warmup < 1:  # not in TrainConfig: runs imported before said warmup 0
        raise TrainingError("train.schedule=inverse_sqrt (the default) decays as lr * sqrt(warmup / step), so it "
                            f"needs train.warmup >= 1 (got {t.warmup}); give train.warmup, or use "
                            "train.schedule=constant")
    tasks.get(cfg.data.task).check_trainable(cfg)


class RunTrainer:
    """One config on real text: data, model and ``Trainer`` set up, a run directory written; ``run()`` trains."""

    def __init__(self, cfg: RunConfig, run_dir: Path, *, resume: bool = False, stream=None,
                 init: Path | None = None):
        self.run_dir = Path(run_dir)
        check_trainable(cfg)
        self.device = resolve_device(cfg.train.device)
        self.dist = distributed.setup(self.device)
        if self.dist.enabled and self.device.type == "cuda":
            self.device = torch.device("cuda", self.dist.local_rank)
            torch.cuda.set_device(self.device)
        latest = CheckpointManager(self.run_dir, keep_last=cfg.train.keep_last).latest()
        if latest is not None and not resume:
            raise TrainingError(f"{self.run_dir} already holds checkpoints (latest {latest.name}); continue it with "
                                f"`{resume_command(self.run_dir, self.dist.world_size)}`, or choose another --run-dir")
        if resume and latest is None:
            raise TrainingError(f"--resume: no checkpoint in {self.run_dir / 'checkpoints'} to resume from")
        if not resume:
            refuse_another_run(cfg, self.run_dir)
        self.log = RunLog(self.run_dir, enabled=self.dist.is_main, stream=stream)
        if self.dist.is_main:
            provenance.record_run(self.run_dir, self.device, self.log.info, resume=resume)
        seed_everything(cfg.train.seed)
        init = None if resume else init  # a resumed run continues from its own checkpoint
        if init is not None and self.dist.is_main:
            copy_tokenizer(Path(init), self.run_dir / TOKENIZER_DIR)

        # data: rank 0 trains the tokenizer (or keeps the --init run's) and fills the cache, the others then read them
        self.task = tasks.get(cfg.data.task)
        if not self.dist.is_main:
            distributed.barrier(self.dist)
        self.data = self.task.load(cfg.data, self.run_dir, self.log.info)
        if self.dist.is_main:
            distributed.barrier(self.dist)
        fields = self.task.model_fields(self.data)
        if init is not None:  # the model is the initial run's: the data must fit it, not resize it
            differ = {k: v for k, v in fields.items() if k not in ("pixel_mean", "pixel_std")
                      and getattr(cfg.model, k) != v}
            if differ:
                name, value = next(iter(differ.items()))
                raise TrainingError(f"--init {init}: the data gives model.{name}={value}, but the initial model has "
                                    f"{getattr(cfg.model, name)}; train on data of the same kind")
            fields = {}
        model_cfg = dataclasses.replace(cfg.model, **fields)
        self.cfg = dataclasses.replace(cfg, model=model_cfg)

        seed_everything(cfg.train.seed)  # identical initial weights on every rank
        self.model = build_model(self.cfg.model).to(self.device)
        if init is not None:
            load_checkpoint(Path(init), model=self.model)
            self.log.info(f"initialised from {init} (its weights; optimiser, schedule and data start afresh)")
        self.carry = CarriedState(self.model) if cfg.train.stateful else None
        t = self.cfg.train
        self.trainer = Trainer(self.model, t, self.device, log=self.log, dist=self.dist, carry=self.carry,
                               progress=True)
        self.checkpoints = CheckpointManager(
            self.run_dir, keep_last=t.keep_last, metric=t.early_stopping,
            mode="max" if t.early_stopping in HIGHER_IS_BETTER else "min")
        self.state = self.trainer.state  # one dict: the loop's counters and the data position, checkpointed
        self.state["data"] = {"epoch": 0, "batch": 0}
        self.state["world_size"] = self.dist.world_size  # the data position and RNG states are per process
        if resume:
            try:
                loaded = load_checkpoint(latest, model=self.model, optimizer=self.trainer.optimizer, restore_rng=True,
                                         rank=self.dist.rank)
            except WeightsOnlyError:
                raise TrainingError(
                    f"--resume {self.run_dir}: {latest} holds weights but no optimiser state to continue from (a "
                    f"checkpoint of `seqmap import` or `seqmap average`); start a new run from its weights with "
                    f"`seqmap train CONFIG --init {self.run_dir} --run-dir NEW_DIR`") from None
            except CheckpointError as err:  # a damaged file: say which checkpoint to continue from
                message, damaged = str(err), damaged_advice(latest)
                raise CheckpointError(message.removesuffix(damaged) + resume_advice(latest)
                                      if message.endswith(damaged) else message) from None
            saved_world = loaded.trainer_state.get("world_size", self.dist.world_size)  # not stored before
            if saved_world != self.dist.world_size:
                raise TrainingError(
                    f"--resume {self.run_dir}: {latest.name} was trained by {_processes(saved_world)}, this is "
                    f"{_processes(self.dist.world_size)}; each process's data position and random state are in the "
                    f"checkpoint, so continue it as it ran: `{resume_command(self.run_dir, saved_world)}`")
            self.state.update(loaded.trainer_state)
            self.log.info(f"resumed from {latest} at step {self.state['step']}")
        if self.dist.is_main:  # after a resume's checkpoint has loaded: a refused one leaves config.yaml as it was
            save_config(self.cfg, self.run_dir / "config.yaml")
        n_params = sum(p.numel() for p in self.model.parameters())
        precision = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(self.trainer.amp_dtype, "fp32")
        if t.precision in ("bf16", "fp16") and precision == "fp32":  # was silently ignored
            precision += f" (train.precision={t.precision} is for CUDA; on {self.device.type} it trains in fp32)"
        d = self.dist  # in a process group (torchrun, one process or several): how many, and its backend
        group = f", {_processes(d.world_size)}, backend {d.backend}" if d.enabled else ""
        self.log.info(f"model: {self.cfg.model.family}, {n_params / 1e6:.2f}M parameters, device {self.device}, "
                      f"{precision}{group}")

    # -- batches ------------------------------------------------------------------------
    def _epoch_batches(self, batches_of_epoch: Callable[[int], list[list[int]]], make_batch):
        """Shuffled batches of training example indices per epoch, resumable: ``make_batch(indices, epoch, index)``."""
        t = self.cfg.train

        def batches_fn(epoch: int):
            return shard(batches_of_epoch(epoch), self.dist.rank, self.dist.world_size)

        iterator = EpochIterator(batches_fn, **self.state["data"],
                                 max_epochs=t.max_epochs if t.max_epochs > 0 else None)
        for epoch, index, indices in iterator:
            self.state["data"] = iterator.state_dict()
            self.state["epoch"] = epoch
            yield make_batch(indices, epoch, index)

    def run(self) -> dict:
        batches = self.task.batches(TrainingContext(self.cfg, self.data, self.model, self.dist, self.state,
                                                    self.carry, self._epoch_batches))
        result = self.trainer.run(batches, validate=self._validate_and_save)
        if result["interrupted"]:  # Ctrl-C: keep the last step (unranked) unless its validation saved it
            latest = self.checkpoints.latest()
            if latest is None or latest.name != f"step-{self.state['step']:06d}":
                latest = self._save(None)
            result["checkpoint"] = latest
        elif distributed.broadcast_flag(self._unsaved is not None, self.dist, self.device):
            self._save(*(self._unsaved or (None, None)))  # train.save_every skipped the last validation
        return result

    _unsaved: tuple[float | None, float | None] | None = None  # (early_stopping value, loss) of an unsaved validation

    def _improves(self, metrics: dict) -> bool:
        """Whether ``metrics`` beat the best validation so far by ``train.early_stopping`` (accuracy and
        macro_f1: equal values go to the lower loss, as the checkpoint index ranks them)."""
        t, s = self.cfg.train, self.state
        value = metrics.get(t.early_stopping)
        if value is None:
            return False
        if s["best"] is None:
            return True
        if t.early_stopping not in HIGHER_IS_BETTER:
            return value < s["best"]
        tie = metrics.get("loss") if t.early_stopping in TIE_BREAK_BY_LOSS else None
        best_tie = s.get("best_tie")
        return value > s["best"] or (value == s["best"] and tie is not None and best_tie is not None
                                     and tie < best_tie)

    def _patience_reset(self, metrics: dict, improved: bool) -> bool:
        """Whether this validation restarts the ``train.patience`` count (see ``train.patience_metrics``)."""
        names = self.cfg.train.patience_metrics
        if not names:
            return improved
        records, reset = self.state.setdefault("records", {}), False
        for name in names:
            value, old = metrics.get(name), records.get(name)  # a metric this validation did not measure: skipped
            if value is None:
                continue
            if old is None or (value >= old if name in HIGHER_IS_BETTER else value <= old):
                records[name], reset = value, True
        return reset

    def _validate_and_save(self) -> Path | None:
        """Validate, update the best value and patience, save a checkpoint; return it (main process only).

        With ``train.save_every`` = k > 1 (or 0) a checkpoint is written at every k-th validation (or none)
        and whenever the validation improves; ``run()`` saves the last step if its validation was not saved.
        """
        s, t, save = self.state, self.cfg.train, None
        if self.dist.is_main:
            metrics = self.task.validate(self.model, self.data, self.cfg, self.device, self.log.info)
            self.log.metrics("valid", s["step"], **metrics, train_minutes=s["train_seconds"] / 60)
            value = metrics.get(t.early_stopping)
            better = self._improves(metrics)
            if better:
                s["best"] = value
                if t.early_stopping in TIE_BREAK_BY_LOSS:
                    s["best_tie"] = metrics.get("loss")
            s["bad_validations"] = 0 if self._patience_reset(metrics, better) else s["bad_validations"] + 1
            s["validations"] = s.get("validations", 0) + 1
            if better or (t.save_every > 0 and s["validations"] % t.save_every == 0):
                save = (value, metrics.get("loss"))
            else:
                self._unsaved = (value, metrics.get("loss"))
        s["bad_validations"] = int(distributed.all_reduce_sum(
            [float(s["bad_validations"]) if self.dist.is_main else 0.0], self.dist, self.device)[0])
        saved = (self._save(*(save or (None, None))) if distributed.broadcast_flag(save is not None, self.dist,
                                                                                    self.device) else None)
        distributed.barrier(self.dist)
        return saved

    def _save(self, value: float | None, loss: float | None = None) -> Path | None:
        """A checkpoint of this step, ranked in the index by ``value`` (ties: by the lower ``loss``, see _improves).

        Every process calls it, and each one's RNG states go into the checkpoint, so a resumed run of several
        processes draws the dropout masks an uninterrupted one would; the main process writes it and returns its
        path (the others None).
        """
        self._unsaved = None
        rngs = distributed.gather_to_main(rng_state(), self.dist)
        if not self.dist.is_main:
            return None
        tie = loss if self.cfg.train.early_stopping in TIE_BREAK_BY_LOSS else None
        tokenizer = self.run_dir / "tokenizer"
        return self.checkpoints.save(self.state["step"], metric_value=value, tie_break=tie, model=self.model,
                                     optimizer=self.trainer.optimizer, trainer_state=dict(self.state),
                                     config=to_dict(self.cfg), tokenizer_dir=tokenizer if tokenizer.is_dir() else None,
                                     rank_rng=rngs[1:])

    def load_best(self) -> Path:
        """Load the best checkpoint's weights into the model (the latest when none is ranked); return its path."""
        best = self.checkpoints.best() or self.checkpoints.latest()
        load_checkpoint(best, model=self.model)
        return best

    def close(self) -> None:
        self.log.close()
        distributed.teardown(self.dist)


def _processes(n: int) -> str:
    return "one process" if n == 1 else f"{n} processes"


def train(cfg: RunConfig, run_dir: str | Path, *, resume: bool = False, stream=None,
          test: Callable[[RunTrainer], dict | None] | None = None, init: str | Path | None = None) -> dict:
    """Train ``cfg`` into ``run_dir`` (or continue the run there with ``resume=True``).

    ``init``: a checkpoint directory whose weights (and tokenizer) the run starts from (``seqmap train --init``);
    ``cfg.model`` must be that checkpoint's model (``seqmap.config.load_config_from_init``).

    ``test(run_trainer)``, when given, scores the best checkpoint on the test split once training
    stops (main process only, after every process has left the process group;
    ``seqmap.evaluation.evaluate_test_split``); its result is ``result["test"]``. ``result["main"]``
    says whether this is the main process (the one that writes the run directory and tests).

    A file of the run that cannot be written (no permission, a read-only or full disk) is a
    ``TrainingError`` naming it, saying what to do and from which checkpoint the run can continue.
    """
    try:
        return _train(cfg, Path(run_dir), resume=resume, stream=stream, test=test, init=init)
    except OSError as err:  # a file of the run cannot be written: read-only, full, not a directory
        message = write_error(err, Path(run_dir))
        if message is None:
            raise
        raise TrainingError(message) from err


def _train(cfg: RunConfig, run_dir: Path, *, resume: bool, stream, test: Callable[[RunTrainer], dict | None] | None,
           init: str | Path | None) -> dict:
    trainer = RunTrainer(cfg, run_dir, resume=resume, stream=stream, init=init)
    try:
        result = trainer.run()
        # every process leaves the group together, then the main one tests alone (a test needs no group):
        # a process that left while the main one was still testing could abort in gloo's teardown
        distributed.barrier(trainer.dist)
        distributed.teardown(trainer.dist)
        result["test"] = (test(trainer) if test is not None and trainer.dist.is_main and not result["interrupted"]
                          else None)
        result["main"] = trainer.dist.is_main  # the other processes of a distributed run have nothing to report
        return result
    finally:
        trainer.close()
