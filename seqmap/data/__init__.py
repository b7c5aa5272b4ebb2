"""Data: synthetic toy tasks (copy, reverse, sort) as padded batches."""

from seqmap.data.synthetic import BOS, EOS, PAD, TASKS, Batch, SyntheticTask, render, strip

__all__ = ["BOS", "EOS", "PAD", "TASKS", "Batch", "SyntheticTask", "render", "strip"]
