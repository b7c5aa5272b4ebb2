"""The ``train`` section: batches, optimiser, schedule, validation, checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field

from seqmap.config_io import ConfigError, check_choice, check_positive, check_types

HIGHER_IS_BETTER = ("bleu", "chrf", "rougeL", "accuracy", "macro_f1", "string_accuracy")  # validation metrics
LOWER_IS_BETTER = ("loss", "ppl", "wer")  # to maximise, and to minimise


@dataclass
class TrainConfig:
    """The optimisation: batches, optimiser, schedule, validation, checkpoints."""

    seed: int = 1
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: str = "auto"  # auto (bf16 on CUDA if supported, else fp32) | fp32 | bf16 | fp16
    max_tokens: int = 4096  # tokens per batch (padded, larger side), per device
    batch_size: int = 32  # lm: sequences per batch
    accum_steps: int = 1  # batches whose gradients are summed before one optimiser step
    stateful: bool = False  # lm, family rnn_lm: consecutive windows, hidden state carried across batches
    max_steps: int = 10000  # optimiser steps (0 = no limit)
    max_epochs: int = 0  # epochs (0 = no limit)
    max_time: float = 0.0  # minutes of training (0 = no limit); stops at a step boundary with a checkpoint
    optimizer: str = "adamw"  # adamw | adam (L2 coupled into the gradient, on every parameter) | sgd
    lr: float = 5e-4  # peak learning rate
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])  # AdamW betas
    momentum: float = 0.0  # sgd
    weight_decay: float = 0.0
    schedule: str = "inverse_sqrt"  # inverse_sqrt | cosine | constant | step
    warmup: int = 1000  # warm-up steps (linear)
    min_lr: float = 0.0  # cosine: final learning rate
    decay_start: int = 0  # step: steps at the full rate before the first decay
    decay_every: int = 0  # step: steps between decays (e.g. the steps of one epoch)
    decay_factor: float = 0.5  # step: the rate is multiplied by this at each decay
    label_smoothing: float = 0.1
    clip_norm: float = 1.0  # gradient-norm clipping (0 = off)
    log_every: int = 50  # steps between log lines
    valid_every: int = 500  # steps between validations (also at the end)
    valid_bleu: bool = True  # translation: decode the validation set greedily (any decode.beam_size) for BLEU/chrF
    valid_examples: int = 3  # source/reference/hypothesis examples written to the log
    early_stopping: str = "loss"  # best checkpoint and patience: loss | ppl | bleu | chrf | rougeL | accuracy
    #                               | macro_f1 | wer | string_accuracy (speech)
    #                 (accuracy, macro_f1: equal values are ranked by the lower validation loss)
    patience: int = 0  # validations without improvement before stopping (0 = never stop early)
    patience_metrics: list[str] = field(default_factory=list)  # [] = improvement is a better early_stopping
    #   value; else the count restarts when any of these reaches its best so far, ties included
    #   (the GAT authors' rule: [accuracy, loss])
    save_every: int = 1  # validations between checkpoints; 0 = only when early_stopping improves, and the last
    keep_last: int = 2  # most recent checkpoints kept (the best is always kept)
    max_bad_steps: int = 20  # consecutive NaN/inf-loss steps before training stops

    def __post_init__(self) -> None:
        check_types(self, "train")
        if self.device != "auto":
            import torch

            try:
                torch.device(self.device)
            except RuntimeError:
                raise ConfigError(f"train.device = {self.device!r} is not a device; use auto, cpu, cuda or "
                                  "cuda:N") from None
        check_choice("train", "precision", self.precision, ("auto", "fp32", "bf16", "fp16"))
        check_choice("train", "optimizer", self.optimizer, ("adamw", "adam", "sgd"))
        check_choice("train", "schedule", self.schedule, ("inverse_sqrt", "cosine", "constant", "step"))
        if self.warmup < 0:
            raise ConfigError(f"train.warmup must be >= 0 steps, got {self.warmup}")
        if self.schedule == "cosine" and self.max_steps <= self.warmup:  # checked here, before the data is read
            raise ConfigError(f"train.schedule=cosine decays from train.warmup to train.max_steps, so it needs "
                              f"train.max_steps > train.warmup (got {self.max_steps} and {self.warmup}); raise "
                              "train.max_steps, lower train.warmup, or use train.schedule=constant")
        if self.schedule == "step" and self.decay_every < 1:
            raise ConfigError("train.schedule=step needs train.decay_every >= 1 (steps between decays, e.g. one "
                              "epoch's steps) and train.decay_start (steps before the first decay), got "
                              f"train.decay_every={self.decay_every}")
        if self.decay_start < 0:
            raise ConfigError(f"train.decay_start must be >= 0, got {self.decay_start}")
        if not 0.0 < self.decay_factor <= 1.0:
            raise ConfigError(f"train.decay_factor must be in (0, 1], got {self.decay_factor}")
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"train.momentum must be in [0, 1), got {self.momentum}")
        check_choice("train", "early_stopping", self.early_stopping, (*LOWER_IS_BETTER, *HIGHER_IS_BETTER))
        for name in self.patience_metrics:
            check_choice("train", "patience_metrics", name, (*LOWER_IS_BETTER, *HIGHER_IS_BETTER))
        if self.save_every < 0:
            raise ConfigError(f"train.save_every must be >= 0 (0: only the best and the last), got {self.save_every}")
        for name in ("max_tokens", "batch_size", "accum_steps", "log_every", "valid_every", "max_bad_steps"):
            check_positive("train", name, getattr(self, name))
        if self.max_steps <= 0 and self.max_epochs <= 0 and self.max_time <= 0:
            raise ConfigError(f"training never ends: set train.max_steps, train.max_epochs or train.max_time (got "
                              f"{self.max_steps}, {self.max_epochs} and {self.max_time})")
        if self.lr <= 0:
            raise ConfigError(f"train.lr must be > 0, got {self.lr}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"train.label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if len(self.betas) != 2:
            raise ConfigError(f"train.betas must be two numbers, got {self.betas}")
        if self.keep_last < 1:
            raise ConfigError(f"train.keep_last must be >= 1 (the latest checkpoint is needed to resume), got "
                              f"{self.keep_last}")
