"""``bench/machine.py``: the CPU's name in every bench row, and ``--isa avx2`` reaching a runtime's process."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
try:
    import machine
finally:
    sys.path.remove(str(BENCH))


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
                    reason="a CPU without AVX2: nothing to limit")
def test_limit_isa_reaches_a_new_process_and_the_cpu_name(monkeypatch):
    for name in machine.ISA_LIMITS["avx2"]:
        monkeypatch.setenv(name, "unset")  # put back as it was after the test
    monkeypatch.delenv(machine.ISA_VARIABLE)
    assert "kernels limited" not in machine.cpu_name()
    machine.limit_isa("avx2")
    child = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == "AVX2"
    assert machine.cpu_name().endswith("kernels limited to AVX2)")
