"""The process group: joined under torchrun (one process too, with its backend named), never by a plain process."""

import socket

import torch
import torch.distributed as dist

from seqmap.training import distributed


def test_a_plain_process_joins_no_group(monkeypatch):
    for name in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    d = distributed.setup(torch.device("cpu"))
    assert d == distributed.Dist() and not d.enabled and d.backend is None
    assert not dist.is_initialized()
    assert distributed.all_reduce_sum([1.5], d, torch.device("cpu")) == [1.5]


def test_one_process_of_torchrun_joins_a_group_of_one_and_names_its_backend(monkeypatch):
    """A one-GPU `torchrun --nproc_per_node 1` skipped the group, so NCCL and DistributedDataParallel went untried."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"TORCHELASTIC_RUN_ID": "test", "WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    d = distributed.setup(torch.device("cpu"))
    try:
        assert d == distributed.Dist(rank=0, world_size=1, local_rank=0, backend="gloo")
        assert d.enabled and d.is_main
        assert distributed.all_reduce_sum([1.5, 2.0], d, torch.device("cpu")) == [1.5, 2.0]  # through the group
        assert distributed.broadcast_flag(True, d, torch.device("cpu")) is True
    finally:
        distributed.teardown(d)
    assert not dist.is_initialized()
