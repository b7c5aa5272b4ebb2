"""``bench/decode_export.py``: a trained run against its CTranslate2 export, one process per runtime (a smoke test
on a toy run: the rows are written, and greedy outputs and BLEU are the same in both runtimes)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed: pip install -e \".[ct2]\"")
pytest.importorskip("sacrebleu")

from tests.hub.test_marian_export import _trained  # noqa: E402

BENCH = Path(__file__).resolve().parents[1] / "bench" / "decode_export.py"


def test_decode_export_bench_writes_its_rows_and_greedy_agrees(tmp_path):
    _trained(tmp_path)
    (tmp_path / "src.txt").write_text("a b c\nb c d\nc a b\nd d a b c\na\n")
    (tmp_path / "ref.txt").write_text("c b a\nd c b\nb a c\nc b a d d\na\n")
    out = tmp_path / "rows.json"
    args = ["--run", tmp_path / "run", "--src", tmp_path / "src.txt", "--ref", tmp_path / "ref.txt", "--threads", 1,
            "--beams", 1, 2, "--single", 2, "--repeats", 1, "--warmup", 0, "--keep-finished", "--json", out]
    done = subprocess.run([sys.executable, str(BENCH), *map(str, args)], capture_output=True, text=True,
                          timeout=300)  # its runtimes are spawned processes: run it as a user does
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert all(r["cpu"] and r["run"] == str(tmp_path / "run") for r in rows)
    runtimes = ("seqmap", "ct2", "seqmap_keep")
    assert [(r["call"], r["beam"], r["runtime"]) for r in rows] == [
        (call, beam, runtime) for call in ("batch", "single") for beam in (1, 2) for runtime in runtimes]
    greedy = {r["runtime"]: r for r in rows if r["call"] == "batch" and r["beam"] == 1}
    for other in ("ct2", "seqmap_keep"):
        assert greedy[other]["same_as_seqmap"] == 1.0 and greedy[other]["bleu"] == greedy["seqmap"]["bleu"]
    assert all(r["sentences"] == (5 if r["call"] == "batch" else 2) and r["tokens_per_s"] > 0 for r in rows)
    assert "x seqmap" in done.stdout
