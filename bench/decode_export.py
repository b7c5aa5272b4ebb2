"""A trained run against its own CTranslate2 export, on a real test set: speed, BLEU and agreement.

    python bench/decode_export.py --run runs/m30k                  # Multi30k test2016, 2 threads
    python bench/decode_export.py --run runs/m30k --threads 1 --int8 --json out.json
    python bench/decode_export.py --run runs/m30k --quick          # smoke test: 40 sentences, 2 repeats

``bench/decode.py`` compares runtimes on one random model of fixed shape where no hypothesis ends early.
This bench takes a model seqmap trained and the sentences of a test set, as a user decodes them:
``seqmap translate RUN`` (``load_run``: packed weights; ``translate_ids``: batches under the run's
``decode.max_tokens`` budget, sorted by length) against ``seqmap translate RUN --ct2 DIR`` (``seqmap export ct2``,
decoded by ``seqmap.hub.ct2.translate_ct2``: the same length limits and banned tokens, CTranslate2's own
batching under the same budget). Sentences end when they end, so how each runtime stops early counts.

Two ways to call: **batch**, the whole test set in one call; **single**, the first ``--single`` sentences
one call each (a server answering one request at a time). Each runtime runs in its own process (see
``bench/decode.py``: ``Runtimes``) with ``--threads`` threads, warmed up, then sampled round-robin; a row
gives the median call time as output tokens per second (EOS counted) and "paired", the median over
rounds of the ratio within a round. BLEU (sacrebleu, detokenized outputs of the batch call against
``--ref``) and the share of sentences with the same output as seqmap float32 come with each row.
``--keep-finished`` adds seqmap with greedy's finished rows kept in the batch until all have finished
(``seqmap.decoding.greedy.DROP_FINISHED_AT`` out of reach), for the paired gain of dropping them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/machine.py

from decode import Runtimes, answer_jobs  # noqa: E402
from machine import cpu_name  # noqa: E402

from seqmap.config import from_dict, to_dict  # noqa: E402
from seqmap.data.corpus import read_lines  # noqa: E402
from seqmap.data.pipeline import truncate_source  # noqa: E402
from seqmap.decoding.text import translate_ids  # noqa: E402

greedy_module = sys.modules["seqmap.decoding.greedy"]  # the module (``seqmap.decoding.greedy`` names the function)
from seqmap.hub.ct2 import export_ct2, load_translator, translate_ct2  # noqa: E402
from seqmap.runs import load_run  # noqa: E402

CALLS = ("batch", "single")


def make_runner(runtime: str, args):
    """Build one runtime in its process; return ``decode(beam, call) -> outputs`` (one list of ids per sentence)."""
    torch.set_num_threads(args.threads)
    if runtime == "seqmap_keep":  # greedy keeps finished rows in the batch, as before issue 18's eighth part
        greedy_module.DROP_FINISHED_AT = 10**9
    int8 = runtime.endswith("_int8")
    run = load_run(args.run, quantize="int8" if int8 and runtime.startswith("seqmap") else None)
    texts = read_lines(args.src, "--src")[: args.sentences or None]
    sources = [truncate_source(run.src_tok.encode(t), run.cfg.data.max_src_len) for t in texts]
    configs = {beam: from_dict(type(run.cfg.decode), {**to_dict(run.cfg.decode), "beam_size": beam}, "decode")
               for beam in args.beams}
    if runtime.startswith("ct2"):
        translator = load_translator(args.ct2, threads=args.threads, compute_type="int8" if int8 else "float32")

        def translate(rows, decode):
            return translate_ct2(translator, run.src_tok, run.tgt_tok, rows, decode)
    else:
        def translate(rows, decode):
            return translate_ids(run.model, rows, decode)

    def decode(beam: int, call: str) -> list[list[int]]:
        if call == "batch":
            return translate(sources, configs[beam])
        return [translate([row], configs[beam])[0] for row in sources[: args.single]]

    return decode, run.tgt_tok


def serve(conn, runtime: str, args) -> None:
    """A runtime's process (``Runtimes`` of ``bench/decode.py``): answers jobs ``(beam, call)``."""
    decode, _ = make_runner(runtime, args)
    answer_jobs(conn, decode)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", default="runs/m30k", help="a trained Transformer run directory")
    p.add_argument("--src", default="data/multi30k/test2016.de")
    p.add_argument("--ref", default="data/multi30k/test2016.en")
    p.add_argument("--ct2", help="the run's CTranslate2 export (default: exported into a temporary directory)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    p.add_argument("--calls", nargs="+", choices=CALLS, default=list(CALLS))
    p.add_argument("--sentences", type=int, default=0, help="the first N sentences of --src (0: all)")
    p.add_argument("--single", type=int, default=100, help="sentences decoded one call each in the single rows")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--int8", action="store_true", help="also seqmap --quantize int8 and CTranslate2 int8")
    p.add_argument("--keep-finished", action="store_true",
                   help="also seqmap with greedy's finished rows kept in the batch (seqmap_keep)")
    p.add_argument("--quick", action="store_true", help="40 sentences, 10 single, 2 repeats")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args(argv)
    if args.quick:
        args.sentences, args.single, args.repeats = 40, 10, 2
    import sacrebleu

    with tempfile.TemporaryDirectory() as tmp:
        if args.ct2 is None:
            args.ct2 = str(Path(tmp) / "ct2")
            export_ct2(load_run(args.run, pack=False), args.ct2)
        names = ["seqmap", "ct2", *(("seqmap_int8", "ct2_int8") if args.int8 else ()),
                 *(("seqmap_keep",) if args.keep_finished else ())]
        runtimes = Runtimes(names, serve, args)
        tgt_tok = load_run(args.run, pack=False).tgt_tok
        refs = read_lines(args.ref, "--ref")[: args.sentences or None]
        rows = []
        try:
            for call in args.calls:
                for beam in args.beams:
                    for name in names:
                        for _ in range(args.warmup):
                            runtimes.run(name, beam, call)
                    samples = {name: [] for name in names}
                    outputs = {}
                    for _ in range(args.repeats):
                        for name in names:
                            time.sleep(0.05)
                            seconds, outputs[name] = runtimes.run(name, beam, call)
                            samples[name].append(seconds)
                    reference = outputs["seqmap"]
                    for name in names:
                        tokens = sum(len(o) + 1 for o in outputs[name])
                        row = {"call": call, "beam": beam, "runtime": name, "threads": args.threads,
                               "sentences": len(outputs[name]), "tokens": tokens,
                               "tokens_per_s": round(tokens / statistics.median(samples[name])),
                               "same_as_seqmap": round(sum(a == b for a, b in zip(outputs[name], reference))
                                                       / len(reference), 4)}
                        if name != "seqmap":
                            ratios = [(tokens / t) / (sum(len(o) + 1 for o in reference) / s)
                                      for t, s in zip(samples[name], samples["seqmap"], strict=True)]
                            row["paired_vs_seqmap"] = round(statistics.median(ratios), 3)
                        if call == "batch":
                            hyps = [tgt_tok.decode(o) for o in outputs[name]]
                            row["bleu"] = round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
                        rows.append(row)
        finally:
            runtimes.close()
    cpu = cpu_name()
    print(f"{args.run} on {args.src}; {cpu}; {args.threads} thread(s); torch {torch.__version__}")
    print(f"{'call':7} {'beam':>4} {'runtime':12} {'sent':>5} {'tok/s':>7} {'x seqmap':>8} {'paired':>6} "
          f"{'BLEU':>6} {'same':>6}")
    for r in rows:
        base = next(x for x in rows if x["call"] == r["call"] and x["beam"] == r["beam"] and x["runtime"] == "seqmap")
        print(f"{r['call']:7} {r['beam']:>4} {r['runtime']:12} {r['sentences']:>5} {r['tokens_per_s']:>7} "
              f"{r['tokens_per_s'] / base['tokens_per_s']:>8.2f} {r.get('paired_vs_seqmap', 1.0):>6.3f} "
              f"{r.get('bleu', float('nan')):>6.2f} {r['same_as_seqmap']:>6.3f}")
    if args.json:
        import ctranslate2

        machine = {"cpu": cpu, "torch": torch.__version__, "ctranslate2": ctranslate2.__version__, "run": args.run,
                   "src": args.src}
        Path(args.json).write_text(json.dumps([{**r, **machine} for r in rows], indent=1))


if __name__ == "__main__":
    main()
