"""Language-model decoding speed: seqmap vs Hugging Face transformers (GPT-2) vs CTranslate2's Generator.

    python bench/generate.py                  # 64 prompts of 16 tokens, 64 new tokens; greedy and beam-5
    python bench/generate.py --quick          # smoke test: 8 prompts, 16 new tokens, 2 repeats
    python bench/generate.py --json out.json  # also write the rows as JSON

``bench/decode.py``'s method for a decoder-only model: one model, each runtime in its own process
(``decode.Runtimes``), sampled round-robin after warm-up, median time per call reported as new tokens
per second (prompts x new tokens / seconds, the prompt's reading included), "paired" the median of the
ratio within a round. seqmap's model is a GPT-2-shaped LM (6 layers, D=256, H=4, F=1024, V=8000,
learned positions, pre-LN, gelu_tanh, no embedding scale, tied output), decoded as ``load_run`` gives
it to ``seqmap generate`` and ``serve`` (packed Linear weights, freed memory kept). Its weights are
copied into a ``transformers`` ``GPT2LMHeadModel``, which CTranslate2's own Transformers converter
turns into a CTranslate2 model (float32; a word-level tokenizer of the 8000 ids is written beside it),
so the reference path is CTranslate2's, not seqmap's export. ``--int8`` adds seqmap ``--quantize int8``
against CTranslate2 ``compute_type=int8``.

The weights are random (seeded), with random biases and LayerNorm gains so that a wrong copy shows, and
shaped as in ``bench/decode.py`` so that greedy outputs vary: feed-forward output matrices centred and
scaled, the final norm's bias shifted to centre the last state. Id 0 is EOS, 1 UNK, the last id PAD;
the EOS row of the tied embedding is zero, so EOS scores a logit of exactly 0 and is never chosen: every
runtime generates exactly the requested tokens per prompt (checked), and beam lengths never differ.
Prompts hold no EOS, UNK or PAD. Greedy asks no runtime for scores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/machine.py, bench/decode.py

from decode import (  # noqa: E402
    Runtimes,
    answer_jobs,
    compare,
    describe,
    paired_ratio,
    time_calls,
    to_ctranslate2,
    vocabulary,
)
from machine import cpu_name  # noqa: E402

from seqmap.config import ModelConfig  # noqa: E402
from seqmap.decoding.beam import beam_search  # noqa: E402
from seqmap.decoding.greedy import greedy  # noqa: E402
from seqmap.decoding.memory import keep_freed_memory  # noqa: E402
from seqmap.decoding.quantize import quantize  # noqa: E402
from seqmap.models.builder import build_model  # noqa: E402
from seqmap.nn.packed import pack_linears, packing_backend  # noqa: E402

MODEL = dict(d_model=256, n_heads=4, d_ff=1024, dec_layers=6, vocab=8000, max_len=256)
EOS, UNK, PAD = 0, 1, MODEL["vocab"] - 1


def build_lm(seed: int):
    """The seqmap LM with seeded random weights whose greedy outputs vary."""
    cfg = ModelConfig(family="lm", tgt_vocab=MODEL["vocab"], pad_id=PAD, d_model=MODEL["d_model"],
                      n_heads=MODEL["n_heads"], d_ff=MODEL["d_ff"], dec_layers=MODEL["dec_layers"], dropout=0.0,
                      norm_position="pre", activation="gelu_tanh", positional="learned", max_len=MODEL["max_len"],
                      scale_embeddings=False, tie_embeddings=True)
    torch.manual_seed(seed)
    model = build_model(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:  # LayerNorm gains
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("ff.w2.weight"):
                p.sub_(p.mean(dim=1, keepdim=True)).mul_(6.0)
            elif name.endswith("out_proj.weight"):
                p.mul_(0.5)
        model.positional.table.weight.mul_(4.0)  # positions as strong as tokens: outputs move along the text
        table = model.embedding.table.weight
        table[EOS].zero_()
        table[PAD].zero_()
        states = []
        hook = model.final_norm.register_forward_hook(lambda module, inputs, output: states.append(output))
        model(None, None, torch.randint(2, PAD, (32, 64), generator=g))
        hook.remove()
        model.final_norm.bias.sub_(states[0].mean(dim=(0, 1)))
    return model, cfg


def to_gpt2(model, cfg: ModelConfig):
    """A transformers GPT2LMHeadModel holding seqmap's weights (Conv1D stores weights transposed)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=cfg.tgt_vocab, n_positions=cfg.max_len, n_embd=cfg.d_model,
                        n_layer=cfg.dec_layers, n_head=cfg.n_heads, n_inner=cfg.d_ff, activation_function="gelu_new",
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=cfg.norm_eps,
                        bos_token_id=EOS, eos_token_id=EOS, pad_token_id=PAD, tie_word_embeddings=True)
    hf = GPT2LMHeadModel(config).eval()
    sd = model.state_dict()
    weights = {"transformer.wte.weight": sd["embedding.table.weight"],
               "transformer.wpe.weight": sd["positional.table.weight"],
               "transformer.ln_f.weight": sd["final_norm.weight"], "transformer.ln_f.bias": sd["final_norm.bias"],
               "lm_head.weight": sd["embedding.table.weight"]}
    for i in range(cfg.dec_layers):
        h, p = f"transformer.h.{i}", f"layers.{i}"
        for ours, theirs in (("self_attn.in_proj", "attn.c_attn"), ("self_attn.out_proj", "attn.c_proj"),
                             ("ff.w1", "mlp.c_fc"), ("ff.w2", "mlp.c_proj")):
            weights[f"{h}.{theirs}.weight"] = sd[f"{p}.{ours}.weight"].t()
            weights[f"{h}.{theirs}.bias"] = sd[f"{p}.{ours}.bias"]
        for n in (1, 2):
            for part in ("weight", "bias"):
                weights[f"{h}.ln_{n}.{part}"] = sd[f"{p}.norm{n}.{part}"]
    missing, unexpected = hf.load_state_dict(weights, strict=False)
    if unexpected or [k for k in missing if not k.endswith("attn.bias") and not k.endswith("masked_bias")]:
        raise SystemExit(f"GPT-2 mapping incomplete: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return hf


# -- decoding calls: each returns the best continuation of each prompt as a list of ids ------------------


def seqmap_generate(model, prompts: Tensor, beam: int, new_tokens: int) -> list[list[int]]:
    if beam == 1:
        return greedy(model, None, None, bos=EOS, eos=EOS, max_len=new_tokens, pad=PAD, prompt=prompts,
                      scores=False).tokens.tolist()
    result = beam_search(model, None, None, beam_size=beam, bos=EOS, eos=EOS, max_len=new_tokens,
                         length_penalty=1.0, n_best=1, pad=PAD, prompt=prompts)
    return [hyps[0].tokens for hyps in result.hypotheses]


def hf_generate(hf, prompts: Tensor, beam: int, new_tokens: int) -> list[list[int]]:
    out = hf.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), num_beams=beam, do_sample=False,
                      max_new_tokens=new_tokens, length_penalty=1.0, num_return_sequences=1, pad_token_id=PAD)
    return out[:, prompts.size(1):].tolist()


def ct2_generate(generator, prompts: list[list[str]], beam: int, new_tokens: int, ids: dict[str, int]
                 ) -> list[list[int]]:
    results = generator.generate_batch(prompts, beam_size=beam, max_length=new_tokens, length_penalty=1.0,
                                       include_prompt_in_result=False, max_batch_size=len(prompts))
    return [[ids[t] for t in r.sequences[0]] for r in results]


def make_prompts(count: int, length: int, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randint(2, PAD, (count, length), generator=g)  # no EOS, UNK or PAD


def make_runner(runtime: str, args, ct2_dir: str):
    """Build one runtime; return ``generate(beam) -> continuations``. Runs inside that runtime's process."""
    torch.set_num_threads(args.threads)
    prompts = make_prompts(args.prompts, args.prompt_len, args.seed)
    if runtime in ("ct2", "ct2_int8"):
        import ctranslate2

        generator = ctranslate2.Generator(ct2_dir, device="cpu", intra_threads=args.threads, inter_threads=1,
                                          compute_type="int8" if runtime == "ct2_int8" else "float32")
        words = vocabulary(MODEL["vocab"])
        ids = {w: i for i, w in enumerate(words)}
        rows = [[words[i] for i in row] for row in prompts.tolist()]
        return lambda beam: ct2_generate(generator, rows, beam, args.new_tokens, ids)
    model, cfg = build_lm(args.seed)
    keep_freed_memory()  # as load_run does for CPU decoding
    if runtime == "seqmap":
        packed = pack_linears(model)
        return lambda beam: seqmap_generate(packed, prompts, beam, args.new_tokens)
    if runtime == "seqmap_int8":
        int8 = pack_linears(quantize(model, "int8"))
        return lambda beam: seqmap_generate(int8, prompts, beam, args.new_tokens)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    hf = to_gpt2(model, cfg)
    return lambda beam: hf_generate(hf, prompts, beam, args.new_tokens)


def serve(conn, runtime: str, args, ct2_dir: str) -> None:
    answer_jobs(conn, make_runner(runtime, args, ct2_dir))


def measure(runtimes: Runtimes, args, versions: str) -> list[dict]:
    print(f"{versions}; {cpu_name()} ({os.cpu_count()} cores), {args.threads} threads, fp32; {args.prompts} "
          f"prompts of {args.prompt_len} tokens, {args.new_tokens} new tokens; load average {os.getloadavg()[0]:.2f}")
    expected = args.prompts * args.new_tokens
    rows = []
    for beam in args.beams:
        mode = "greedy" if beam == 1 else f"beam-{beam}"
        outputs = {name: runtimes.run(name, beam)[1] for name in runtimes.conns}
        print(f"{mode}: seqmap output: {describe(outputs['seqmap'])}")
        agreement = {name: compare(name, outputs["seqmap"], outputs[name]) for name in ("hf", "ct2")}
        for name, a in agreement.items():
            print(f"{mode}: seqmap vs {name}: {a['rows_equal']}/{a['rows']} prompts and "
                  f"{a['tokens_equal']}/{a['tokens']} tokens equal"
                  + (f"; first difference: {a['first_mismatch']}" if a["first_mismatch"] else ""))
        for name, out in outputs.items():
            if sum(len(o) for o in out) != expected and not name.endswith("int8"):
                raise SystemExit(f"{mode}: {name} generated {sum(len(o) for o in out)} tokens, expected {expected}")
        if beam == 1 and any(a["first_mismatch"] for a in agreement.values()):
            raise SystemExit("greedy outputs differ: the runtimes do not compute the same model")
        samples = time_calls(runtimes, beam, args.repeats, args.warmup)
        generated = {name: sum(len(o) for o in out) for name, out in outputs.items()}
        tok_s = {name: generated[name] / statistics.median(s) for name, s in samples.items()}
        rows.append({
            "mode": mode, "beam_size": beam, "prompts": args.prompts, "prompt_len": args.prompt_len,
            "new_tokens": expected,
            **{f"{name}_tok_s": round(t, 1) for name, t in tok_s.items()},
            "ratio_vs_hf": round(tok_s["seqmap"] / tok_s["hf"], 3),
            "ratio_vs_ct2": round(tok_s["seqmap"] / tok_s["ct2"], 3),
            **{f"ratio_vs_{name}_paired": paired_ratio(samples, generated, name) for name in ("hf", "ct2")},
            "agree_hf_prompts": agreement["hf"]["rows_equal"], "agree_ct2_prompts": agreement["ct2"]["rows_equal"],
            **({"ratio_int8_vs_ct2_int8": round(tok_s["seqmap_int8"] / tok_s["ct2_int8"], 3),
                "int8_agree_fp32_prompts": compare("int8", outputs["seqmap"], outputs["seqmap_int8"])["rows_equal"]}
               if args.int8 else {}),
            "packing": packing_backend(), "cpu": cpu_name(), "threads": args.threads,
            "samples_s": {name: [round(x, 4) for x in s] for name, s in samples.items()},
        })
        print(f"{mode}: tokens/s seqmap {tok_s['seqmap']:.0f}, hf {tok_s['hf']:.0f}, ct2 {tok_s['ct2']:.0f} "
              f"(load average {os.getloadavg()[0]:.2f})", flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5], help="beam sizes to time (1 = greedy)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per runtime; the median is reported")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--int8", action="store_true", help="add seqmap --quantize int8 and CTranslate2 int8")
    parser.add_argument("--quick", action="store_true", help="smoke test: 8 prompts, 16 new tokens, 2 repeats")
    parser.add_argument("--json", type=Path, help="also write the rows to this file as a JSON list; "
                        "ratio_vs_X = seqmap tokens/s / X tokens/s (above 1: seqmap is faster)")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.new_tokens, args.repeats, args.warmup = 8, 16, 2, 1
    if args.prompt_len + args.new_tokens > MODEL["max_len"]:
        raise SystemExit(f"--prompt-len + --new-tokens must be at most {MODEL['max_len']} (the learned positions)")

    import ctranslate2
    import transformers

    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as tmp:
        model, cfg = build_lm(args.seed)
        ct2_dir = to_ctranslate2(to_gpt2(model, cfg), Path(tmp), bos_token="</s>")
        del model
        names = ["seqmap", "hf", "ct2", *(("seqmap_int8", "ct2_int8") if args.int8 else ())]
        runtimes = Runtimes(names, serve, args, ct2_dir)
        try:
            rows = measure(runtimes, args, f"torch {torch.__version__}, transformers {transformers.__version__}, "
                                           f"ctranslate2 {ctranslate2.__version__}")
        finally:
            runtimes.close()
    print(f"\nnew tokens per second (median of {args.repeats}; ratio = seqmap / other, above 1: seqmap is faster)")
    print(f"{'mode':>7} {'seqmap':>8} {'HF':>8} {'CT2':>8} {'seqmap/HF':>10} {'seqmap/CT2':>11} {'paired HF':>10} "
          f"{'paired CT2':>11}" + (f" {'seqmap8':>8} {'CT2 int8':>9} {'ratio':>6}" if args.int8 else ""))
    for r in rows:
        print(f"{r['mode']:>7} {r['seqmap_tok_s']:>8.0f} {r['hf_tok_s']:>8.0f} {r['ct2_tok_s']:>8.0f} "
              f"{r['ratio_vs_hf']:>10.2f} {r['ratio_vs_ct2']:>11.2f} {r['ratio_vs_hf_paired']:>10.2f} "
              f"{r['ratio_vs_ct2_paired']:>11.2f}"
              + (f" {r['seqmap_int8_tok_s']:>8.0f} {r['ct2_int8_tok_s']:>9.0f} {r['ratio_int8_vs_ct2_int8']:>6.2f}"
                 if args.int8 else ""))
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
