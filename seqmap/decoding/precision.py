"""Decoding in 16-bit floats on a GPU: ``--precision fp16`` or ``bf16`` for translate, evaluate, generate and serve.

``half_precision(model, "bf16", device)`` casts a trained model's weights (and buffers: position tables) to
bfloat16, as ``transformers`` does with ``torch_dtype``: every product then runs in the GPU's 16-bit
tensor-core kernels and the weights take half the memory. Log-probabilities and the scores that rank
hypotheses stay in float32 (``seqmap.decoding.steps.score_dtype``), so a beam's ranking does not lose the
small differences between close hypotheses. Outputs may differ from float32's on some sentences (rounding);
``tests/test_cuda.py`` checks that most are the same on a trained model.

Only for runs that decode tokens from tokens (``data.task`` translation or lm): the other tasks feed float
inputs (pixels, audio features, node features) that would have to be cast at each model's entry. On the CPU
decoding stays in float32 (no fast 16-bit products on the CPUs this project targets; ``--quantize int8`` is
the CPU's faster path).
"""

from __future__ import annotations

import torch
from torch import nn

from seqmap.tasks.registry import TASKS

PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class PrecisionError(ValueError):
    """The requested precision cannot be used here; the message says what to change."""


def decode_dtype(precision: str | None, device: torch.device | str, task: str = "translation") -> torch.dtype:
    """The dtype to decode in for ``--precision`` (None or "fp32": float32), or a PrecisionError naming the fix."""
    if precision in (None, "fp32"):
        return torch.float32
    if precision not in PRECISIONS:
        raise PrecisionError(f"--precision {precision!r} is not supported; use one of {', '.join(PRECISIONS)}")
    if not TASKS[task].half_precision:  # before the device: --device cuda would not help
        halves = " and ".join(info.many for info in TASKS.values() if info.half_precision)
        raise PrecisionError(f"--precision {precision} is for {halves}; this data.task={task} run decodes in "
                             "fp32: leave out --precision")
    device = torch.device(device)
    if device.type != "cuda":
        raise PrecisionError(f"--precision {precision} decodes on a CUDA GPU only (the CPU decodes in fp32; "
                             "--quantize int8 is its faster path); add --device cuda or leave out --precision")
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        raise PrecisionError(f"--precision bf16: {torch.cuda.get_device_name(device)} has no bfloat16 support; "
                             "use --precision fp16")
    return PRECISIONS[precision]


def half_precision(model: nn.Module, precision: str | None, device: torch.device | str,
                   task: str = "translation") -> nn.Module:
    """``model`` with its floating-point weights and buffers in ``precision`` (``decode_dtype``); unchanged for fp32."""
    dtype = decode_dtype(precision, device, task)
    return model if dtype == torch.float32 else model.to(dtype)
