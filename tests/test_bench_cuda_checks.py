"""``bench/cuda_checks.sh``, the one script a lent GPU machine runs: it parses, its limits fit the loan, and run
with stand-ins for python3 and nvidia-smi it calls its steps in order, passes SEQMAP_CUDNN_ATTENTION to the one
step that needs it, says whether the torchrun run had the NCCL backend, and skips what its budget leaves no time for."""

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "cuda_checks.sh"
ROOT = SCRIPT.parents[1]

# stands in for python3: records its environment flag and arguments; a torchrun run writes a train.log
PYTHON = """#!/usr/bin/env bash
echo "${SEQMAP_CUDNN_ATTENTION:--} $*" >> "$CALLS"
prev=
for a in "$@"; do
  if [ "$prev" = --run-dir ]; then
    mkdir -p "$a"
    case "$*" in *distributed.run*) echo "model: transformer, device cuda:0, bf16, one process, backend $BACKEND" \
      > "$a/train.log";; esac
  fi
  prev=$a
done
"""


def test_the_script_parses():
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_limits_add_up_to_at_most_14_minutes_and_the_main_checks_come_first():
    steps = re.findall(r"^(?:SEQMAP_CUDNN_ATTENTION=1 )?step (\w+) (\d+) ", SCRIPT.read_text(), re.M)
    assert [name for name, _ in steps][:3] == ["tests", "train_gpu", "torchrun"]
    assert sum(int(limit) for _, limit in steps) <= 14 * 60


def _run(tmp_path: Path, backend: str = "nccl", budget: str = "570") -> tuple[subprocess.CompletedProcess, list]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python3", PYTHON), ("nvidia-smi", "#!/usr/bin/env bash\necho 'NVIDIA Stand-in'\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    calls = tmp_path / "calls.txt"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", CALLS=str(calls), BACKEND=backend,
               CHECKS_BUDGET=budget, CHECKS_TMP=str(tmp_path / "runs"))
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_with_stand_ins_every_step_runs_in_order_and_the_nccl_backend_is_found(tmp_path):
    done, calls = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    steps = (tmp_path / "out" / "steps.txt").read_text()
    assert "== torchrun: NCCL: model: transformer, device cuda:0, bf16, one process, backend nccl" in steps
    kinds = [next((k for k in ("-m pytest", "train_gpu.py", "distributed.run", "seqmap train", "seqmap evaluate",
                               "seqmap translate", "decode_gpu.py") if k in call), call) for call in calls[1:]]
    assert kinds == ["-m pytest", "train_gpu.py", "distributed.run", "seqmap train", *["seqmap evaluate"] * 4,
                     "seqmap translate", "decode_gpu.py"]
    evaluations = [c for c in calls if "seqmap evaluate" in c]
    assert [c.split()[0] for c in evaluations] == ["-", "1", "-", "-"]  # cuDNN kept for the second bf16 only
    assert all("--precision bf16" in c for c in evaluations[:2])
    assert "--nproc_per_node 1" in calls[3] and "--train.device cuda" in calls[3]
    assert len(re.findall(r"^== \w+: exit 0 after", steps, re.M)) == 10


def test_a_torchrun_run_without_nccl_is_reported_as_failed(tmp_path):
    done, _ = _run(tmp_path, backend="gloo")
    assert "== torchrun: FAILED: no 'backend nccl' in" in (tmp_path / "out" / "steps.txt").read_text()


@pytest.mark.parametrize("budget", ["0"])
def test_steps_past_the_budget_are_skipped(tmp_path, budget):
    done, calls = _run(tmp_path, budget=budget)
    steps = (tmp_path / "out" / "steps.txt").read_text()
    assert steps.count("skipped") == 10 and "exit" not in steps
    assert not any("seqmap" in c or "bench/" in c for c in calls)  # only the version line ran
