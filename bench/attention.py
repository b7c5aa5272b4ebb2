"""Forward + backward time of multi-head self-attention: seqmap vs torch.nn.MultiheadAttention vs a tutorial version.

    python bench/attention.py                 # full table (B=32, H=8, Dh=64, T in 64..512, causal and not)
    python bench/attention.py --quick         # smoke test: two short lengths, few repeats
    python bench/attention.py --json out.json # also write the rows as JSON

The three implementations share the same weights and are checked to agree (outputs and input
gradients to 1e-4) before anything is timed. What each one receives:

- seqmap: ``MultiHeadAttention.self_attention(x, causal=causal, need_weights=False)``, no mask tensor.
- torch: ``nn.MultiheadAttention(batch_first=True)(x, x, x, need_weights=False)``; when causal, also
  ``attn_mask=~causal_mask(T)`` (boolean, True = *ignore* in torch's convention) and ``is_causal=True``.
- tutorial: the Annotated Transformer's ``MultiHeadedAttention`` (four Linear layers, q @ k^T / sqrt(Dh),
  ``masked_fill(mask == 0, -1e9)``, softmax, @ v), given its ``subsequent_mask`` when causal, else no mask.

All in training mode with dropout 0 (so every path keeps what backward needs), fp32, CPU. One timed call
is ``torch.autograd.grad(f(x), [x, *params], grad_out)``: the forward pass plus the gradients of the input
and of every weight. After two warm-up calls, each implementation gets ``--repeats`` samples (each sample
repeats the call for at least ``--min-sample-s`` seconds); samples are taken round-robin across the three
so that background load hits all of them alike, and the median is reported.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.utils.benchmark import Timer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/machine.py

from machine import cpu_name  # noqa: E402

from seqmap.nn.attention import causal_mask  # noqa: E402
from seqmap.nn.multihead import MultiHeadAttention  # noqa: E402

# -- the tutorial implementation (harvardnlp/annotated-transformer, without dropout) ---------------


def tutorial_attention(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    return torch.matmul(p_attn, value), p_attn


class TutorialMHA(nn.Module):
    def __init__(self, h: int, d_model: int):
        super().__init__()
        self.d_k, self.h = d_model // h, h
        self.linears = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(4)])

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)  # same mask for all heads
        nbatches = query.size(0)
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value), strict=False)
        ]
        x, _ = tutorial_attention(query, key, value, mask=mask)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)


def subsequent_mask(size: int) -> Tensor:
    """(1, T, T), True where attending is allowed (the tutorial's convention, same as seqmap's)."""
    return torch.triu(torch.ones(1, size, size), diagonal=1).type(torch.uint8) == 0


# -- the three contenders, same weights ----------------------------------------------------------------


def build(d_model: int, n_heads: int):
    ours = MultiHeadAttention(d_model, n_heads, dropout=0.0)
    ref = nn.MultiheadAttention(d_model, n_heads, dropout=0.0, batch_first=True)
    tut = TutorialMHA(n_heads, d_model)
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.in_proj_bias.copy_(ours.in_proj.bias)
        ref.out_proj.load_state_dict(ours.out_proj.state_dict())
        for lin, w, b in zip(tut.linears[:3], ours.in_proj.weight.chunk(3), ours.in_proj.bias.chunk(3), strict=True):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        tut.linears[3].load_state_dict(ours.out_proj.state_dict())
    return {"seqmap": ours.train(), "mha": ref.train(), "tutorial": tut.train()}


def forward_fn(name: str, module: nn.Module, t: int, causal: bool):
    """x (B, T, D) -> (B, T, D), with what a careful user would pass; masks are built once, outside the timing."""
    if name == "seqmap":
        return lambda x: module.self_attention(x, causal=causal, need_weights=False)[0]
    if name == "mha":
        if causal:
            ignore = ~causal_mask(t)  # torch: True = may NOT attend
            return lambda x: module(x, x, x, attn_mask=ignore, is_causal=True, need_weights=False)[0]
        return lambda x: module(x, x, x, need_weights=False)[0]
    mask = subsequent_mask(t) if causal else None
    return lambda x: module(x, x, x, mask)


def step_fn(fn, module: nn.Module):
    """One timed unit: forward, then gradients of the input and of every parameter."""
    params = list(module.parameters())

    def step(x: Tensor, grad_out: Tensor):
        return torch.autograd.grad(fn(x), [x, *params], grad_out)

    return step


def check_agreement(modules, batch: int, t: int, d_model: int, tol: float = 1e-4) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, t, d_model, generator=g, requires_grad=True)
    grad_out = torch.randn(batch, t, d_model, generator=g)
    for causal in (False, True):
        results = {}
        for name, module in modules.items():
            fn = forward_fn(name, module, t, causal)
            out = fn(x)
            (gx,) = torch.autograd.grad(out, [x], grad_out)
            results[name] = (out.detach(), gx)
        for name in ("mha", "tutorial"):
            for what, a, b in zip(("output", "input gradient"), results["seqmap"], results[name], strict=True):
                err = (a - b).abs().max().item()
                if err > tol:
                    raise SystemExit(f"seqmap and {name} disagree (causal={causal}, {what}): max abs diff {err:.2e}")
    print(f"check: outputs and input gradients agree to {tol:g} (B={batch}, T={t}, causal and not)")


# -- timing --------------------------------------------------------------------------------------------------


def time_length(modules, batch, t, d_model, causal, repeats, threads, min_sample_s):
    """Median ms of one forward+backward for each implementation, interleaved round-robin."""
    x = torch.randn(batch, t, d_model, requires_grad=True)
    grad_out = torch.randn(batch, t, d_model)
    timers = {}
    for name, module in modules.items():
        step = step_fn(forward_fn(name, module, t, causal), module)
        for _ in range(2):  # warm-up: allocator, kernel selection, first-touch of pages
            step(x, grad_out)
        timers[name] = Timer("step(x, g)", globals={"step": step, "x": x, "g": grad_out}, num_threads=threads)
    number = {name: max(1, math.ceil(min_sample_s / timer.timeit(1).median)) for name, timer in timers.items()}
    samples = {name: [] for name in modules}
    for _ in range(repeats):
        for name, timer in timers.items():
            samples[name].append(timer.timeit(number[name]).median)
    return {name: 1e3 * statistics.median(s) for name, s in samples.items()}




def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7, help="timed samples per cell; the median is reported")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-sample-s", type=float, default=0.2,
                        help="each timed sample repeats the call until it lasts at least this long")
    parser.add_argument("--quick", action="store_true", help="smoke test: lengths 32 and 64, batch 4, 3 short repeats")
    parser.add_argument("--json", type=Path, help="also write the rows to this file as a JSON list; "
                        "ratio_vs_X = X ms / seqmap ms (above 1: seqmap is faster)")
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths, args.batch, args.repeats, args.min_sample_s = [32, 64], 4, 3, 0.02

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    d_model = args.heads * args.head_dim
    modules = build(d_model, args.heads)
    check_agreement(modules, batch=2, t=min(args.lengths), d_model=d_model)
    print(f"torch {torch.__version__}, {cpu_name()} ({os.cpu_count()} cores), {args.threads} threads, "
          f"fp32, B={args.batch}, H={args.heads}, Dh={args.head_dim} (D={d_model}), median of {args.repeats}")

    rows = []
    header = f"{'length':>6} {'causal':>6} {'seqmap ms':>10} {'nn.MHA ms':>10} {'tutorial ms':>11} " \
             f"{'MHA/seqmap':>10} {'tutorial/seqmap':>15}"
    print(header)
    for t in args.lengths:
        for causal in (False, True):
            ms = time_length(modules, args.batch, t, d_model, causal, args.repeats, args.threads, args.min_sample_s)
            row = {
                "length": t, "causal": causal,
                "seqmap_ms": round(ms["seqmap"], 2), "mha_ms": round(ms["mha"], 2),
                "tutorial_ms": round(ms["tutorial"], 2),
                "ratio_vs_mha": round(ms["mha"] / ms["seqmap"], 3),
                "ratio_vs_tutorial": round(ms["tutorial"] / ms["seqmap"], 3),
            }
            rows.append(row)
            print(f"{t:>6} {str(causal):>6} {row['seqmap_ms']:>10.1f} {row['mha_ms']:>10.1f} "
                  f"{row['tutorial_ms']:>11.1f} {row['ratio_vs_mha']:>10.2f} {row['ratio_vs_tutorial']:>15.2f}",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
