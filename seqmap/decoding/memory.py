"""Freed memory kept for reuse: fewer page faults per decode step on the CPU.

PyTorch's CPU allocator has no cache: each operator's output is a fresh ``malloc`` and each
intermediate a ``free``. A decode step makes megabytes of them (logits, scores, attention),
and glibc's ``malloc``, by default, gives the top of its heap back to the system once more than
a few megabytes there are free, and serves large blocks with ``mmap``. The next step then asks
the system again, and touching the new pages faults, which costs system time at every step.

``keep_freed_memory`` sets glibc's trim threshold to ``TRIM_THRESHOLD`` and its mmap threshold to
``MMAP_THRESHOLD``: freed blocks stay in the heap for the next step, and only blocks above 32 MB
are mapped on their own. The process keeps up to ``TRIM_THRESHOLD`` of freed memory (its peak
stays resident); nothing else changes. ``load_run`` calls it for CPU decoding; elsewhere (another
C library, Windows, macOS) it does nothing and returns False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
TRIM_THRESHOLD = 256 << 20
MMAP_THRESHOLD = 32 << 20  # the largest glibc accepts on 64-bit systems


@functools.cache
def keep_freed_memory() -> bool:
    """Keep freed memory in glibc's heap for reuse (see the module docstring); True if the setting took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # no C library by that name, or not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # set the mmap threshold first: setting either one ends glibc's own adjustment of both
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
