"""``bench/decode_switch.py`` runs both settings of a switch and writes one row per case (a smoke test)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
import torch._inductor.config

from seqmap.nn import multihead
from seqmap.nn import packed as packed_module
from seqmap.nn.packed import mkl_packing_available

BENCH = Path(__file__).resolve().parents[1] / "bench" / "decode_switch.py"


def _load():
    sys.path.insert(0, str(BENCH.parent))  # decode.py and machine.py beside it
    try:
        spec = importlib.util.spec_from_file_location("decode_switch", BENCH)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH.parent))
    return module


NEEDS_MKL = pytest.mark.skipif(not mkl_packing_available(), reason="torch without MKL's packed sgemm")


@pytest.mark.parametrize("switch", ["cache-reads", "split", pytest.param("pack", marks=NEEDS_MKL),
                                    pytest.param("plain", marks=NEEDS_MKL)])
def test_decode_switch_bench_writes_its_rows_and_the_tokens_agree(tmp_path, switch):
    before = multihead.WHOLE_STORAGE_READS, packed_module.PLAIN_MAX_ROWS, torch.get_num_threads()
    out = tmp_path / "switch.json"
    sentences = "2" if switch == "plain" else "32"  # plain: decoding steps of at most PLAIN_MAX_ROWS rows
    threads = "2" if switch == "split" else "1"  # split: two halves decoded at once, in two Python threads
    _load().main([switch, "--sentences", sentences, "--beams", "1", "2", "--new-tokens", "3", "--rounds", "1",
                  "--threads", threads, "--json", str(out)])
    torch.set_num_threads(before[2])
    rows = json.loads(out.read_text())
    assert [(r["sentences"], r["mode"]) for r in rows] == [(int(sentences), "greedy"), (int(sentences), "beam-2")]
    assert all(r["same_tokens"] and r["off_s"] > 0 and r["on_s"] > 0 for r in rows)
    assert (multihead.WHOLE_STORAGE_READS, packed_module.PLAIN_MAX_ROWS) == before[:2]  # the switch is put back


def test_decode_switch_bench_holds_the_kernels_to_avx2(tmp_path):
    """``--isa avx2`` runs the bench again in a process whose libraries are limited before torch starts."""
    out = tmp_path / "switch.json"
    _load().main(["cache-reads", "--isa", "avx2", "--sentences", "32", "--beams", "1", "--new-tokens", "2",
                  "--rounds", "1", "--threads", "1", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert len(rows) == 1 and rows[0]["same_tokens"]
    assert "kernels limited to AVX2" in rows[0]["cpu"]


@pytest.mark.slow
def test_decode_switch_bench_compiles_the_decoding_step(tmp_path):
    """``compile``: the decoder compiled by Inductor decodes the same tokens as eager decoding with packed weights."""
    out = tmp_path / "switch.json"
    _load().main(["compile", "--sentences", "32", "--beams", "1", "2", "--new-tokens", "3", "--rounds", "1",
                  "--threads", "1", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert [r["mode"] for r in rows] == ["greedy", "beam-2"] and all(r["same_tokens"] for r in rows)
    assert not torch._inductor.config.freezing  # put back
