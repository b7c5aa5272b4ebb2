"""The parts of a decoding step, each against the way seqmap did it before issue 18's third part.

    python bench/decode_parts.py                 # the table
    python bench/decode_parts.py --json out.json # also write the rows as JSON

Shapes are bench/decode.py's model (D=256, H=4, F=1024, V=8000) at its batch: 64 sentences (greedy:
64 rows; beam-5: 320 rows), source length 30, a history of 32 tokens. Each row times one operation
both ways, alternating, and reports the median of ``--repeats`` runs of ``--inner`` calls:

- linear: ``F.linear`` (MKL's sgemm) against ``seqmap.nn.packed.PackedLinear`` (oneDNN, packed weight);
- linear, one row: oneDNN's pack and MKL's pack each against ``F.linear`` (``PackedLinear``'s path for up to
  ``PLAIN_MAX_ROWS`` rows on Intel CPUs), where this torch has MKL's packed sgemm;
- linear, packed: oneDNN's pack against MKL's (``PackedLinear``'s path on Intel CPUs, up to 128 rows),
  at 8 and 64 rows, where this torch has MKL's packed sgemm;
- attention: PyTorch's fused ``scaled_dot_product_attention`` against the explicit path
  (``seqmap.nn.attention``) for decoding-step shapes;
- attention over a cache: the whole storage (``KVCache.whole``, the path on CPUs other than Intel's)
  against the slots in use (Intel's), greedy's 64 rows at 33 of 64 and 65 of 128 slots;
- best token / best 2k candidates: ``Tensor.max`` and ``topk`` over the expanded scores against
  ``seqmap.decoding.select``;
- beam-5 self-attention: each beam reading its own copy of the history (the explicit path over the
  cache, 48 of 64 slots in use) against ``shared_prefix_attention`` (the 40 slots the 5 beams of a
  sentence share, read once per sentence from ``KVCache.prefix``; 8 slots of their own);
- cache reorder: gathering every row's whole history against ``KVCache.reorder``'s changed suffixes,
  on beam-5 reorders whose rows share all but their last 3 slots (about 2 changed slots per row).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_name  # noqa: E402

from seqmap.decoding.select import row_max, top_candidates  # noqa: E402
from seqmap.nn.attention import _explicit, _fused, shared_prefix_attention  # noqa: E402
from seqmap.nn.kv_cache import KVCache  # noqa: E402
from seqmap.nn.packed import MKL_AFTER_CALLS, PackedLinear, mkl_packing_available  # noqa: E402

D, H, F_DIM, V, DH = 256, 4, 1024, 8000, 64


def timed(before, after, repeats: int, inner: int) -> tuple[float, float]:
    """Median seconds per call of the two callables, sampled alternately."""
    samples = ([], [])
    for f in (before, after):
        f()
    for _ in range(repeats):
        for i, f in enumerate((before, after)):
            start = time.perf_counter()
            for _ in range(inner):
                f()
            samples[i].append((time.perf_counter() - start) / inner)
    return statistics.median(samples[0]), statistics.median(samples[1])


def linear_rows(rows: int):
    for k, n, what in ((D, 3 * D, "q|k|v"), (D, F_DIM, "feed-forward in"), (F_DIM, D, "feed-forward out"),
                       (D, V, "output projection")):
        linear = torch.nn.Linear(k, n)
        packed = PackedLinear(linear, "onednn")
        x = torch.randn(rows, k)
        yield (f"linear {what}, {rows} x {k} x {n}", lambda x=x, w=linear.weight, b=linear.bias: F.linear(x, w, b),
               lambda x=x, packed=packed: packed(x), "F.linear (MKL)", "PackedLinear (oneDNN)")


def packed_rows(rows: int):
    """oneDNN's pack against MKL's (made on a row count's MKL_AFTER_CALLS-th call: called that often first)."""
    if not mkl_packing_available():
        return
    for k, n, what in ((D, 3 * D, "q|k|v"), (D, D, "out"), (D, F_DIM, "feed-forward in"),
                       (F_DIM, D, "feed-forward out"), (D, V, "output projection")):
        linear = torch.nn.Linear(k, n)
        onednn, mkl = PackedLinear(linear, "onednn"), PackedLinear(linear, "mkl")
        x = torch.randn(rows, k)
        for _ in range(MKL_AFTER_CALLS):
            mkl(x)
        yield (f"linear packed {what}, {rows} x {k} x {n}", lambda x=x, p=onednn: p(x), lambda x=x, p=mkl: p(x),
               "PackedLinear (oneDNN)", "PackedLinear (MKL)")


def plain_rows(rows: int = 1):
    """A few rows (greedy for one sentence): oneDNN's pack and MKL's pack each against F.linear, which
    ``PackedLinear`` uses for up to ``PLAIN_MAX_ROWS`` rows with the MKL backend."""
    if not mkl_packing_available():
        return
    for k, n, what in ((D, 3 * D, "q|k|v"), (D, D, "out"), (D, F_DIM, "feed-forward in"),
                       (F_DIM, D, "feed-forward out"), (D, V, "output projection")):
        linear = torch.nn.Linear(k, n)
        x = torch.randn(rows, k)
        onednn = PackedLinear(linear, "onednn")
        mkl_pack = torch.ops.mkl._mkl_reorder_linear_weight(linear.weight, rows)

        def plain(x=x, w=linear.weight, b=linear.bias):
            return F.linear(x, w, b)

        yield (f"linear {what}, {rows} x {k} x {n}", lambda x=x, p=onednn: p(x), plain,
               "PackedLinear (oneDNN)", "F.linear (MKL)")
        yield (f"linear {what}, {rows} x {k} x {n}",
               lambda x=x, p=mkl_pack, w=linear.weight, b=linear.bias: torch.ops.mkl._mkl_linear(x, p, w, b, rows),
               plain, "MKL pack", "F.linear (MKL)")


def cache_read_rows(rows: int = 64):
    """One query per row over a cache: the whole storage (zeros and a -inf bias past the slots in use)
    against the slots in use (a view with a gap after each row's run)."""
    scale = DH**-0.5
    for used, capacity in ((33, 64), (65, 128)):
        q = torch.randn(rows, H, 1, DH)
        k, v = torch.randn(rows, H, capacity, DH), torch.randn(rows, H, capacity, DH)
        k[:, :, used:], v[:, :, used:] = 0.0, 0.0
        bias = torch.zeros(1, 1, 1, capacity)
        bias[..., used:] = float("-inf")
        yield (f"attention over a cache, B={rows}, {used} of {capacity} slots",
               lambda q=q, k=k, v=v, bias=bias: _explicit(q, k, v, None, bias, 0.0, scale),
               lambda q=q, k=k[:, :, :used], v=v[:, :, :used]: _explicit(q, k, v, None, None, 0.0, scale),
               "whole storage", "slots in use")


def attention_rows():
    for rows, t, s, what in ((64, 1, 33, "greedy self"), (64, 1, 30, "greedy cross"), (320, 1, 33, "beam-5 self"),
                             (64, 5, 30, "beam-5 cross, beams as queries"), (64, 30, 30, "encoder"),
                             (1, 1, 30, "one sentence, cross (keeps the fused kernel)")):
        q, k, v = torch.randn(rows, H, t, DH), torch.randn(rows, H, s, DH), torch.randn(rows, H, s, DH)
        scale = DH**-0.5
        yield (f"attention {what}, B={rows} T={t} S={s}",
               lambda q=q, k=k, v=v, scale=scale: _fused(q, k, v, None, None, False, 0.0, scale),
               lambda q=q, k=k, v=v, scale=scale: _explicit(q, k, v, None, None, 0.0, scale),
               "fused kernel", "explicit")


def selection_rows():
    log_probs = torch.log_softmax(torch.randn(64, V) * 3, dim=-1)
    yield "best token, 64 x 8000", (lambda: log_probs.max(dim=-1)), (lambda: row_max(log_probs)), "max", "row_max"
    beam_lp = torch.log_softmax(torch.randn(320, V) * 3, dim=-1)
    scores = torch.randn(64, 5)
    yield ("best 10 of 5 x 8000 candidates, 64 sentences",
           lambda: (scores[:, :, None] + beam_lp.view(64, 5, V)).view(64, -1).topk(10, dim=1),
           lambda: top_candidates(scores, beam_lp, 10), "expand + topk", "top_candidates")


def reorder_row(history: int = 32, sentences: int = 64, beams: int = 5):
    """Reorders whose rows share all but their last 1-3 slots within a sentence, as in bench/decode.py's search."""
    g = torch.Generator().manual_seed(0)
    rows = sentences * beams
    cache = KVCache()
    cache.append(torch.randn(rows, H, history, DH), torch.randn(rows, H, history, DH))
    block = torch.arange(rows) // beams * beams
    index = torch.randint(0, beams, (rows,), generator=g) + block
    # the rows of a block share their first history - 3 slots, as after a search's earlier steps
    for store in (cache.lineage,):
        store[:, : history - 3] = store[block, : history - 3]
    lineage = cache.lineage.clone()
    spare_k, spare_v = torch.empty_like(cache.k), torch.empty_like(cache.v)

    def whole():  # before: every row's history gathered into a second storage
        torch.index_select(cache.k.narrow(2, 0, history), 0, index, out=spare_k.narrow(2, 0, history))
        torch.index_select(cache.v.narrow(2, 0, history), 0, index, out=spare_v.narrow(2, 0, history))

    def suffixes():  # after; the lineage is reset each call, so every call makes the same copies
        cache.lineage.copy_(lineage)
        cache.reorder(index)

    def restore_only():
        cache.lineage.copy_(lineage)

    return (f"cache reorder, {rows} rows x {history} slots", whole, suffixes, "gather whole histories",
            "KVCache.reorder (suffixes)", restore_only)


def shared_prefix_row(sentences: int = 64, beams: int = 5, length: int = 48, shared: int = 40, capacity: int = 64):
    rows = sentences * beams
    q = torch.randn(rows, H, 1, DH)
    k, v = (torch.randn(rows, H, capacity, DH)[:, :, :length] for _ in range(2))  # views of a cache's storage
    prefix_k, prefix_v = (torch.randn(sentences, H, capacity, DH)[:, :, :shared] for _ in range(2))
    scale = DH**-0.5
    yield (f"attention beam-5 self, B={rows} S={length}, {shared} shared",
           lambda: _explicit(q, k, v, None, None, 0.0, scale),
           lambda: shared_prefix_attention(q, prefix_k, prefix_v, k[:, :, shared:], v[:, :, shared:]),
           "explicit, every beam", "shared_prefix_attention")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--inner", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}; {cpu_name()}, {args.threads} threads, fp32")
    print(f"{'operation':<58} {'before':>22} {'us':>8} {'after':>26} {'us':>8} {'speed-up':>9}")
    rows = []
    with torch.no_grad():
        cases = [*linear_rows(64), *linear_rows(320), *plain_rows(), *packed_rows(8), *packed_rows(64),
                 *attention_rows(),
                 *cache_read_rows(), *shared_prefix_row(), *selection_rows()]
        what, whole, suffixes, before_name, after_name, restore = reorder_row()
        baseline, _ = timed(restore, restore, args.repeats, args.inner)  # the copies that reset the cache
        before, after = timed(whole, suffixes, args.repeats, args.inner)
        timings = [timed(b, a, args.repeats, args.inner) for _, b, a, _, _ in cases]
        timings.append((before, max(after - baseline, 1e-9)))
        cases.append((what, whole, suffixes, before_name, after_name))
        for (name, _, _, b_name, a_name), (b, a) in zip(cases, timings, strict=True):
            rows.append({"operation": name, "before": b_name, "before_us": round(b * 1e6, 1), "after": a_name,
                         "after_us": round(a * 1e6, 1), "speedup": round(b / a, 2), "cpu": cpu_name(),
                         "threads": args.threads})
            print(f"{name:<58} {b_name:>22} {b * 1e6:>8.0f} {a_name:>26} {a * 1e6:>8.0f} {b / a:>8.2f}x")
    print("(cache reorder: resetting the lineage between calls is timed apart and subtracted)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
