"""Typed configuration: one dataclass per concern, YAML as their serialised form.

Every field has a default documented beside it; ``__post_init__`` checks values
and says which option to change. ``from_dict`` rejects unknown keys and names the
nearest valid one, so a misspelt option never passes silently.

One module per section (``model``, ``data``, ``train``, ``decode``) and ``run`` for the whole experiment
(``RunConfig``, the checks across sections, ``load_config``); the generic machinery (YAML files,
``--section.key`` overrides, ``from_dict`` / ``to_dict``, type checks and ``ConfigError``) is in
``seqmap/config_io.py``. Every public name of these is importable from here.
"""

from __future__ import annotations

from seqmap.config.data import DATA_PATHS, DataConfig
from seqmap.config.decode import MAX_LENGTH_PENALTY, MAX_TEMPERATURE, MIN_TEMPERATURE, MIN_TOP_P, DecodeConfig
from seqmap.config.model import ModelConfig
from seqmap.config.run import INIT_MODEL_OPTIONS, RunConfig, load_config, load_config_from_init
from seqmap.config.train import HIGHER_IS_BETTER, LOWER_IS_BETTER, TrainConfig
from seqmap.config_io import (
    ConfigError,
    apply_overrides,
    differing_fields,
    from_dict,
    read_yaml,
    save_config,
    to_dict,
)

__all__ = [
    "DATA_PATHS",
    "HIGHER_IS_BETTER",
    "INIT_MODEL_OPTIONS",
    "LOWER_IS_BETTER",
    "MAX_LENGTH_PENALTY",
    "MAX_TEMPERATURE",
    "MIN_TEMPERATURE",
    "MIN_TOP_P",
    "ConfigError",
    "DataConfig",
    "DecodeConfig",
    "ModelConfig",
    "RunConfig",
    "TrainConfig",
    "apply_overrides",
    "differing_fields",
    "from_dict",
    "load_config",
    "load_config_from_init",
    "read_yaml",
    "save_config",
    "to_dict",
]

