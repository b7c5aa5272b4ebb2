"""Training speed on one CUDA GPU: seqmap's Transformer-base step vs Hugging Face MarianMTModel, same shape.

    python bench/train_gpu.py                          # bf16 autocast, ~25,000-target-token batches, both
    python bench/train_gpu.py --precision bf16,fp32    # also in float32
    python bench/train_gpu.py --impls seqmap --json out.json
    python bench/train_gpu.py --device cpu --quick     # smoke test on the CPU: a tiny shape, seconds; not a result

The shape is Transformer-base (Vaswani et al. 2017, ``configs/wmt14_en_de_transformer_base.yaml``): 6 + 6
layers, d_model 512, 8 heads, feed-forward 2048 (ReLU), one joint vocabulary of 32,000 shared by source,
target and the tied output layer, sinusoidal positions, dropout 0.1, label smoothing 0.1. Both models are
built as ``bench/train.py`` builds them (its ``build_seqmap`` and ``Marian``, at this shape): post-LayerNorm
and no dropout inside the feed-forward, Marian's defaults (the recipe's config trains pre-LN with that
dropout; the matmuls are the same).

* seqmap: ``build_model`` and the loss ``seqmap train`` computes (``seqmap.training.trainer.Trainer``): under
  autocast the logits, then ``label_smoothed_nll`` (its softmax in float32); in float32 ``output_nll`` (the
  output layer and the loss in one chunked pass).
* marian: ``MarianMTModel`` from a ``MarianConfig`` of the same shape (its default attention, sdpa) and
  ``F.cross_entropy(..., label_smoothing=0.1)``.

A step is what the trainer does per batch: forward and loss under ``torch.autocast`` (bf16; none for fp32),
backward, gradient clipping at 1.0, the optimiser ``seqmap train`` builds (``make_optimizer``: fused AdamW,
betas 0.9/0.98), zeroing the gradients. As ``seqmap train`` does on a GPU, cuDNN's attention kernel is taken out
of torch's choice for the whole process (``avoid_cudnn_attention``), so for both.

Batches: a seeded corpus of pairs with WMT-like lengths in subword tokens (target log-normal around 26,
source the target's times a log-normal ratio around 1, both clipped to 10..60), random ids, cut as ``seqmap
train`` cuts its data (``token_budget_batches``: length-bucketed, each side's padded size at most
``--tokens``), so padding is low. The first ``--warmup`` + ``--steps`` batches of the shuffled plan are
used; at each step every implementation trains on the same batch, in an order that rotates.
``torch.cuda.synchronize()`` brackets each timed step.

Reported per implementation: real target tokens per second (EOS counted, padding not) over the timed
steps, the median step in ms, peak GPU memory (the most allocated during its steps, less what the other
implementations hold: their weights and optimiser states), and MFU = the steps' matmul FLOPs
(``bench/train.py``'s ``step_flops`` on each padded batch) / their time / a peak, against two peaks: the
datasheet's dense figure for the GPU (``SPEC_PEAKS``: bf16 tensor-core for bf16, fp32 without tensor
cores for fp32; none for a GPU not in the table or a CPU) and a large ``torch.mm`` measured in this run,
in the step's dtype. fp32 is torch's default float32 matmul (no TF32; ``float32_matmul`` in the rows says).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/train.py

import train  # noqa: E402  (bench/train.py: the two builders and step_flops)
from machine import cpu_name  # noqa: E402

from seqmap.config import TrainConfig  # noqa: E402
from seqmap.data.batching import collate_pairs  # noqa: E402
from seqmap.data.samplers import token_budget_batches  # noqa: E402
from seqmap.data.tokenizers import PAD  # noqa: E402
from seqmap.nn.attention import CUDNN_ATTENTION_VARIABLE, avoid_cudnn_attention  # noqa: E402
from seqmap.training.loss import label_smoothed_nll, output_nll  # noqa: E402
from seqmap.training.trainer import autocast_dtype, make_optimizer  # noqa: E402

SHAPES = {"base": dict(d_model=512, n_heads=8, d_ff=2048, layers=6, vocab=32000, dropout=0.1),
          "quick": dict(d_model=64, n_heads=2, d_ff=128, layers=2, vocab=1000, dropout=0.1)}
SMOOTHING, CLIP, LR, BETAS = 0.1, 1.0, 7e-4, [0.9, 0.98]
MIN_LEN, MAX_LEN = 10, 60  # subword tokens per sentence, each side

# (fragment of torch.cuda.get_device_name(), dense bf16 tensor-core FLOP/s, fp32 FLOP/s without tensor cores),
# from NVIDIA's datasheets; the first fragment found in the name wins (so "H100 PCIe" before "H100")
SPEC_PEAKS = [
    ("H200 NVL", 835e12, 60e12), ("H200", 989e12, 67e12), ("H100 PCIe", 756e12, 51e12),
    ("H100 NVL", 835e12, 60e12), ("H100", 989e12, 67e12), ("A100", 312e12, 19.5e12),
    ("L40S", 362e12, 91.6e12), ("L4", 121e12, 30.3e12),
]


def spec_peak(device: torch.device, dtype: torch.dtype) -> float | None:
    """The datasheet's dense peak of this GPU in ``dtype`` (FLOP/s), or None (a CPU, a GPU not in SPEC_PEAKS)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device).lower()
    for fragment, bf16, fp32 in SPEC_PEAKS:
        if fragment.lower() in name:
            return bf16 if dtype == torch.bfloat16 else fp32
    return None


def matmul_peak(device: torch.device, dtype: torch.dtype, sizes: tuple[int, ...], inner: int = 5) -> tuple[float, int]:
    """Best FLOP/s of square ``torch.mm`` in ``dtype`` over ``sizes`` (``inner`` products per timing), and its size."""
    best, best_n = 0.0, 0
    for n in sizes:
        a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
        torch.mm(a, b)
        for _ in range(3):
            sync(device)
            start = time.perf_counter()
            for _ in range(inner):
                torch.mm(a, b)
            sync(device)
            rate = inner * 2 * n**3 / (time.perf_counter() - start)
            if rate > best:
                best, best_n = rate, n
        del a, b
    return best, best_n


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- batches ---------------------------------------------------------------------------------------------


def pair_lengths(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) lengths of ``n`` WMT-like pairs in subword tokens, clipped to MIN_LEN..MAX_LEN."""
    rng = np.random.default_rng(seed)
    tgt = np.exp(rng.normal(math.log(26), 0.45, n))
    src = tgt * np.exp(rng.normal(0.0, 0.15, n))
    return (np.clip(np.rint(src), MIN_LEN, MAX_LEN).astype(np.int64),
            np.clip(np.rint(tgt), MIN_LEN, MAX_LEN).astype(np.int64))


def make_batches(count: int, tokens: int, vocab: int, seed: int) -> list:
    """``count`` token-budget batches of random ids (``seqmap.data.batching.Batch``, on the CPU)."""
    n = max(64, 2 * count * tokens // 20)  # enough pairs for ``count`` batches at about 20 tokens a pair
    src_len, tgt_len = pair_lengths(n, seed)
    plan = token_budget_batches(src_len, tgt_len, tokens, shuffle=True, seed=seed)
    if len(plan) < count:
        raise SystemExit(f"only {len(plan)} batches of {tokens} tokens from {n} pairs; lower --steps or --warmup")
    g = torch.Generator().manual_seed(seed)
    batches = []
    for indices in plan[:count]:
        pairs = [(torch.randint(4, vocab, (int(src_len[i]),), generator=g).tolist(),
                  torch.randint(4, vocab, (int(tgt_len[i]),), generator=g).tolist()) for i in indices]
        batches.append(collate_pairs(pairs))
    return batches


# -- the implementations ------------------------------------------------------------------------------------


class Trainee:
    """One implementation with its optimiser: ``step`` is a whole training step on one batch."""

    def __init__(self, name: str, shape: dict, device: torch.device, amp: torch.dtype | None, seed: int):
        torch.manual_seed(seed)
        self.name, self.device, self.amp = name, device, amp
        # seqmap train's rule (Trainer.fused_output): the chunked output loss in float32, logits under autocast
        self.fused = name == "seqmap" and amp is None
        model = train.build_seqmap(features=self.fused, shape=shape) if name == "seqmap" else train.Marian(shape)
        self.model = model.to(device).train()
        self.params = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        self.opt = make_optimizer(self.model, TrainConfig(lr=LR, betas=BETAS), device)
        self.times: list[float] = []
        self.losses: list[float] = []
        self.peak_bytes = 0
        self.error: str | None = None

    def step(self, src: Tensor, src_pad: Tensor, tgt_in: Tensor, tgt_out: Tensor, n_tokens: int) -> float:
        with torch.autocast(self.device.type, dtype=self.amp, enabled=self.amp is not None):
            out = self.model(src, src_pad, tgt_in)
            if self.fused:  # ``out``: the final features
                loss = output_nll(out, self.model.model.output_layer, tgt_out, PAD, SMOOTHING)[0]
            elif self.name == "seqmap":
                loss = label_smoothed_nll(out, tgt_out, PAD, SMOOTHING)[0]
            else:
                loss = F.cross_entropy(out.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD,
                                       label_smoothing=SMOOTHING, reduction="sum")
        loss = loss / n_tokens
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), CLIP)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.item()

    def resident_bytes(self) -> int:
        """What it holds between steps: weights and optimiser states."""
        tensors = [*self.model.parameters(), *self.model.buffers(),
                   *(v for state in self.opt.state.values() for v in state.values() if torch.is_tensor(v))]
        return sum(t.numel() * t.element_size() for t in tensors)

    def release(self) -> None:
        """Drop the model, its gradients and optimiser states (after its rows, or when it ran out of memory)."""
        if self.opt is not None:
            self.opt.zero_grad(set_to_none=True)
        self.model, self.opt = None, None


def round_robin(trainees: list[Trainee], batches: list, warmup: int, device: torch.device) -> None:
    """Every trainee steps on every batch, its order rotating; the steps after ``warmup`` are timed.

    A trainee that runs out of GPU memory is left out of the rest, with its error recorded.
    """
    for i, batch in enumerate(batches):
        b = batch.to(device)
        args = (b.src, ~b.src_mask, b.tgt_in, b.tgt_out, batch.n_tokens)
        live = [t for t in trainees if t.error is None]
        turn = i % max(1, len(live))
        for t in live[turn:] + live[:turn]:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            sync(device)
            start = time.perf_counter()
            try:
                loss = t.step(*args)
            except torch.OutOfMemoryError:
                t.error = f"out of GPU memory at step {i + 1} (batch {tuple(b.tgt_out.shape)}); lower --tokens"
                print(f"# {t.name}: {t.error}", flush=True)
                t.release()
                torch.cuda.empty_cache()
                continue
            sync(device)
            seconds = time.perf_counter() - start
            t.losses.append(loss)
            if i >= warmup:
                t.times.append(seconds)
                if device.type == "cuda":
                    others = sum(o.resident_bytes() for o in trainees if o is not t and o.error is None)
                    t.peak_bytes = max(t.peak_bytes, torch.cuda.max_memory_allocated(device) - others)


def measure(args, shape: dict, precision: str, device: torch.device, names: list[str]) -> list[dict]:
    amp = autocast_dtype(precision, device)
    dtype = amp or torch.float32
    sizes = (256, 512) if args.quick else (1024, 2048) if device.type == "cpu" else (4096, 8192)
    measured, measured_n = matmul_peak(device, dtype, sizes)
    spec = spec_peak(device, dtype)
    batches = make_batches(args.warmup + args.steps, args.tokens, shape["vocab"], args.seed)
    timed = batches[args.warmup:]
    flops = sum(train.step_flops(b.tgt_out.size(0), b.src.size(1), b.tgt_out.size(1), shape) for b in timed)
    real = sum(b.n_tokens for b in timed)
    padded = sum(b.tgt_out.numel() for b in timed)
    trainees = [Trainee(name, shape, device, amp, args.seed) for name in names]
    round_robin(trainees, batches, args.warmup, device)
    rows = []
    for t in trainees:
        row = dict(bench="train_gpu", impl=t.name, precision="bf16" if amp == torch.bfloat16 else "fp32",
                   params=t.params, shape=shape, tokens=args.tokens, warmup=args.warmup, steps=len(timed),
                   batches=[list(b.tgt_out.shape[:1]) + [b.src.size(1), b.tgt_out.size(1)] for b in timed],
                   real_tgt_tokens=real, padded_tgt_tokens=padded, flops=flops,
                   peak_measured_flop_s=measured, peak_measured_size=measured_n, peak_spec_flop_s=spec,
                   losses=t.losses, error=t.error)
        if t.error is None:
            seconds = sum(t.times)
            row.update(step_ms=statistics.median(t.times) * 1e3, tok_s=real / seconds, tflop_s=flops / seconds / 1e12,
                       mfu_measured=flops / seconds / measured, mfu_spec=flops / seconds / spec if spec else None,
                       peak_mem_gb=t.peak_bytes / 1e9 if device.type == "cuda" else None, samples_s=t.times)
        rows.append(row)
        t.release()
    del trainees
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def table(rows: list[dict]) -> str:
    r0 = rows[0]
    spec = "datasheet peak not known for this device" if r0["peak_spec_flop_s"] is None else \
        f"datasheet peak {r0['peak_spec_flop_s'] / 1e12:.1f} TFLOP/s"
    out = [f"{r0['precision']}: {r0['steps']} timed steps of about {r0['real_tgt_tokens'] // max(1, r0['steps']):,} "
           f"real target tokens ({1 - r0['real_tgt_tokens'] / r0['padded_tgt_tokens']:.1%} padding); "
           f"measured torch.mm peak {r0['peak_measured_flop_s'] / 1e12:.1f} TFLOP/s "
           f"({r0['peak_measured_size']}^2); {spec}",
           "| impl | params | step ms | tgt tok/s | TFLOP/s | MFU (measured mm) | MFU (datasheet) | peak mem GB "
           "| loss first -> last |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if r["error"]:
            out.append(f"| {r['impl']} | {r['params'] / 1e6:.1f}M | {r['error']} |||||||")
            continue
        spec_mfu = "n/a" if r["mfu_spec"] is None else f"{r['mfu_spec']:.1%}"
        mem = "n/a" if r["peak_mem_gb"] is None else f"{r['peak_mem_gb']:.1f}"
        out.append(f"| {r['impl']} | {r['params'] / 1e6:.1f}M | {r['step_ms']:.1f} | {r['tok_s']:,.0f} | "
                   f"{r['tflop_s']:.2f} | {r['mfu_measured']:.1%} | {spec_mfu} | {mem} | "
                   f"{r['losses'][0]:.3f} -> {r['losses'][-1]:.3f} |")
    done = {r["impl"]: r["tok_s"] for r in rows if not r["error"]}
    if "seqmap" in done and "marian" in done:
        out.append(f"seqmap / marian target tokens per second: {done['seqmap'] / done['marian']:.2f}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impls", default="seqmap,marian", help="comma-separated subset of seqmap,marian")
    p.add_argument("--precision", default="bf16", help="bf16 (autocast) or fp32, or both: bf16,fp32 "
                                                      "(on a CPU seqmap trains in fp32: bf16 runs as fp32)")
    p.add_argument("--tokens", type=int, default=25000, help="target tokens per batch (padded, as train.max_tokens)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per implementation")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (also new batch shapes)")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (with --quick: a smoke test)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="smoke test: a tiny shape, small batches, 2 timed steps")
    p.add_argument("--json", type=Path, help="write the rows to this file as JSON")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.impls.split(",") if n.strip()]
    unknown = sorted(set(names) - {"seqmap", "marian"})
    if unknown or not names:
        p.error(f"--impls {args.impls!r}: choose from seqmap,marian")
    precisions = [x.strip() for x in args.precision.split(",") if x.strip()]
    if not precisions or set(precisions) - {"bf16", "fp32"}:
        p.error(f"--precision {args.precision!r}: give bf16, fp32 or bf16,fp32")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error(f"--device {args.device}: CUDA is not available here; run on a GPU, or --device cpu --quick "
                "for a smoke test")
    if args.quick:
        args.tokens, args.steps, args.warmup = 600, 2, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    if "marian" in names:
        try:
            import transformers
        except ImportError:
            print("# transformers is not installed (pip install transformers): timing seqmap alone", flush=True)
            names.remove("marian")
        else:
            transformers.utils.logging.disable_progress_bar()
    if not names:
        p.error("--impls marian needs transformers: pip install transformers")
    if device.type == "cpu" and "bf16" in precisions:
        print("# on a CPU seqmap trains in float32: --precision bf16 runs as fp32", flush=True)
        precisions = list(dict.fromkeys("fp32" for _ in precisions))
    shape = SHAPES["quick" if args.quick else "base"]
    if device.type == "cuda":
        if device.index is not None:
            torch.cuda.set_device(device)
        avoid_cudnn_attention()  # as seqmap train does on a GPU (process-wide: Marian's attention too)
        cudnn = "on" if torch.backends.cuda.cudnn_sdp_enabled() else "off"
        where = (f"{torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}, cuDNN attention {cudnn} "
                 f"({CUDNN_ATTENTION_VARIABLE}=1 keeps it)")
    else:
        threads = torch.get_num_threads()
        where = f"{cpu_name()}, {threads} thread{'s' if threads > 1 else ''}"
    print(f"# {where}; torch {torch.__version__}; shape {shape}; batches of {args.tokens} tokens"
          f"{'; --quick: a smoke test, not a result' if args.quick else ''}", flush=True)
    rows = []
    for precision in precisions:
        measured = measure(args, shape, precision, device, names)
        print(table(measured), flush=True)
        rows += measured
    meta = dict(device=where, torch=torch.__version__, float32_matmul=torch.get_float32_matmul_precision(),
                quick=args.quick)
    if args.json:
        args.json.write_text(json.dumps([{**meta, **r} for r in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
