"""``bench/generate.py``: language-model decoding, seqmap vs transformers' GPT-2 vs CTranslate2's Generator (a smoke
test at a tiny size: the runtimes start, greedy and beam outputs agree, the rows are written)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed: pip install -e \".[ct2]\"")
pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")

BENCH = Path(__file__).resolve().parents[1] / "bench" / "generate.py"


def test_generate_bench_writes_its_rows_and_the_runtimes_agree(tmp_path):
    out = tmp_path / "rows.json"
    args = ["--prompts", 3, "--prompt-len", 5, "--new-tokens", 6, "--beams", 1, 3, "--repeats", 1, "--warmup", 0,
            "--threads", 1, "--int8", "--json", out]
    done = subprocess.run([sys.executable, str(BENCH), *map(str, args)], capture_output=True, text=True,
                          timeout=300)  # its runtimes are spawned processes: run it as a user does
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [r["mode"] for r in rows] == ["greedy", "beam-3"]
    for r in rows:
        assert r["new_tokens"] == 18 and r["agree_hf_prompts"] == 3 and r["agree_ct2_prompts"] == 3
        assert all(r[f"{name}_tok_s"] > 0 for name in ("seqmap", "hf", "ct2", "seqmap_int8", "ct2_int8"))
        assert r["cpu"] and r["ratio_vs_hf"] > 0 and "int8_agree_fp32_prompts" in r
    assert "seqmap/CT2" in done.stdout
