"""The random number generators' states as a checkpoint stores them, so a resumed run draws on as it would have."""

from __future__ import annotations

import random
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


def rng_state() -> dict[str, Any]:
    """This process's RNG states (torch, CUDA where initialised, Python, NumPy), as a checkpoint stores them."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state["numpy"] = (name, keys.tolist(), int(pos), int(has_gauss), float(cached))
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # never initialise CUDA just to save
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what ``rng_state`` returned; CUDA states saved for another GPU count are left as they are."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state:
        if torch.cuda.is_available() and torch.cuda.device_count() == len(state["cuda"]):
            torch.cuda.set_rng_state_all(state["cuda"])
        else:
            warnings.warn("checkpoint holds CUDA RNG states for another GPU count; not restored", stacklevel=3)
