"""``seqmap.nn.packed``: Linear layers through packed weights (oneDNN or MKL) equal ``nn.Linear`` and decode the
same tokens; MKL packs are made per row count once it recurs, and a bounded number is kept."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import seqmap.nn.packed as packed_module
from seqmap.config import ModelConfig
from seqmap.data.synthetic import BOS, EOS
from seqmap.decoding.beam import beam_search
from seqmap.decoding.quantize import quantize
from seqmap.models.builder import build_model
from seqmap.nn.packed import (
    MKL_AFTER_CALLS,
    MKL_MAX_ROWS,
    MKL_ROW_COUNTS,
    PLAIN_MAX_ROWS,
    PackedLinear,
    linear_relu,
    linear_rows,
    mkl_packing_available,
    pack_linears,
    packing_available,
    packing_backend,
)
from seqmap.training.toy import _decode

needs_packing = pytest.mark.skipif(not packing_available(), reason="torch without oneDNN on x86-64: nothing to pack")
needs_mkl = pytest.mark.skipif(not mkl_packing_available(), reason="torch without MKL's packed sgemm")
BACKENDS = ["onednn", pytest.param("mkl", marks=needs_mkl)]


def _close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@needs_packing
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 24), (3, 5, 24), (1, 24)], ids=["rows", "batch-time", "one-row"])
def test_packed_linear_equals_linear_and_its_row_slices(bias, shape):
    linear = nn.Linear(24, 40, bias=bias)
    packed = PackedLinear(linear, "onednn")
    x = torch.randn(shape)
    with torch.no_grad():
        _close(packed(x), linear(x))
        _close(linear_relu(packed, x), F.relu(linear(x)))
        _close(linear_rows(packed, x, 8, 30), linear(x)[..., 8:30])
        _close(linear_rows(linear, x, 8, 30), linear(x)[..., 8:30])
    assert set(packed._packs) == {(0, 40), (8, 30)}  # the packed path ran, once per slice


@needs_mkl
@pytest.mark.parametrize("bias", [True, False])
def test_mkl_packs_are_made_per_row_count_once_it_recurs_and_equal_linear(bias):
    linear = nn.Linear(24, 40, bias=bias)
    packed = PackedLinear(linear, "mkl")
    inputs = {rows: torch.randn(rows, 24) for rows in (PLAIN_MAX_ROWS + 1, 5, MKL_MAX_ROWS)}
    inputs["batch-time"] = torch.randn(3, 4, 24)  # 12 rows
    with torch.no_grad():
        for call in range(1, MKL_AFTER_CALLS + 1):  # one call per slice and row count each time
            for x in inputs.values():
                _close(packed(x), linear(x))
                _close(linear_rows(packed, x, 8, 30), linear(x)[..., 8:30])
            if call == MKL_AFTER_CALLS - 1:
                assert not packed._mkl_packs  # not packed before a row count's MKL_AFTER_CALLS-th call
        for x in inputs.values():  # now through the MKL packs
            _close(packed(x), linear(x))
            _close(linear_relu(packed, x), F.relu(linear(x)))
            _close(linear_rows(packed, x, 8, 30), linear(x)[..., 8:30])
        big = torch.randn(MKL_MAX_ROWS + 1, 24)
        for _ in range(MKL_AFTER_CALLS + 1):
            _close(packed(big), linear(big))
    rows = {PLAIN_MAX_ROWS + 1, 5, 12, MKL_MAX_ROWS}
    assert set(packed._mkl_packs) == {(0, 40, r) for r in rows} | {(8, 30, r) for r in rows}
    assert set(packed._packs) == {(0, 40), (8, 30)}  # oneDNN served the first calls and the 129 rows


@needs_mkl
@pytest.mark.parametrize("bias", [True, False])
def test_with_mkl_a_few_rows_go_through_f_linear_without_any_pack(bias):
    linear = nn.Linear(24, 40, bias=bias)
    packed = PackedLinear(linear, "mkl")
    with torch.no_grad():
        for rows in range(1, PLAIN_MAX_ROWS + 1):
            for shape in ((rows, 24), (rows, 1, 24)):
                x = torch.randn(shape)
                for _ in range(MKL_AFTER_CALLS + 1):
                    assert torch.equal(packed(x), F.linear(x, linear.weight, linear.bias))
                    assert torch.equal(linear_relu(packed, x), F.relu(F.linear(x, linear.weight, linear.bias)))
                    bias_rows = None if linear.bias is None else linear.bias[8:30]
                    assert torch.equal(linear_rows(packed, x, 8, 30), F.linear(x, linear.weight[8:30], bias_rows))
        assert not packed._packs and not packed._mkl_packs and not packed._calls
        empty = torch.randn(0, 24)  # no rows: oneDNN's pack (as before MKL), never an MKL pack for 0 rows
        for _ in range(MKL_AFTER_CALLS + 1):
            assert packed(empty).shape == (0, 40)
        assert set(packed._packs) == {(0, 40)} and not packed._mkl_packs and not packed._calls
        x = torch.randn(PLAIN_MAX_ROWS + 1, 24)  # one row more: oneDNN's pack first, then MKL's
        for _ in range(MKL_AFTER_CALLS):
            _close(packed(x), linear(x))
    assert set(packed._packs) == {(0, 40)} and set(packed._mkl_packs) == {(0, 40, PLAIN_MAX_ROWS + 1)}


@needs_mkl
def test_at_most_mkl_row_counts_packs_are_kept_per_slice_the_least_recently_used_dropped():
    linear = nn.Linear(16, 8)
    packed = PackedLinear(linear, "mkl")
    counts = list(range(PLAIN_MAX_ROWS + 1, PLAIN_MAX_ROWS + MKL_ROW_COUNTS + 3))
    with torch.no_grad():
        for rows in counts:
            x = torch.randn(rows, 16)
            for _ in range(MKL_AFTER_CALLS):
                _close(packed(x), linear(x))
    assert list(packed._mkl_packs) == [(0, 8, r) for r in counts[-MKL_ROW_COUNTS:]]
    packed.eval()  # a mode switch drops every pack
    assert not packed._mkl_packs and not packed._packs and not packed._calls


@needs_mkl
def test_a_row_count_in_use_keeps_its_pack_when_a_new_one_comes():
    linear = nn.Linear(16, 8)
    packed = PackedLinear(linear, "mkl")
    counts = list(range(PLAIN_MAX_ROWS + 1, PLAIN_MAX_ROWS + 1 + MKL_ROW_COUNTS))
    inputs = {rows: torch.randn(rows, 16) for rows in [*counts, counts[-1] + 1]}
    with torch.no_grad():
        for rows in counts:
            for _ in range(MKL_AFTER_CALLS):
                packed(inputs[rows])
        _close(packed(inputs[counts[0]]), linear(inputs[counts[0]]))  # the oldest pack, used again
        for _ in range(MKL_AFTER_CALLS):
            packed(inputs[counts[-1] + 1])
    assert [key[2] for key in packed._mkl_packs] == [*counts[2:], counts[0], counts[-1] + 1]


def test_packing_backend_follows_the_cpu_and_the_environment(monkeypatch):
    monkeypatch.delenv("SEQMAP_PACKED_LINEAR", raising=False)
    monkeypatch.setattr(packed_module, "mkl_packing_available", lambda: True)
    monkeypatch.setattr(packed_module, "cpu_vendor", lambda: "GenuineIntel")
    assert packing_backend() == "mkl"
    monkeypatch.setattr(packed_module, "cpu_vendor", lambda: "AuthenticAMD")
    assert packing_backend() == "onednn"
    monkeypatch.setenv("SEQMAP_PACKED_LINEAR", "MKL")
    assert packing_backend() == "mkl"
    monkeypatch.setenv("SEQMAP_PACKED_LINEAR", "onednn")
    monkeypatch.setattr(packed_module, "cpu_vendor", lambda: "GenuineIntel")
    assert packing_backend() == "onednn"
    monkeypatch.setenv("SEQMAP_PACKED_LINEAR", "blas")
    with pytest.raises(ValueError, match="SEQMAP_PACKED_LINEAR='blas' is not a packed-Linear backend; use one of"):
        packing_backend()
    monkeypatch.setattr(packed_module, "mkl_packing_available", lambda: False)
    monkeypatch.setenv("SEQMAP_PACKED_LINEAR", "mkl")
    with pytest.raises(ValueError, match="no MKL packed sgemm; use onednn or unset it"):
        packing_backend()
    monkeypatch.delenv("SEQMAP_PACKED_LINEAR")
    assert packing_backend() == "onednn"  # Intel, but this torch has no MKL packs


@needs_packing
def test_state_dict_ties_and_isinstance_are_unchanged():
    cfg = ModelConfig(family="transformer", src_vocab=30, tgt_vocab=30, d_model=16, n_heads=2, d_ff=32,
                      enc_layers=1, dec_layers=1, dropout=0.0, tie_embeddings=True)
    model = build_model(cfg).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    linears = sum(type(m) is nn.Linear for m in model.modules())
    pack_linears(model)
    assert sum(type(m) is PackedLinear for m in model.modules()) == linears > 0
    assert all(isinstance(m, nn.Linear) for m in model.modules() if type(m) is PackedLinear)
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.decoder.output.weight is model.decoder.embedding.weight  # a tied output layer stays tied


@needs_packing
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_weight_changed_in_place_is_packed_again(backend):
    linear = nn.Linear(8, 6)
    packed = PackedLinear(linear, backend)
    x = torch.randn(4, 8)
    with torch.no_grad():
        for _ in range(MKL_AFTER_CALLS):
            packed(x)
        packed.load_state_dict({"weight": torch.randn(6, 8), "bias": torch.randn(6)})
        _close(packed(x), F.linear(x, linear.weight, linear.bias))


@needs_packing
@pytest.mark.parametrize("backend", BACKENDS)
def test_training_with_fused_adamw_between_evaluations_never_reads_a_stale_pack(backend):
    """Fused AdamW changes weights without bumping their version counter; the mode switch drops the packs."""
    linear = nn.Linear(8, 6)
    packed = PackedLinear(linear, backend).eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        for _ in range(MKL_AFTER_CALLS):
            packed(x)
    packed.train()
    optimizer = torch.optim.AdamW(packed.parameters(), lr=0.1, fused=True)
    packed(x).pow(2).sum().backward()
    optimizer.step()
    packed.eval()
    with torch.no_grad():
        _close(packed(x), F.linear(x, linear.weight, linear.bias))


@needs_packing
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_used_packed_linear_can_be_copied_and_pickled(backend):
    """oneDNN's and MKL's packed tensors cannot be copied: copies leave them behind and pack their own."""
    packed = PackedLinear(nn.Linear(8, 6), backend)
    x = torch.randn(4, 8)
    with torch.no_grad():
        for _ in range(MKL_AFTER_CALLS):
            y = packed(x)
        assert bool(packed._mkl_packs) == (backend == "mkl")
        twin = copy.deepcopy(packed)
        buffer = io.BytesIO()
        torch.save(packed, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        for other in (twin, loaded):
            assert other.weight is not packed.weight and other._packs == {} and not other._mkl_packs
            _close(other(x), y)
    assert packed._packs  # the original keeps its pack


def test_training_through_a_packed_linear_is_plain_autograd():
    linear = nn.Linear(8, 6)
    reference = nn.Linear(8, 6)
    reference.load_state_dict(linear.state_dict())
    packed = PackedLinear(linear)
    x = torch.randn(4, 8)
    linear_relu(packed, x).pow(2).sum().backward()
    F.relu(reference(x)).pow(2).sum().backward()
    _close(linear.weight.grad, reference.weight.grad)
    _close(linear.bias.grad, reference.bias.grad)
    assert packed._packs == {}  # nothing was packed while training


def test_pack_linears_leaves_the_model_alone_where_packing_is_unavailable(monkeypatch):
    monkeypatch.setattr(packed_module, "packing_available", lambda: False)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    assert pack_linears(model) is model and all(type(m) is not PackedLinear for m in model.modules())


@needs_packing
@pytest.mark.parametrize("backend", BACKENDS)
def test_packed_model_decodes_the_same_tokens_as_the_plain_one_on_a_trained_toy(trained_reverse_toy, backend,
                                                                                 monkeypatch):
    """Greedy and beam tokens of every held-out sentence (5 batches of 32: greedy's 32 rows and beam's 128
    are within MKL's row counts) equal the unpacked model's; beam scores agree to float rounding. Packing
    after ``--quantize int8`` packs what stays float (cross-attention's in_proj)."""
    monkeypatch.setenv("SEQMAP_PACKED_LINEAR", backend)
    trained, task = trained_reverse_toy
    model = copy.deepcopy(trained)  # packed in place below; the fixture is shared
    batches = task.batches(5, 32, seed=777)
    max_len = task.max_len + 1

    def decode(m):
        return [(_decode(m, b, "transformer", sep=0, max_len=max_len),
                 beam_search(m, b.src, b.src_mask, beam_size=4, bos=BOS, eos=EOS, max_len=max_len, n_best=2))
                for b in batches]

    plain = decode(model)
    int8 = quantize(model, "int8")
    pack_linears(model)
    assert type(model.decoder.output) is PackedLinear
    assert model.decoder.output._mkl == (backend == "mkl")
    for (greedy, beam), (plain_greedy, plain_beam) in zip(decode(model), plain, strict=True):
        assert greedy == plain_greedy
        for ours, theirs in zip(beam.hypotheses, plain_beam.hypotheses, strict=True):
            assert [h.tokens for h in ours] == [h.tokens for h in theirs]
            _close(torch.tensor([h.score for h in ours]), torch.tensor([h.score for h in theirs]))
    assert {rows for _, _, rows in model.decoder.output._mkl_packs} == ({32, 128} if backend == "mkl" else set())
    pack_linears(int8)
    assert type(int8.decoder.layers[0].cross_attn.in_proj) is PackedLinear
    assert "quantized" in type(int8.decoder.layers[0].self_attn.in_proj).__module__
    assert len(_decode(int8, batches[0], "transformer", sep=0, max_len=max_len)) == len(plain[0][0])
