"""``keep_freed_memory``: glibc's malloc keeps freed memory for the next decode step."""

import ctypes
import sys

import pytest
import torch

from seqmap.decoding import memory


def test_on_glibc_freed_blocks_are_reused_without_page_faults():
    if not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "gnu_get_libc_version"):
        pytest.skip("glibc only")
    import resource  # POSIX only

    memory.keep_freed_memory.cache_clear()
    assert memory.keep_freed_memory() is True
    assert memory.keep_freed_memory() is True  # cached: one setting per process
    torch.empty(4 << 20).fill_(1.0)  # 16 MB, as logits or scores of a step: made, written, freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        torch.empty(4 << 20).fill_(1.0)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 3 * 4096  # 4,096 pages each time (81,920) if the 16 MB went back to the system each time


def test_does_nothing_off_linux(monkeypatch):
    memory.keep_freed_memory.cache_clear()
    monkeypatch.setattr(sys, "platform", "darwin")
    try:
        assert memory.keep_freed_memory() is False
    finally:
        memory.keep_freed_memory.cache_clear()


def test_does_nothing_without_mallopt(monkeypatch):
    class NoMallopt:  # a C library without mallopt (musl's has none that works; others none at all)
        def __init__(self, name):
            pass

    memory.keep_freed_memory.cache_clear()
    monkeypatch.setattr(memory.ctypes, "CDLL", NoMallopt)
    try:
        assert memory.keep_freed_memory() is False
    finally:
        memory.keep_freed_memory.cache_clear()


def test_load_run_keeps_freed_memory_for_cpu_decoding(monkeypatch, tmp_path):
    from seqmap import runs

    calls = []
    monkeypatch.setattr(runs, "keep_freed_memory", lambda: calls.append(1))
    monkeypatch.setattr(runs, "_load_run", lambda path, which, device: type(
        "Run", (), {"device": torch.device("cpu"), "model": torch.nn.Linear(2, 2)})())
    runs.load_run(tmp_path)
    assert calls == [1]
    runs.load_run(tmp_path, pack=False)
    assert calls == [1]
