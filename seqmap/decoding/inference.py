"""Decoding runs under ``torch.inference_mode`` and hands back ordinary tensors.

``torch.inference_mode`` is ``torch.no_grad`` without the bookkeeping that only
autograd needs (version counters, view tracking): every operator of a decode step
is dispatched a little faster, and a step runs a few hundred of them, so the loops of
greedy, sampling and beam search run faster under it than under ``no_grad``
(docs/benchmarks.md "Decoding").

Tensors made in inference mode cannot be saved for a backward pass or updated in
place outside it, so nothing made inside may leak out as such:

- ``inference`` clones the inference tensors of a result (tensors, lists, tuples,
  named tuples, dataclasses) into ordinary ones on the way out;
- tables that modules grow while decoding (longer position tables) are made with
  inference mode switched off (``seqmap.nn.positional``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

F = TypeVar("F", bound=Callable[..., Any])


def ordinary(x: Any) -> Any:
    """``x`` with each inference tensor in it (also inside lists, tuples, named tuples, dataclasses) cloned to
    an ordinary tensor; anything else as it is. Inside inference mode a clone is an inference tensor again,
    which is what a caller in inference mode wants."""
    if isinstance(x, Tensor):
        return x.clone() if x.is_inference() else x
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # a NamedTuple
        return type(x)(*(ordinary(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(ordinary(v) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: ordinary(getattr(x, f.name)) for f in dataclasses.fields(x)
                                         if f.init})
    return x


def inference(fn: F) -> F:
    """Run ``fn`` under ``torch.inference_mode`` and return its result with ordinary tensors (``ordinary``)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.inference_mode():
            result = fn(*args, **kwargs)
        return ordinary(result)

    return wrapper  # type: ignore[return-value]
