"""``bench/serve.py --ct2``: both server modes, also searching with the run's CTranslate2 export (a smoke test on
the bench's toy model: every request answered, greedy answers identical in all four modes)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed: pip install -e \".[ct2]\"")
pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e \".[serve]\"")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "serve.py"


def test_serve_bench_times_the_export_beside_seqmap(tmp_path):
    out = tmp_path / "rows.json"
    args = ["--ct2", "--requests", 24, "--clients", 4, "--warmup", 4, "--toy-steps", 40, "--json", out]
    done = subprocess.run([sys.executable, str(BENCH), *map(str, args)], capture_output=True, text=True,
                          timeout=300)  # its servers are processes of their own: run it as a user does
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [(r["mode"], r["decoder"]) for r in rows] == [
        ("batched", "seqmap"), ("one at a time", "seqmap"), ("batched, ct2", "ctranslate2"),
        ("one at a time, ct2", "ctranslate2")]
    assert all(r["errors"] == 0 and r["agree_with_one_at_a_time"] == 24 and r["req_s"] > 0 for r in rows)
    assert rows[1]["speedup"] == 1.0 and "agree = answers identical" in done.stdout
