"""int8 decoding on the CPU: dynamic quantization of a trained model's Linear layers.

``quantize(model, "int8")`` replaces each ``nn.Linear`` that is called as a module
(feed-forward layers, self-attention's packed q|k|v ``in_proj``, attention output
projections, the output layer) with torch's dynamically quantized Linear: int8
weights with a scale per output channel (row), as CTranslate2's int8 weights have,
activations quantized per call (a scale per row loses less BLEU than one per weight
matrix, at the same speed: docs/benchmarks.md). Cross-attention's ``in_proj`` stays
float32: it slices its weight rows (queries per step, keys and values once per source,
``MultiHeadAttention.project_memory``), which a packed int8 weight cannot do.

The kernel is ``torch.ao.quantization.quantize_dynamic`` (fbgemm/x86 backend). torch
2.13 marks it deprecated in favour of torchao, which is not a dependency here; its
deprecation warnings are silenced at this one call, and ``tests/decoding/test_quantize``
fails the day it stops working. Used by ``seqmap.runs.load_run(..., quantize=)``, so
translate, evaluate, generate and serve share it.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from seqmap.nn.layers import DecoderLayer

QUANTIZE_CHOICES = ("none", "int8")


class QuantizeError(ValueError):
    """The requested quantization cannot be applied; the message says what to change."""


def quantize(model: nn.Module, mode: str | None, device: torch.device | str = "cpu") -> nn.Module:
    """``model`` (in eval mode) with its Linear layers in int8 for ``mode="int8"``; unchanged for None/"none"."""
    if mode in (None, "none"):
        return model
    if mode not in QUANTIZE_CHOICES:
        raise QuantizeError(f"--quantize {mode!r} is not supported; use one of {', '.join(QUANTIZE_CHOICES)}")
    if torch.device(device).type != "cpu":
        raise QuantizeError(f"--quantize int8 runs on the CPU only; drop --device {device} or --quantize")
    sliced = {f"{name}.cross_attn.in_proj".lstrip(".") for name, m in model.named_modules()
              if isinstance(m, DecoderLayer)}
    names = {name for name, m in model.named_modules() if type(m) is nn.Linear and name not in sliced}
    spec = {name: torch.ao.quantization.per_channel_dynamic_qconfig for name in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=UserWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        return torch.ao.quantization.quantize_dynamic(model.eval(), spec, dtype=torch.qint8)
