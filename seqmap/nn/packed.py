"""Linear layers with their weights packed once for oneDNN, for inference on the CPU.

``nn.Linear`` on the CPU calls MKL's sgemm with the weight in its plain (out, in)
layout on every call. oneDNN (torch's ``mkldnn`` backend) can reorder a weight once
into the blocked layout its kernels read, and then multiply by it many times. That
is decoding's pattern: 8 to 320 rows per step times the same weights, step after
step, where the packed multiply is the faster one (docs/benchmarks.md "Decoding";
``bench/decode.py`` measures both in one run, its "plain Linear" column).

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

Which library multiplies depends on the CPU (``packing_backend``). On Intel CPUs, MKL's own
packed sgemm (``torch.ops.mkl._mkl_linear``, what Inductor uses for frozen Linear layers) is
faster than oneDNN at decoding's row counts, with the same tokens (``bench/decode_switch.py pack``).
Its pack is made for one row count, though (another count falls back to an unpacked sgemm), and
packing the output layer costs about two of its calls.
So a row count of at most ``MKL_MAX_ROWS`` gets its MKL pack on its ``MKL_AFTER_CALLS``-th
call (greedy's batch keeps its rows for the whole call and from one call to the next; beam
search's shrinks as sentences finish, and a count seen only a few times is not worth
packing); until then, and above ``MKL_MAX_ROWS`` (where MKL's lead is small and real
batches, whose sizes vary, re-packed too often to keep it), oneDNN's pack serves. At most
``MKL_ROW_COUNTS`` row counts keep a pack per slice (the least recently used is dropped). At
most ``PLAIN_MAX_ROWS`` rows (greedy for one to three sentences: a server's requests) go
through ``F.linear``: for so few rows MKL's sgemm on the weight as it is runs about as fast
as on its pack and faster than oneDNN's pack (``bench/decode_parts.py``, ``bench/decode_switch.py
plain``). On other CPUs oneDNN serves all. ``SEQMAP_PACKED_LINEAR=onednn`` (or ``mkl``) in the
environment overrides the choice, for measuring one against the other.

Packing needs torch built with oneDNN on x86-64 (``packing_available``); elsewhere
``pack_linears`` leaves the model as it is. Results equal ``F.linear``'s to float
rounding (tests/nn/test_packed.py), not bit for bit: the libraries sum in
different orders.
"""

from __future__ import annotations

import functools
import os
import platform
from collections import OrderedDict
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


BACKENDS = ("onednn", "mkl")
BACKEND_VARIABLE = "SEQMAP_PACKED_LINEAR"
MKL_MAX_ROWS = 128  # above this many rows oneDNN's pack serves (see the module docstring)
MKL_AFTER_CALLS = 4  # a row count is packed for MKL on its 4th call (one pack costs about 2 calls)
MKL_ROW_COUNTS = 4  # MKL packs kept per weight slice, one per row count, least recently used dropped
PLAIN_MAX_ROWS = 3  # with the MKL backend, up to this many rows go through F.linear (see the module docstring)


def mkl_packing_available() -> bool:
    """Whether this torch has MKL's packed sgemm as operators (x86-64 builds with MKL)."""
    return (packing_available() and torch.backends.mkl.is_available()
            and hasattr(torch.ops.mkl, "_mkl_linear") and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight"))


@functools.cache
def cpu_vendor() -> str:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``) from /proc/cpuinfo; "" where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


# the operators themselves (OpOverloads), not their packets: a call skips the packet's overload lookup
_ONEDNN_LINEAR = torch.ops.mkldnn._linear_pointwise.default if packing_available() else None
_MKL_LINEAR = torch.ops.mkl._mkl_linear.default if mkl_packing_available() else None


def packing_backend() -> str:
    """"mkl" or "onednn": who multiplies packed Linear layers here (see the module docstring).

    ``SEQMAP_PACKED_LINEAR`` names one; unset, MKL on Intel CPUs where this torch has it, else oneDNN.
    """
    chosen = os.environ.get(BACKEND_VARIABLE, "").strip().lower()
    if chosen and chosen not in BACKENDS:
        raise ValueError(f"{BACKEND_VARIABLE}={chosen!r} is not a packed-Linear backend; "
                         f"use one of {', '.join(BACKENDS)} or unset it")
    if chosen == "onednn":
        return "onednn"
    if not mkl_packing_available():
        if chosen == "mkl":
            raise ValueError(f"{BACKEND_VARIABLE}=mkl, but this torch has no MKL packed sgemm; "
                             "use onednn or unset it")
        return "onednn"
    return "mkl" if chosen == "mkl" or cpu_vendor() == "GenuineIntel" else "onednn"


class PackedLinear(nn.Linear):
    """An ``nn.Linear``'s parameters, multiplied through packed copies of the weight at inference.

    A subclass of ``nn.Linear`` so that code asking "is this a Linear?" still gets yes. ``backend``:
    "mkl" or "onednn" (default: ``packing_backend()``, this CPU's choice).
    """

    def __init__(self, linear: nn.Linear, backend: str | None = None):
        nn.Module.__init__(self)  # not nn.Linear.__init__: the parameters are linear's own, not new ones
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight  # the same Parameter objects: state dict and ties unchanged
        self.bias = linear.bias
        self._packs: dict[tuple[int, int], _Pack] = {}  # oneDNN: one per slice [start, stop)
        self._mkl_packs: OrderedDict[tuple[int, int, int], _Pack] = OrderedDict()  # (start, stop, rows)
        self._calls: dict[tuple[int, int, int], int] = {}  # calls per (start, stop, rows) not packed for MKL yet
        self._mkl = (backend or packing_backend()) == "mkl"

    def train(self, mode: bool = True) -> PackedLinear:
        """Switching modes drops the packs: an optimizer that updates weights without bumping their version
        counter (fused AdamW) would otherwise leave a pack stale for the next evaluation."""
        self._drop_packs()
        return super().train(mode)

    def _drop_packs(self) -> None:
        self._packs, self._mkl_packs, self._calls = {}, OrderedDict(), {}

    def __getstate__(self) -> dict:
        """Copies and pickles leave the packs behind (oneDNN's opaque tensors cannot be copied); they re-pack."""
        state = self.__dict__.copy()
        state.update(_packs={}, _mkl_packs=OrderedDict(), _calls={})
        return state

    def _pack(self, start: int, stop: int, weight: Tensor, bias: Tensor | None) -> _Pack:
        """oneDNN's pack of rows [start, stop) of ``weight``/``bias`` (this layer's own), packed again once
        they change."""
        versions = _versions(weight, bias)
        pack = self._packs.get((start, stop))
        if pack is None or pack.versions != versions:
            packed = torch.ops.mkldnn._reorder_linear_weight(weight[start:stop].detach().contiguous())
            pack = self._packs[(start, stop)] = _Pack(versions, packed,
                                                      None if bias is None else bias[start:stop].detach())
        return pack

    def _mkl_pack(self, start: int, stop: int, rows: int, weight: Tensor, bias: Tensor | None) -> _Pack | None:
        """MKL's pack of rows [start, stop) for ``rows`` input rows; None until that row count has been
        called ``MKL_AFTER_CALLS`` times (see the module docstring)."""
        key = (start, stop, rows)
        versions = _versions(weight, bias)
        pack = self._mkl_packs.get(key)
        if pack is not None and pack.versions == versions:
            self._mkl_packs.move_to_end(key)
            return pack
        calls = self._calls[key] = self._calls.get(key, 0) + 1
        if calls < MKL_AFTER_CALLS:
            if len(self._calls) > 16 * MKL_ROW_COUNTS:  # many row counts, each seen a few times: forget them
                self._calls = {key: calls}
            return None
        del self._calls[key]
        plain = weight[start:stop].detach().contiguous()  # _mkl_linear keeps it for other row counts
        pack = self._mkl_packs[key] = _Pack(versions, torch.ops.mkl._mkl_reorder_linear_weight(plain, rows),
                                            None if bias is None else bias[start:stop].detach().contiguous(),
                                            plain)
        same_slice = [k for k in self._mkl_packs if k[:2] == key[:2]]  # least recently used first
        for old in same_slice[:-MKL_ROW_COUNTS]:
            del self._mkl_packs[old]
        return pack

    def project(self, x: Tensor, start: int = 0, stop: int | None = None, *, relu: bool = False) -> Tensor:
        """x (..., in) -> (..., stop - start): the outputs of rows [start, stop) of the weight.

        ``relu``: followed by a ReLU (oneDNN applies it as it writes the product, in one pass).
        """
        if stop is None:
            stop = self.out_features
        params = self._parameters  # read once: each ``self.weight`` goes through nn.Module.__getattr__
        weight, bias = params["weight"], params.get("bias")  # a bias of None is a plain attribute, not in there
        if (torch.is_grad_enabled() and (weight.requires_grad or x.requires_grad)) \
                or not x.is_cpu or x.dtype != torch.float32 or weight.dtype != torch.float32:
            return _plain(x, weight, bias, start, stop, relu)
        if self._mkl:
            rows = x.numel() // x.shape[-1] if x.dim() else 0
            if 0 < rows <= PLAIN_MAX_ROWS:
                return _plain(x, weight, bias, start, stop, relu)
            if PLAIN_MAX_ROWS < rows <= MKL_MAX_ROWS \
                    and (pack := self._mkl_pack(start, stop, rows, weight, bias)) is not None:
                y = _MKL_LINEAR(x, pack.weight, pack.plain, pack.bias, rows)
                return y.relu_() if relu else y
        pack = self._pack(start, stop, weight, bias)
        return _ONEDNN_LINEAR(x, pack.weight, pack.bias, "relu" if relu else "none", [], "")

    def forward(self, x: Tensor) -> Tensor:
        return self.project(x)


def _versions(weight: Tensor, bias: Tensor | None) -> tuple[int, int]:
    """The version counters of a weight and bias: in-place changes (``load_state_dict``) bump them."""
    return weight._version, -1 if bias is None else bias._version


def _plain(x: Tensor, weight: Tensor, bias: Tensor | None, start: int, stop: int, relu: bool) -> Tensor:
    """Rows [start, stop) of ``F.linear`` (MKL's sgemm on the weight as it is), then ReLU if asked."""
    if (start, stop) != (0, weight.size(0)):
        weight, bias = weight[start:stop], None if bias is None else bias[start:stop]
    y = F.linear(x, weight, bias)
    return F.relu(y) if relu else y


class _Pack(NamedTuple):
    versions: tuple[int, int]  # the weight's and bias's version counters when packed
    weight: Tensor  # rows [start, stop) in oneDNN's or MKL's layout
    bias: Tensor | None
    plain: Tensor | None = None  # MKL: rows [start, stop) as they are, contiguous


def linear_rows(linear: nn.Module, x: Tensor, start: int, stop: int) -> Tensor:
    """Output rows [start, stop) of ``linear`` (an nn.Linear or PackedLinear) applied to x, without the others."""
    if isinstance(linear, PackedLinear):
        return linear.project(x, start, stop)
    return _plain(x, linear.weight, linear.bias, start, stop, relu=False)


def linear_relu(linear: nn.Module, x: Tensor) -> Tensor:
    """relu(linear(x)), in one pass when ``linear`` is a PackedLinear."""
    return linear.project(x, relu=True) if isinstance(linear, PackedLinear) else F.relu(linear(x))


def pack_linears(model: nn.Module, backend: str | None = None) -> nn.Module:
    """``model`` with each float ``nn.Linear`` replaced (in place) by a ``PackedLinear``; unchanged where
    packing is not available. For inference: training through it falls back to ``F.linear``.
    ``backend``: "mkl" or "onednn" (default: ``packing_backend()``)."""
    if not packing_available():
        return model
    chosen = backend or packing_backend()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.dtype == torch.float32:
                setattr(parent, name, PackedLinear(child, chosen))
    return model
