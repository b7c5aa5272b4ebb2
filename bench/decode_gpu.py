"""Decoding speed on one CUDA GPU: seqmap vs Hugging Face transformers, same weights, in fp32, fp16 and bf16.

    python bench/decode_gpu.py                    # greedy and beam-5 in fp32, fp16 and bf16, both model shapes
    python bench/decode_gpu.py --shapes base      # only bench/decode.py's shape
    python bench/decode_gpu.py --quick            # smoke test: 8 sentences, 16 new tokens, 2 repeats
    python bench/decode_gpu.py --json out.json    # also write the rows as JSON

The model, its weights, the sources and the search settings are ``bench/decode.py``'s (read its docstring: a
seeded random post-LN Transformer whose weights are copied into a ``MarianMTModel``; EOS is never chosen, so
every runtime generates exactly the requested number of tokens; greedy asks for no scores). Two shapes: "base"
is bench/decode.py's (3 + 3 layers, D=256, H=4, F=1024, V=8000) and "big" the Transformer-big's width (6 + 6
layers, D=1024, H=16, F=4096, V=8000), where a GPU has more work per step than kernel launches.

Each runtime gets the weights in the precision of the row: seqmap as ``seqmap translate --device cuda
--precision P`` loads them (``seqmap.decoding.precision.half_precision``: the model cast to 16 bits, scores in
float32), transformers as ``from_pretrained(..., dtype=...)`` would (the model cast). Both run in this one
process (a GPU has no CPU thread pools to keep apart), are warmed up, then sampled round-robin; the median
call gives new tokens per second (sentences x new tokens / seconds, encoder included). A call ends when its
token ids are on the CPU (``.tolist()``), which waits for the GPU. transformers runs its default attention
(``sdpa``); seqmap runs its own (``torch.nn.functional.scaled_dot_product_attention`` as well). As
seqmap's commands do on a GPU, cuDNN's attention kernel is taken out of torch's choice for the whole
process (``seqmap.nn.attention.avoid_cudnn_attention``; it builds a plan per new shape), so for both
runtimes; ``SEQMAP_CUDNN_ATTENTION=1`` leaves it in.

CTranslate2 is not in this table: its wheels link CUDA 12's libraries, and the GPU machines this project
borrows have CUDA 13's only (torch cu130).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/decode.py

import decode  # noqa: E402  (bench/decode.py: the model, its Marian copy, the calls, the comparison)

from seqmap.decoding.precision import PRECISIONS, half_precision  # noqa: E402
from seqmap.nn.attention import CUDNN_ATTENTION_VARIABLE, avoid_cudnn_attention  # noqa: E402

SHAPES = {"base": dict(d_model=256, n_heads=4, d_ff=1024, enc_layers=3, dec_layers=3),
          "big": dict(d_model=1024, n_heads=16, d_ff=4096, enc_layers=6, dec_layers=6)}


def runtimes(shape: str, precision: str, args) -> dict:
    """{"seqmap": decode(beam), "hf": decode(beam)} for one shape in one precision, on the GPU."""
    decode.MODEL.update(SHAPES[shape])  # build_seqmap and to_marian read the shape from here
    model, cfg = decode.build_seqmap(args.seed)
    hf = decode.to_marian(model, cfg).to("cuda", PRECISIONS[precision]).eval()
    ours = half_precision(model.to("cuda"), precision, "cuda")
    src = decode.make_sources(args.sentences, args.src_len, args.seed).cuda()
    mask = torch.ones_like(src, dtype=torch.bool)
    return {"seqmap": lambda beam: decode.seqmap_decode(ours, src, mask, beam, args.new_tokens),
            "hf": lambda beam: decode.hf_decode(hf, src, mask, beam, args.new_tokens)}


def timed(call, beam: int) -> tuple[float, list[list[int]]]:
    start = time.perf_counter()
    out = call(beam)  # ends with .tolist(): the GPU has finished
    return time.perf_counter() - start, out


def measure(shape: str, precision: str, args) -> list[dict]:
    calls = runtimes(shape, precision, args)
    expected = args.sentences * args.new_tokens
    rows = []
    for beam in args.beams:
        mode = "greedy" if beam == 1 else f"beam-{beam}"
        outputs = {name: call(beam) for name, call in calls.items()}
        agreement = decode.compare("hf", outputs["seqmap"], outputs["hf"])
        for name, out in outputs.items():
            if sum(len(o) for o in out) != expected:
                raise SystemExit(f"{shape} {precision} {mode}: {name} generated {sum(len(o) for o in out)} "
                                 f"tokens, expected {expected}: the comparison would not be fair")
        for call in calls.values():
            for _ in range(args.warmup):
                call(beam)
        samples = {name: [] for name in calls}
        for _ in range(args.repeats):
            for name, call in calls.items():
                samples[name].append(timed(call, beam)[0])
        tok_s = {name: expected / statistics.median(s) for name, s in samples.items()}
        paired = statistics.median(h / s for s, h in zip(samples["seqmap"], samples["hf"], strict=True))
        row = {"shape": shape, "precision": precision, "mode": mode, "beam_size": beam,
               "sentences": args.sentences, "src_len": args.src_len, "new_tokens": expected,
               "seqmap_tok_s": round(tok_s["seqmap"], 1), "hf_tok_s": round(tok_s["hf"], 1),
               "ratio_vs_hf": round(tok_s["seqmap"] / tok_s["hf"], 3), "ratio_vs_hf_paired": round(paired, 3),
               "agree_hf_sentences": agreement["rows_equal"], "agree_hf_tokens": agreement["tokens_equal"],
               "first_mismatch": agreement["first_mismatch"], "gpu": torch.cuda.get_device_name(),
               "samples_s": {name: [round(x, 4) for x in s] for name, s in samples.items()}}
        rows.append(row)
        print(f"{shape:>4} {precision:>4} {mode:>7} {row['seqmap_tok_s']:>9.0f} {row['hf_tok_s']:>9.0f} "
              f"{row['ratio_vs_hf']:>8.2f} {row['ratio_vs_hf_paired']:>7.2f} "
              f"{agreement['rows_equal']:>4}/{agreement['rows']:<4} {outputs_note(outputs)}", flush=True)
    del calls
    torch.cuda.empty_cache()
    return rows


def outputs_note(outputs: dict) -> str:
    return decode.describe(outputs["seqmap"]).split(",")[1].strip()  # distinct tokens per sentence


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["base", "big"])
    parser.add_argument("--precisions", nargs="+", choices=list(PRECISIONS), default=list(PRECISIONS))
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5], help="beam sizes to time (1 = greedy)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per runtime; the median is reported")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke test: 8 sentences, 16 new tokens, 2 repeats")
    parser.add_argument("--json", type=Path, help="also write the rows to this file as a JSON list")
    args = parser.parse_args(argv)
    if args.quick:
        args.sentences, args.new_tokens, args.repeats, args.warmup = 8, 16, 2, 1
    if not torch.cuda.is_available():
        raise SystemExit("bench/decode_gpu.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    import transformers

    transformers.utils.logging.disable_progress_bar()
    avoid_cudnn_attention()  # as seqmap's commands do on a GPU (process-wide: transformers' calls too)
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}; "
          f"{torch.cuda.get_device_name()}; {args.sentences} sentences, source length {args.src_len}, "
          f"{args.new_tokens} new tokens; median of {args.repeats}; cuDNN attention "
          f"{'on' if torch.backends.cuda.cudnn_sdp_enabled() else 'off'} ({CUDNN_ATTENTION_VARIABLE}=1 keeps it)")
    print(f"{'shape':>5} {'prec':>4} {'mode':>7} {'seqmap':>9} {'HF':>9} {'ratio':>8} {'paired':>7} "
          f"{'same as HF':>10} seqmap's outputs")
    rows = [row for shape in args.shapes for precision in args.precisions for row in measure(shape, precision, args)]
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
