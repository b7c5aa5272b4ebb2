"""Several processes, one model: the thin layer over torch.distributed that training needs.

Launch with PyTorch's own launcher, which sets RANK / WORLD_SIZE / LOCAL_RANK:

    torchrun --nproc_per_node 2 -m seqmap train CONFIG

NCCL on GPUs, gloo on CPUs. Every rank builds the same model from the same seed,
takes a disjoint shard of the batches and DistributedDataParallel averages the
gradients; only rank 0 writes files. ``torchrun --nproc_per_node 1`` joins a group
of one, so one GPU runs the code path (NCCL, DistributedDataParallel) that several run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None  # the process group's (nccl, gloo); None: a plain process, in no group

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """In a process group: gradients, counts and decisions go through it (one process of torchrun too)."""
        return self.backend is not None


def setup(device: torch.device) -> Dist:
    """Join the process group when launched by torchrun, even as its only process; a no-op for a plain process."""
    if not launched():
        return Dist()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Dist(rank=dist.get_rank(), world_size=dist.get_world_size(),
                local_rank=int(os.environ.get("LOCAL_RANK", "0")), backend=str(dist.get_backend()))


def teardown(d: Dist) -> None:
    if d.enabled and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(values: list[float], d: Dist, device: torch.device) -> list[float]:
    """Sum a few numbers over all ranks (token counts, loss sums); identity for one process."""
    if not d.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def broadcast_flag(flag: bool, d: Dist, device: torch.device) -> bool:
    """Rank 0's decision (stop early, out of time) for everyone, so ranks never diverge."""
    if not d.enabled:
        return flag
    t = torch.tensor([1 if flag else 0], device=device)
    dist.broadcast(t, src=0)
    return bool(t.item())


def gather_to_main(value: object, d: Dist) -> list | None:
    """Every rank's ``value`` in rank order on rank 0 (None on the others); ``[value]`` for one process.

    For small Python objects (each process's RNG states for a checkpoint); they travel pickled between
    this run's own processes, never through a file.
    """
    if not d.enabled:
        return [value]
    values = [None] * d.world_size if d.is_main else None
    dist.gather_object(value, values, dst=0)
    return values


def launched() -> bool:
    """Started by torchrun (it sets ``TORCHELASTIC_RUN_ID``, one process or several) or by another launcher of
    several processes (``WORLD_SIZE`` > 1)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or launched_world_size() > 1


def launched_world_size() -> int:
    """How many processes torchrun started (``WORLD_SIZE``), before or without a process group; 1 otherwise."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def barrier(d: Dist) -> None:
    if d.enabled:
        dist.barrier()
