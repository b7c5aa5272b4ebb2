"""Training: the toy run on synthetic tasks (full training on your own text comes later)."""

from seqmap.training.toy import ToyConfig, ToyRun, train_toy

__all__ = ["ToyConfig", "ToyRun", "train_toy"]
