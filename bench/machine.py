"""The machine a bench result was measured on, named the same way by every bench script.

The model name alone does not tell this project's machines apart ("AMD EPYC" covers CPUs with and
without AVX-512, on which torch's kernels differ a lot), so the name carries the x86 family/model
and the widest vector extension: "AMD EPYC (family 25 model 17, AVX-512)".
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

# Environment variables that keep each library's kernels to AVX2 on a CPU with AVX-512, read as each library
# starts (so set before a runtime's process imports it): torch's own kernels, oneDNN (torch's and
# CTranslate2's copies), MKL and CTranslate2's own. ``ISA_VARIABLE`` records the limit for ``cpu_name``.
ISA_VARIABLE = "SEQMAP_BENCH_ISA"
ISA_LIMITS = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2",
                       "MKL_ENABLE_INSTRUCTIONS": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2", ISA_VARIABLE: "AVX2"}}


def limit_isa(name: str) -> None:
    """Keep every library of this process and the processes it starts to ``name``'s kernels (``ISA_LIMITS``):
    how an AVX2-only CPU's speed is approximated on a CPU with AVX-512 (same cores, caches and clock)."""
    os.environ.update(ISA_LIMITS[name])


def check_isa(name: str | None) -> None:
    """Stop unless torch in this process runs ``name``'s kernels (``limit_isa`` must act before torch starts)."""
    import torch

    if name and torch.backends.cpu.get_cpu_capability() != name.upper():
        raise SystemExit(f"--isa {name}: torch runs {torch.backends.cpu.get_cpu_capability()} kernels in this "
                         f"process; set ATEN_CPU_CAPABILITY before torch starts")


def cpu_name() -> str:
    """The CPU model as ``lscpu`` names it, with family/model and AVX-512 or AVX2 where /proc/cpuinfo says, and
    the limit ``limit_isa`` set, if any."""
    try:
        fields: dict[str, str] = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break  # the first processor is enough
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        fields = {}
    name = fields.get("model name")
    if not name:
        return platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    detail = [f"family {fields['cpu family']} model {fields['model']}"] if "cpu family" in fields else []
    detail += [vector] if vector else []
    if os.environ.get(ISA_VARIABLE):
        detail.append(f"kernels limited to {os.environ[ISA_VARIABLE]}")
    return f"{name} ({', '.join(detail)})" if detail else name
