"""One decoding choice of seqmap switched on and off in one process, on bench/decode.py's model.

    python bench/decode_switch.py pack         # oneDNN's packed Linear weights against MKL's (seqmap.nn.packed)
    python bench/decode_switch.py cache-reads  # the cache's whole storage against its slots in use
    python bench/decode_switch.py plain --sentences 1 2 3 --beams 1  # MKL packs against F.linear for a few rows
    python bench/decode_switch.py pack --sentences 64 8 1 --beams 1 5 --json out.json
    python bench/decode_switch.py cache-reads --isa avx2  # every library kept to AVX2 kernels (bench/decode.py --isa)
    python bench/decode_switch.py split --isa avx2 --beams 1  # the batch split across the cores, one thread each

Both settings decode the same sources with the same weights, alternately, ``--rounds`` times after
two warm-up calls each; the table gives each setting's median seconds per call and the median over
rounds of the ratio within a round ("paired": off / on, above 1: the second setting is faster), and
whether the two produced the same tokens. Where bench/decode.py compares runtimes in separate
processes, this isolates one change with everything else equal (threads, memory, the machine's drift).

- ``pack``: ``pack_linears(model, "onednn")`` against ``pack_linears(model, "mkl")`` (needs MKL's packed
  sgemm in this torch);
- ``cache-reads``: ``seqmap.nn.multihead.WHOLE_STORAGE_READS`` True against False;
- ``compile``: the decoder's forward (a decoding step) compiled by ``torch.compile`` (Inductor's CPU backend,
  dynamic shapes, frozen weights, which Inductor packs for oneDNN itself) against eager decoding with packed
  weights; the first call of each case compiles (and recompiles as the cache grows), before timing;
- ``split``: one call on ``--threads`` threads against the sentences split into ``--threads`` equal parts, each
  decoded in its own Python thread with one torch thread (the cores decode separate sentences instead of
  sharing each product; the GIL is free inside torch's operators);
- ``plain``: with MKL's packs, ``seqmap.nn.packed.PLAIN_MAX_ROWS`` 0 (every row count packed) against its
  default (up to that many rows through ``F.linear``); it changes only decoding steps of that few rows.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode import build_seqmap, make_sources, seqmap_decode  # noqa: E402
from machine import ISA_LIMITS, ISA_VARIABLE, check_isa, cpu_name, limit_isa  # noqa: E402

from seqmap.decoding.memory import keep_freed_memory  # noqa: E402
from seqmap.nn import multihead  # noqa: E402
from seqmap.nn import packed as packed_module  # noqa: E402
from seqmap.nn.packed import mkl_packing_available, pack_linears  # noqa: E402

SWITCHES = {"pack": ("oneDNN packs", "MKL packs"), "cache-reads": ("whole storage", "slots in use"),
            "plain": ("MKL packs", "F.linear"), "compile": ("eager, packed", "torch.compile"),
            "split": ("one call", "split by cores")}
PLAIN_MAX_ROWS = packed_module.PLAIN_MAX_ROWS  # the default the ``plain`` switch turns on


def settings(switch: str, model) -> list:
    """The two settings of ``switch``: each a callable that prepares and returns the model to decode with."""
    if switch in ("pack", "plain") and not mkl_packing_available():
        raise SystemExit(f"{switch}: this torch has no MKL packed sgemm")
    if switch == "pack":
        onednn, mkl = pack_linears(copy.deepcopy(model), "onednn"), pack_linears(copy.deepcopy(model), "mkl")
        return [lambda: onednn, lambda: mkl]
    if switch == "plain":
        mkl = pack_linears(model, "mkl")

        def rows(most: int):
            def prepare():
                packed_module.PLAIN_MAX_ROWS = most
                return mkl
            return prepare

        return [rows(0), rows(PLAIN_MAX_ROWS)]
    if switch == "compile":
        packed = pack_linears(copy.deepcopy(model))
        compiled = copy.deepcopy(model)  # plain nn.Linear layers: Inductor packs the weights itself (freezing)
        torch._inductor.config.freezing = True
        torch._dynamo.config.recompile_limit = 64  # each cache growth and beam reorder is a new guard: stay compiled
        compiled.decoder.forward = torch.compile(compiled.decoder.forward, dynamic=True)
        return [lambda: packed, lambda: compiled]
    packed = pack_linears(model)
    if switch == "split":
        return [lambda: packed, lambda: packed]  # the same model; ``split_decode`` is the second setting's call

    def reads(whole: bool):
        def prepare():
            multihead.WHOLE_STORAGE_READS = whole
            return packed
        return prepare

    return [reads(True), reads(False)]


def split_decode(model, src, mask, beam: int, new_tokens: int, parts: int) -> list:
    """``seqmap_decode`` of ``parts`` equal slices of the sentences at once, each in its own Python thread with one
    torch thread; the best hypotheses in the sentences' order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    size = -(-src.size(0) // parts)
    outputs: list = [None] * parts

    def work(i: int) -> None:
        rows = slice(i * size, (i + 1) * size)
        outputs[i] = seqmap_decode(model, src[rows], mask[rows], beam, new_tokens)

    try:
        workers = [threading.Thread(target=work, args=(i,)) for i in range(parts)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        torch.set_num_threads(threads)
    if any(out is None for out in outputs):
        raise RuntimeError("a split decoding thread failed (its traceback is above)")
    return [hyp for out in outputs for hyp in out]


def measure(decode, rounds: int) -> tuple[list[float], list[float], bool]:
    """Seconds per call of each setting over ``rounds`` alternating rounds, and whether their tokens agree."""
    outputs = []
    for setting in decode:
        setting()
        outputs.append(setting())
    samples = ([], [])
    for _ in range(rounds):
        for i, setting in enumerate(decode):
            start = time.perf_counter()
            setting()
            samples[i].append(time.perf_counter() - start)
    return samples[0], samples[1], outputs[0] == outputs[1]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("switch", choices=sorted(SWITCHES))
    parser.add_argument("--sentences", type=int, nargs="+", default=[64])
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5], help="beam sizes (1 = greedy)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--isa", choices=sorted(ISA_LIMITS),
                        help="keep torch, oneDNN and MKL to this instruction set's kernels (as bench/decode.py --isa)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.isa and os.environ.get(ISA_VARIABLE) != ISA_LIMITS[args.isa][ISA_VARIABLE]:
        # the limits act only if set before torch starts: run again in a process that has them
        limit_isa(args.isa)
        subprocess.run([sys.executable, __file__, *(sys.argv[1:] if argv is None else argv)], check=True)
        return
    check_isa(args.isa)
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as load_run and bench/decode.py do
    off, on = SWITCHES[args.switch]
    model, _ = build_seqmap(args.seed)
    whole_before = multihead.WHOLE_STORAGE_READS
    compile_before = torch._inductor.config.freezing, torch._dynamo.config.recompile_limit
    prepared = settings(args.switch, model)
    print(f"torch {torch.__version__}; {cpu_name()}, {args.threads} threads, fp32; {args.switch}: {off} against {on}")
    print(f"{'sentences':>9} {'mode':>7} {off:>15} {on:>15} {'ratio':>6} {'paired':>7} {'same tokens':>12}")
    rows = []
    try:
        for sentences in args.sentences:
            src = make_sources(sentences, args.src_len, args.seed)
            mask = torch.ones_like(src, dtype=torch.bool)
            for beam in args.beams:
                decode = [lambda prepare=prepare, src=src, mask=mask, beam=beam:
                          seqmap_decode(prepare(), src, mask, beam, args.new_tokens) for prepare in prepared]
                if args.switch == "split":
                    decode[1] = lambda src=src, mask=mask, beam=beam: split_decode(
                        prepared[1](), src, mask, beam, args.new_tokens, args.threads)
                first, second, same = measure(decode, args.rounds)
                paired = statistics.median(a / b for a, b in zip(first, second, strict=True))
                a, b = statistics.median(first), statistics.median(second)
                mode = "greedy" if beam == 1 else f"beam-{beam}"
                rows.append({"switch": args.switch, "off": off, "on": on, "sentences": sentences, "mode": mode,
                             "off_s": round(a, 4), "on_s": round(b, 4), "ratio": round(a / b, 3),
                             "paired": round(paired, 3), "same_tokens": same, "rounds": args.rounds,
                             "new_tokens": args.new_tokens, "cpu": cpu_name(), "threads": args.threads})
                print(f"{sentences:>9} {mode:>7} {a:>14.4f}s {b:>14.4f}s {a / b:>6.3f} {paired:>7.3f} {str(same):>12}",
                      flush=True)
    finally:
        multihead.WHOLE_STORAGE_READS = whole_before
        packed_module.PLAIN_MAX_ROWS = PLAIN_MAX_ROWS
        torch._inductor.config.freezing, torch._dynamo.config.recompile_limit = compile_before
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
