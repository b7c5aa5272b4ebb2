"""What goes wrong with a checkpoint, as the exceptions callers catch: every message is one line naming the file."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint is missing, damaged, or does not fit the model/optimizer it is loaded into."""


class WeightsOnlyError(CheckpointError):
    """The checkpoint holds weights but no optimizer or RNG state to continue training from (one written by
    ``seqmap import hf`` or ``seqmap average``): it can start a new run (``--init``), not be resumed."""
