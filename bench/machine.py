"""The machine a bench result was measured on, named the same way by every bench script.

The model name alone does not tell this project's machines apart ("AMD EPYC" covers CPUs with and
without AVX-512, on which torch's kernels differ a lot), so the name carries the x86 family/model
and the widest vector extension: "AMD EPYC (family 25 model 17, AVX-512)".
"""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU model as ``lscpu`` names it, with family/model and AVX-512 or AVX2 where /proc/cpuinfo says."""
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
    return f"{name} ({', '.join(detail)})" if detail else name
