"""Learning-rate schedules as pure functions of the step.

Every schedule maps the optimiser step, **counted from 1** (the first update is
step 1), to the learning rate itself (not a multiplier). Warmup is linear and
reaches the peak exactly at ``step == warmup``; ``warmup = 0`` means no warmup.

We do not use ``torch.optim.lr_scheduler``: the trainer sets the rate before
every update with :func:`set_lr`, and resuming needs nothing but the step count
saved in the checkpoint::

    schedule = make_schedule("inverse_sqrt", warmup=4000, lr=7e-4)
    for step in range(resumed_step + 1, total_steps + 1):
        set_lr(optimizer, schedule(step))
        ...  # forward, backward, optimizer.step()

:func:`set_lr` gives every parameter group the same rate.
"""

from __future__ import annotations

import difflib
import inspect
import math
from collections.abc import Callable

import torch


def _check(step: int, warmup: int) -> None:
    if step < 1:
        raise ValueError(f"step counts from 1 (the first update), got step={step}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0 steps, got {warmup}")


def _warmup(step: int, warmup: int, lr: float) -> float:
    """Linear warmup: ``lr * step / warmup`` (only called for ``step <= warmup``)."""
    return lr * step / warmup


def constant(step: int, warmup: int, lr: float) -> float:
    """Linear warmup to ``lr`` at ``step == warmup``, then ``lr``."""
    _check(step, warmup)
    return _warmup(step, warmup, lr) if step < warmup else lr


def inverse_sqrt(step: int, warmup: int, lr: float) -> float:
    """Linear warmup to ``lr`` at ``step == warmup``, then ``lr * sqrt(warmup / step)`` (fairseq's inverse_sqrt).

    The same curve as :func:`noam`, parameterised by its peak; ``warmup`` must be >= 1.
    """
    _check(step, warmup)
    if warmup == 0:
        raise ValueError("inverse_sqrt needs warmup >= 1: the decay lr * sqrt(warmup / step) is 0 without it")
    return _warmup(step, warmup, lr) if step < warmup else lr * math.sqrt(warmup / step)


def noam(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """Vaswani et al. (2017), eq. 3: ``factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)``.

    Peaks at ``step == warmup`` with ``factor / sqrt(d_model * warmup)``.
    """
    _check(step, warmup)
    if warmup == 0 or d_model <= 0:
        raise ValueError(f"noam needs warmup >= 1 and d_model >= 1, got warmup={warmup}, d_model={d_model}")
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def cosine(step: int, warmup: int, total: int, lr: float, min_lr: float = 0.0) -> float:
    """Linear warmup to ``lr`` at ``step == warmup``, half a cosine to ``min_lr`` at ``step == total``, then flat."""
    _check(step, warmup)
    if total <= warmup:
        raise ValueError(f"cosine needs total > warmup, got total={total}, warmup={warmup}")
    if step < warmup:
        return _warmup(step, warmup, lr)
    progress = min(1.0, (step - warmup) / (total - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def step_decay(step: int, warmup: int, lr: float, decay_start: int, decay_every: int,
               decay_factor: float = 0.5) -> float:
    """Linear warmup to ``lr``, flat until ``step == decay_start``, then times ``decay_factor`` every ``decay_every``.

    Zaremba et al.'s (2014) LSTM schedule: with ``E`` steps per epoch, ``decay_start = 4 * E`` and
    ``decay_every = E`` keep ``lr`` for four epochs and halve it at the start of every later one.
    """
    _check(step, warmup)
    if decay_start < 0 or decay_every < 1 or not 0.0 < decay_factor <= 1.0:
        raise ValueError(f"step_decay needs decay_start >= 0, decay_every >= 1 and 0 < decay_factor <= 1, got "
                         f"decay_start={decay_start}, decay_every={decay_every}, decay_factor={decay_factor}")
    if step < warmup:
        return _warmup(step, warmup, lr)
    decays = max(0, -(-(step - decay_start) // decay_every))  # ceil: step decay_start + 1 is the first decayed one
    return lr * decay_factor**decays


SCHEDULES: dict[str, Callable[..., float]] = {
    "constant": constant,
    "inverse_sqrt": inverse_sqrt,
    "noam": noam,
    "cosine": cosine,
    "step": step_decay,
}


def make_schedule(name: str, **params: float) -> Callable[[int], float]:
    """The schedule ``name`` with its parameters bound: a function ``step -> lr``.

    ``make_schedule("cosine", warmup=1000, total=100_000, lr=5e-4, min_lr=1e-5)``.
    Unknown names or parameters raise ``ValueError`` naming the valid ones.
    """
    if name not in SCHEDULES:
        near = difflib.get_close_matches(name, SCHEDULES, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(f"unknown schedule {name!r}{hint}; choose one of {sorted(SCHEDULES)}")
    fn = SCHEDULES[name]
    names = [p for p in inspect.signature(fn).parameters if p != "step"]
    for key in params:
        if key not in names:
            near = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"schedule {name!r} has no parameter {key!r}{hint}; its parameters are {names}")
    try:
        inspect.signature(fn).bind(1, **params)
    except TypeError as err:
        raise ValueError(f"schedule {name!r}: {err}; its parameters are {names}") from None

    def schedule(step: int) -> float:
        return fn(step, **params)

    schedule.__name__ = schedule.__qualname__ = name
    fn(1, **params)  # check the values now, not at the first step
    return schedule


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group (call before ``optimizer.step()``)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
