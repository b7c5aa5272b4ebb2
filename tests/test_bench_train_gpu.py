"""``bench/train_gpu.py`` on the CPU, its smoke test (the rows are written and hold together; the GPU figures are
the bench's), and the FLOP count its MFU divides, against a hand count."""

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench" / "train_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("train_gpu", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _has_transformers() -> bool:
    return importlib.util.find_spec("transformers") is not None


def test_quick_run_on_the_cpu_writes_a_row_per_implementation_on_the_same_batches(bench, tmp_path):
    out = tmp_path / "rows.json"
    assert bench.main(["--device", "cpu", "--quick", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["impl"] for r in rows] == (["seqmap", "marian"] if _has_transformers() else ["seqmap"])
    shape = bench.SHAPES["quick"]
    for r in rows:
        assert r["error"] is None and r["precision"] == "fp32"  # a CPU trains in float32
        assert r["steps"] == len(r["samples_s"]) == 2 and len(r["losses"]) == 3  # warm-up 1, then 2 timed
        assert all(math.isfinite(x) and 0 < x < 20 for x in r["losses"])
        assert r["tok_s"] > 0 and r["step_ms"] > 0
        assert 0 < r["real_tgt_tokens"] <= r["padded_tgt_tokens"]
        assert r["flops"] == sum(bench.train.step_flops(b, s, t, shape) for b, s, t in r["batches"])
        assert r["mfu_measured"] == pytest.approx(r["flops"] / sum(r["samples_s"]) / r["peak_measured_flop_s"])
        assert r["mfu_spec"] is None and r["peak_spec_flop_s"] is None  # no datasheet peak for a CPU
    assert len({json.dumps(r["batches"]) for r in rows}) == 1  # the same batches for every implementation
    assert len({r["params"] for r in rows}) == 1  # the same shape


def test_step_flops_is_the_hand_count_of_a_tiny_transformer(bench):
    """2 pairs, source length 3, target length 5 (6 source and 10 target tokens), D=4, F=8, V=10, one layer each."""
    shape = dict(d_model=4, n_heads=1, d_ff=8, layers=1, vocab=10, dropout=0.0)
    # multiply-adds of the forward pass
    encoder = (6 * 4 * 4 * 4  # Q, K, V and output projections of 6 tokens: 384
               + 6 * 4 * 8 * 2  # feed-forward in and out: 384
               + 6 * 3 * 4 * 2)  # scores and weighted values over 3 keys: 144
    decoder = (10 * 4 * 4 * 4  # self-attention projections: 640
               + 10 * 5 * 4 * 2  # self-attention over 5 keys (computed in full): 400
               + 10 * 4 * 4 * 2  # cross-attention queries and outputs: 320
               + 6 * 4 * 4 * 2  # cross-attention keys and values, per source token: 192
               + 10 * 3 * 4 * 2  # cross-attention over 3 keys: 240
               + 10 * 4 * 8 * 2)  # feed-forward: 640
    output = 10 * 4 * 10  # output layer: 400
    assert (encoder, decoder, output) == (912, 2432, 400)
    # FLOPs = 2 per multiply-add; a step = the forward and a backward of two forwards' cost
    assert bench.train.step_flops(2, 3, 5, shape) == 3 * 2 * (912 + 2432 + 400) == 22464
    assert bench.train.step_flops(2, 3, 5, {**shape, "layers": 2}) == 3 * 2 * (2 * (912 + 2432) + 400)


def test_spec_peak_reads_the_device_name(bench, monkeypatch):
    names = {"NVIDIA H100 80GB HBM3": (989e12, 67e12), "NVIDIA H100 PCIe": (756e12, 51e12),
             "NVIDIA H200": (989e12, 67e12), "NVIDIA A100-SXM4-80GB": (312e12, 19.5e12),
             "NVIDIA L40S": (362e12, 91.6e12), "NVIDIA L4": (121e12, 30.3e12), "NVIDIA GeForce GTX 1080": (None, None)}
    for name, (bf16, fp32) in names.items():
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, name=name: name)
        assert bench.spec_peak(torch.device("cuda"), torch.bfloat16) == bf16, name
        assert bench.spec_peak(torch.device("cuda"), torch.float32) == fp32, name
    assert bench.spec_peak(torch.device("cpu"), torch.float32) is None


def test_an_implementation_out_of_gpu_memory_is_reported_and_the_other_still_timed(bench, tmp_path, monkeypatch):
    """One shot on a lent GPU: an implementation that does not fit leaves a row saying so, not a traceback."""
    if not _has_transformers():
        pytest.skip("needs transformers for a second implementation")
    real = bench.Trainee.step

    def step(self, *args):
        if self.name == "marian" and len(self.losses) == 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(self, *args)

    monkeypatch.setattr(bench.Trainee, "step", step)
    out = tmp_path / "rows.json"
    assert bench.main(["--device", "cpu", "--quick", "--json", str(out)]) == 0
    seqmap, marian = json.loads(out.read_text())
    assert seqmap["error"] is None and seqmap["tok_s"] > 0 and len(seqmap["losses"]) == 3
    assert marian["error"].startswith("out of GPU memory at step 3") and "lower --tokens" in marian["error"]
    assert "tok_s" not in marian


def test_bad_options_are_one_line_errors(bench, capsys):
    for argv, message in ((["--impls", "seqmap,fairseq"], "--impls 'seqmap,fairseq': choose from seqmap,marian"),
                          (["--precision", "fp16"], "--precision 'fp16': give bf16, fp32 or bf16,fp32")):
        with pytest.raises(SystemExit):
            bench.main(["--device", "cpu", "--quick", *argv])
        assert message in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            bench.main(["--quick"])
        assert "--device cuda: CUDA is not available here" in capsys.readouterr().err
