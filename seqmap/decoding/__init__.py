"""Decoding: functions over the model protocol (``encode`` / ``decode_step``), never over a model class."""

from seqmap.decoding.greedy import GreedyResult, greedy

__all__ = ["GreedyResult", "greedy"]
