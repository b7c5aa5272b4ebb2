"""Linear layers with their weights packed once for oneDNN, for inference on the CPU.

``nn.Linear`` on the CPU calls MKL's sgemm with the weight in its plain (out, in)
layout on every call. oneDNN (torch's ``mkldnn`` backend) can reorder a weight once
into the blocked layout its kernels read, and then multiply by it many times. That
is decoding's pattern: 8 to 320 rows per step times the same weights, step after
step. ``bench/decode.py`` measures both in one run (its "plain Linear" column);
on the AMD EPYC of docs/benchmarks.md the output projection (64 x 256 times
256 x 8000) took 0.5x to 0.65x the time packed (``bench/decode_parts.py``).

``pack_linears(model)`` replaces every float ``nn.Linear`` of a model by a
``PackedLinear`` that shares its ``weight`` and ``bias`` Parameters (the state dict,
tied weights and ``.weight`` readers are unchanged) and packs on first use:

- only without autograd (``torch.no_grad`` / ``inference_mode``), on the CPU, in
  float32; otherwise (training, another device or dtype) it is ``F.linear``;
- a weight changed in place after packing (``load_state_dict``) is packed again:
  the pack remembers the weight's version counter, and ``train()`` / ``eval()`` drop
  every pack (fused AdamW updates weights without bumping that counter);
- ``project(x, start, stop)`` multiplies by output rows [start, stop) only, each
  slice packed on its own: cross-attention's queries and its keys/values come from
  two slices of one ``in_proj`` (``seqmap.nn.multihead``), via ``linear_rows``.

Packing needs torch built with oneDNN on x86-64 (``packing_available``); elsewhere
``pack_linears`` leaves the model as it is. Results equal ``F.linear``'s to float
rounding (tests/nn/test_packed.py), not bit for bit: the two libraries sum in
different orders.
"""

from __future__ import annotations

import platform
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def packing_available() -> bool:
    """Whether this torch can pack Linear weights for oneDNN (x86-64 builds with mkldnn)."""
    return (platform.machine().lower() in ("x86_64", "amd64")
            and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


class PackedLinear(nn.Linear):
    """An ``nn.Linear``'s parameters, multiplied through a oneDNN-packed copy of the weight at inference.

    A subclass of ``nn.Linear`` so that code asking "is this a Linear?" still gets yes.
    """

    def __init__(self, linear: nn.Linear):
        nn.Module.__init__(self)  # not nn.Linear.__init__: the parameters are linear's own, not new ones
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight  # the same Parameter objects: state dict and ties unchanged
        self.bias = linear.bias
        self._packs: dict[tuple[int, int], _Pack] = {}

    def train(self, mode: bool = True) -> PackedLinear:
        """Switching modes drops the packs: an optimizer that updates weights without bumping their version
        counter (fused AdamW) would otherwise leave a pack stale for the next evaluation."""
        self._packs = {}
        return super().train(mode)

    def __getstate__(self) -> dict:
        """Copies and pickles leave the packs behind (oneDNN's opaque tensors cannot be copied); they re-pack."""
        state = self.__dict__.copy()
        state["_packs"] = {}
        return state

    def _pack(self, start: int, stop: int) -> _Pack:
        versions = (self.weight._version, -1 if self.bias is None else self.bias._version)
        pack = self._packs.get((start, stop))
        if pack is None or pack.versions != versions:
            weight = torch.ops.mkldnn._reorder_linear_weight(self.weight[start:stop].detach().contiguous())
            bias = None if self.bias is None else self.bias[start:stop].detach()
            pack = self._packs[(start, stop)] = _Pack(versions, weight, bias)
        return pack

    def project(self, x: Tensor, start: int = 0, stop: int | None = None, *, relu: bool = False) -> Tensor:
        """x (..., in) -> (..., stop - start): the outputs of rows [start, stop) of the weight.

        ``relu``: followed by a ReLU, which oneDNN applies as it writes the product (one pass).
        """
        stop = self.out_features if stop is None else stop
        if (torch.is_grad_enabled() and (self.weight.requires_grad or x.requires_grad)) \
                or not x.is_cpu or x.dtype != torch.float32 or self.weight.dtype != torch.float32:
            if (start, stop) == (0, self.out_features):
                y = F.linear(x, self.weight, self.bias)
            else:
                y = F.linear(x, self.weight[start:stop], None if self.bias is None else self.bias[start:stop])
            return F.relu(y) if relu else y
        pack = self._pack(start, stop)
        return torch.ops.mkldnn._linear_pointwise(x, pack.weight, pack.bias, "relu" if relu else "none", [], "")

    def forward(self, x: Tensor) -> Tensor:
        return self.project(x)


class _Pack(NamedTuple):
    versions: tuple[int, int]  # the weight's and bias's version counters when packed
    weight: Tensor  # rows [start, stop) in oneDNN's layout
    bias: Tensor | None


def linear_rows(linear: nn.Module, x: Tensor, start: int, stop: int) -> Tensor:
    """Output rows [start, stop) of ``linear`` (an nn.Linear or PackedLinear) applied to x, without the others."""
    if isinstance(linear, PackedLinear):
        return linear.project(x, start, stop)
    bias = None if linear.bias is None else linear.bias[start:stop]
    return F.linear(x, linear.weight[start:stop], bias)


def linear_relu(linear: nn.Module, x: Tensor) -> Tensor:
    """relu(linear(x)), in one pass when ``linear`` is a PackedLinear."""
    return linear.project(x, relu=True) if isinstance(linear, PackedLinear) else F.relu(linear(x))


def pack_linears(model: nn.Module) -> nn.Module:
    """``model`` with each float ``nn.Linear`` replaced (in place) by a ``PackedLinear``; unchanged where
    packing is not available. For inference: training through it falls back to ``F.linear``."""
    if not packing_available():
        return model
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.dtype == torch.float32:
                setattr(parent, name, PackedLinear(child))
    return model
