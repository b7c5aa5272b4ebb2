"""``bench/decode_parts.py`` runs and writes one row per operation (a smoke test; the timings are the bench's)."""

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "decode_parts.py"


def test_decode_parts_bench_writes_its_rows(tmp_path):
    spec = importlib.util.spec_from_file_location("decode_parts", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "parts.json"
    module.main(["--threads", "1", "--repeats", "1", "--inner", "1", "--json", str(out)])
    rows = json.loads(out.read_text())
    mkl = module.mkl_packing_available()
    assert len(rows) == 20 + (20 if mkl else 0)
    mkl_after = ["PackedLinear (MKL)", "F.linear (MKL)"] if mkl else []
    assert {r["after"] for r in rows} >= {"PackedLinear (oneDNN)", "explicit", "slots in use", "row_max",
                                          "shared_prefix_attention", *mkl_after}
    assert all(r["before_us"] > 0 and r["after_us"] > 0 for r in rows)
