"""int8 decoding (``--quantize int8``): same greedy tokens as float32 on most sentences of a trained toy model."""

import pytest
import torch
from torch import nn

from seqmap.decoding.quantize import QuantizeError, quantize
from seqmap.training.toy import _decode

AGREE = 0.9  # share of held-out sentences whose int8 greedy tokens equal float32's


def test_int8_greedy_matches_float32_on_most_sentences_of_a_trained_toy(trained_reverse_toy):
    model, task = trained_reverse_toy
    int8 = quantize(model, "int8")
    assert any(type(m).__name__ == "Linear" and "quantized" in type(m).__module__ for m in int8.modules())
    layer = int8.decoder.layers[0]  # self-attention's packed q|k|v is int8; cross-attention slices its rows
    assert "quantized" in type(layer.self_attn.in_proj).__module__ and type(layer.cross_attn.in_proj) is nn.Linear
    weight = int8.decoder.output.weight()  # one scale per output row, as CTranslate2's int8 weights
    assert weight.qscheme() == torch.per_channel_affine and weight.q_per_channel_scales().numel() == weight.size(0)
    batch = next(iter(task.batches(1, 200, seed=777)))
    fp32 = _decode(model, batch, "transformer", sep=0, max_len=task.max_len + 1)
    q8 = _decode(int8, batch, "transformer", sep=0, max_len=task.max_len + 1)
    agree = sum(a == b for a, b in zip(fp32, q8, strict=True)) / len(fp32)
    assert agree >= AGREE, f"int8 equals float32 on {agree:.0%} of sentences, expected >= {AGREE:.0%}"


def test_quantize_rejects_unknown_modes_and_gpus_in_one_line():
    model = nn.Sequential(nn.Linear(4, 4))
    assert quantize(model, "none") is model and quantize(model, None) is model
    with pytest.raises(QuantizeError, match="--quantize 'int4' is not supported; use one of none, int8"):
        quantize(model, "int4")
    with pytest.raises(QuantizeError, match="CPU only"):
        quantize(model, "int8", torch.device("cuda"))
