"""``seqmap.nn.packed``: Linear layers through oneDNN-packed weights equal ``nn.Linear`` and decode the same tokens."""

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
from seqmap.nn.packed import PackedLinear, linear_relu, linear_rows, pack_linears, packing_available
from seqmap.training.toy import _decode

needs_packing = pytest.mark.skipif(not packing_available(), reason="torch without oneDNN on x86-64: nothing to pack")


def _close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@needs_packing
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 24), (3, 5, 24), (1, 24)], ids=["rows", "batch-time", "one-row"])
def test_packed_linear_equals_linear_and_its_row_slices(bias, shape):
    linear = nn.Linear(24, 40, bias=bias)
    packed = PackedLinear(linear)
    x = torch.randn(shape)
    with torch.no_grad():
        _close(packed(x), linear(x))
        _close(linear_relu(packed, x), F.relu(linear(x)))
        _close(linear_rows(packed, x, 8, 30), linear(x)[..., 8:30])
        _close(linear_rows(linear, x, 8, 30), linear(x)[..., 8:30])
    assert set(packed._packs) == {(0, 40), (8, 30)}  # the packed path ran, once per slice


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
def test_a_weight_changed_in_place_is_packed_again():
    linear = nn.Linear(8, 6)
    packed = PackedLinear(linear)
    x = torch.randn(4, 8)
    with torch.no_grad():
        packed(x)
        packed.load_state_dict({"weight": torch.randn(6, 8), "bias": torch.randn(6)})
        _close(packed(x), F.linear(x, linear.weight, linear.bias))


@needs_packing
def test_training_with_fused_adamw_between_evaluations_never_reads_a_stale_pack():
    """Fused AdamW changes weights without bumping their version counter; the mode switch drops the packs."""
    linear = nn.Linear(8, 6)
    packed = PackedLinear(linear).eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        packed(x)
    packed.train()
    optimizer = torch.optim.AdamW(packed.parameters(), lr=0.1, fused=True)
    packed(x).pow(2).sum().backward()
    optimizer.step()
    packed.eval()
    with torch.no_grad():
        _close(packed(x), F.linear(x, linear.weight, linear.bias))


@needs_packing
def test_a_used_packed_linear_can_be_copied_and_pickled():
    """oneDNN's packed tensors cannot be copied: copies leave them behind and pack their own."""
    packed = PackedLinear(nn.Linear(8, 6))
    x = torch.randn(4, 8)
    with torch.no_grad():
        y = packed(x)
        twin = copy.deepcopy(packed)
        buffer = io.BytesIO()
        torch.save(packed, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        for other in (twin, loaded):
            assert other.weight is not packed.weight and other._packs == {}
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
def test_packed_model_decodes_the_same_tokens_as_the_plain_one_on_a_trained_toy(trained_reverse_toy):
    """Greedy and beam tokens of every held-out sentence equal the unpacked model's; beam scores agree to
    float rounding. Packing after ``--quantize int8`` packs what stays float (cross-attention's in_proj)."""
    trained, task = trained_reverse_toy
    model = copy.deepcopy(trained)  # packed in place below; the fixture is shared
    batch = next(iter(task.batches(1, 200, seed=777)))
    src, mask = batch.src, batch.src_mask
    plain_greedy = _decode(model, batch, "transformer", sep=0, max_len=task.max_len + 1)
    plain_beam = beam_search(model, src, mask, beam_size=4, bos=BOS, eos=EOS, max_len=task.max_len + 1, n_best=2)
    int8 = quantize(model, "int8")
    pack_linears(model)
    assert type(model.decoder.output) is PackedLinear
    assert _decode(model, batch, "transformer", sep=0, max_len=task.max_len + 1) == plain_greedy
    beam = beam_search(model, src, mask, beam_size=4, bos=BOS, eos=EOS, max_len=task.max_len + 1, n_best=2)
    for ours, theirs in zip(beam.hypotheses, plain_beam.hypotheses, strict=True):
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]
        _close(torch.tensor([h.score for h in ours]), torch.tensor([h.score for h in theirs]))
    pack_linears(int8)
    assert type(int8.decoder.layers[0].cross_attn.in_proj) is PackedLinear
    assert "quantized" in type(int8.decoder.layers[0].self_attn.in_proj).__module__
    assert len(_decode(int8, batch, "transformer", sep=0, max_len=task.max_len + 1)) == len(plain_greedy)
