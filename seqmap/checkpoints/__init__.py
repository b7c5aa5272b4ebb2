"""Checkpoints that explain themselves, load without unpickling, and are written atomically.

A checkpoint is a directory, e.g. ``RUN_DIR/checkpoints/step-000120/``::

    model.safetensors    the weights; tied tensors stored once, their other names in the metadata
    trainer.safetensors  the tensors of the trainer state (optimizer moments and steps, RNG states)
    trainer.json         everything else: trainer counters, the optimizer's param_groups, the
                         python/numpy RNG states, with {"__tensor__": name} where a tensor goes;
                         in a run of several processes the RNG states of each (``rank_rng``);
                         the metric value the checkpoint index ranks it by (``index_entry``)
    config.yaml          the resolved config, so the checkpoint says what it is
    tokenizer/           optional: the tokenizer files, copied in

Nothing is pickled, so ``torch.load`` is never called. Reading a checkpoint needs nothing from training,
so translating, serving and importing use this package alone; training saves through it.

One module per concept: ``checkpoint`` saves and loads one checkpoint; ``files`` reads and writes its single
files; ``trainer_file`` the trainer state (JSON with its tensors set aside); ``rng`` the RNG states it keeps;
``manager`` the ``step-XXXXXX`` directories of a run and their ``index.json``; ``averaging`` the mean of
several checkpoints' weights (``seqmap average``); ``errors`` what can go wrong.
"""

from seqmap.checkpoints.checkpoint import (
    LoadedCheckpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    write_checkpoint,
)
from seqmap.checkpoints.errors import CheckpointError, WeightsOnlyError
from seqmap.checkpoints.files import (
    CONFIG_FILE,
    FORMAT_VERSION,
    MODEL_FILE,
    TOKENIZER_DIR,
    TRAINER_FILE,
    TRAINER_JSON,
    find_tokenizer,
    read_config,
)
from seqmap.checkpoints.manager import INDEX_FILE, CheckpointManager
from seqmap.checkpoints.rng import rng_state

__all__ = [
    "CONFIG_FILE",
    "FORMAT_VERSION",
    "INDEX_FILE",
    "MODEL_FILE",
    "TOKENIZER_DIR",
    "TRAINER_FILE",
    "TRAINER_JSON",
    "CheckpointError",
    "CheckpointManager",
    "LoadedCheckpoint",
    "WeightsOnlyError",
    "find_tokenizer",
    "load_checkpoint",
    "load_weights",
    "read_config",
    "rng_state",
    "save_checkpoint",
    "write_checkpoint",
]
