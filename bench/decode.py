"""Decoding speed (greedy and beam search): seqmap vs Hugging Face transformers vs CTranslate2, same weights.

    python bench/decode.py                  # full table: 64 sentences, source length 30, 64 new tokens
    python bench/decode.py --quick          # smoke test: 8 sentences, 16 new tokens, 2 repeats
    python bench/decode.py --json out.json  # also write the rows as JSON
    python bench/decode.py --profile        # profile seqmap's decoding instead of timing (torch.profiler)
    python bench/decode.py --profile hf     # the same for transformers' generate
    python bench/decode.py --profile int8   # the same for seqmap --quantize int8
    python bench/decode.py --isa avx2       # every library kept to AVX2 kernels (an AVX2-only CPU, approximated)

One model, three runtimes (seqmap three times: as ``load_run`` gives it to translate, evaluate, generate and
serve, with packed Linear weights (``seqmap.nn.packed``: MKL's packs on Intel CPUs, oneDNN's elsewhere;
``--pack`` forces one) and freed memory kept for reuse (``seqmap.decoding.memory``); with plain
``nn.Linear``, the "plain Linear" column; and, where this torch has both, packed by the other library,
the "other pack" column; the outputs of all three are compared). seqmap builds a post-LN Transformer
(3 + 3 layers, D=256, H=4, F=1024, V=8000, ReLU, one embedding table for source, target and output,
embeddings scaled by sqrt(D), sinusoidal positions in the "split" layout: sines then cosines). Its
weights are copied into a Hugging Face ``MarianMTModel`` of the same shape (``final_logits_bias`` zero),
which CTranslate2's Transformers converter turns into a CTranslate2 model (float32). The converter needs a tokenizer
next to the model: a word-level vocabulary of the 8000 ids is written locally (nothing is downloaded).

The weights are random (seeded), with random biases and LayerNorm gains so that a wrong copy shows,
shaped so that greedy outputs vary (``vary_outputs``: about 62 distinct tokens in 64, under 1%
immediate repeats). Token ids follow Marian: 0 is EOS, 1 UNK, and the last id (7999) is padding and
the decoder start. The padding row of the embedding table is zero, which is what Marian's decoder
start and CTranslate2's ``start_from_zero_embedding`` assume. The EOS row is zero too, so EOS always
scores a logit of exactly 0, about the median, while the best token scores 3 to 4 standard
deviations above the mean (at least 2.5 above EOS in the greedy outputs): EOS is never chosen, no
beam finishes early, and every runtime generates exactly the requested number of tokens per
sentence (checked). As no hypothesis ends early, all have the same length, and the length penalties
(1.0 in each runtime, with different formulas) cannot change a ranking. Nothing is suppressed or
forced in any runtime, so no one pays for a logits processor the others do not run. Greedy asks no
runtime for scores (seqmap ``scores=False``, CTranslate2's default ``return_scores=False``, transformers'
default ``output_scores=False``), so none runs a softmax over the vocabulary; beam search needs it in all.

One difference remains: CTranslate2's Marian converter drops the padding token (the last id) from
the vocabulary, so its softmax runs over 7999 tokens while seqmap's and transformers' include
padding's logit of 0 (about 1e-4 of the partition sum). Greedy choices cannot change; beam scores
shift by about 1e-4 per step, which can only reorder near-ties.

Before timing, the script checks that the three produce the same greedy ids and compares their
beam outputs. Each runtime runs in its own process (see ``Runtimes``) with ``torch.set_num_threads``
(or CTranslate2's ``intra_threads``) at ``--threads`` and ``inter_threads=1``. Timing: each runtime is
warmed up, then the three are sampled round-robin (so that
background load hits all of them alike) and the median time of a call is reported as new tokens per
second (sentences x new tokens / seconds, encoder included); "paired" is the median over rounds of the
ratio within a round, a check on the ratio of medians when the machine's speed drifts. A call
decodes all sentences the way each runtime does best: one batch for seqmap, one ``generate`` call for transformers, one
``translate_batch(max_batch_size=N)`` for CTranslate2.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/machine.py

from machine import ISA_LIMITS, check_isa, cpu_name, limit_isa  # noqa: E402

from seqmap.config import ModelConfig  # noqa: E402
from seqmap.decoding.beam import beam_search  # noqa: E402
from seqmap.decoding.greedy import greedy  # noqa: E402
from seqmap.decoding.memory import keep_freed_memory  # noqa: E402
from seqmap.decoding.quantize import quantize  # noqa: E402
from seqmap.models.builder import build_model  # noqa: E402
from seqmap.nn.packed import (  # noqa: E402
    BACKEND_VARIABLE,
    BACKENDS,
    mkl_packing_available,
    pack_linears,
    packing_backend,
)

MODEL = dict(d_model=256, n_heads=4, d_ff=1024, enc_layers=3, dec_layers=3, vocab=8000)
EOS, UNK, PAD = 0, 1, MODEL["vocab"] - 1  # PAD doubles as the decoder start token, as in Marian


# -- one model in three runtimes -----------------------------------------------------------------------


def build_seqmap(seed: int):
    """The seqmap Transformer with seeded random weights whose greedy outputs vary (see ``vary_outputs``)."""
    cfg = ModelConfig(family="transformer", src_vocab=MODEL["vocab"], tgt_vocab=MODEL["vocab"], pad_id=PAD,
                      d_model=MODEL["d_model"], n_heads=MODEL["n_heads"], d_ff=MODEL["d_ff"],
                      enc_layers=MODEL["enc_layers"], dec_layers=MODEL["dec_layers"], dropout=0.0,
                      norm_position="post", activation="relu", positional="sinusoidal", sinusoidal_layout="split",
                      scale_embeddings=True, tie_embeddings=True, share_vocab=True)
    torch.manual_seed(seed)  # the builder's initialisation
    model = build_model(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:  # LayerNorm gains
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
        vary_outputs(model, g)
    return model, cfg


@torch.no_grad()
def vary_outputs(model, g: torch.Generator) -> None:
    """Reshape random weights so that greedy outputs depend on the previous token and the position.

    With plain random weights every state of a post-LN stack is dominated by one input-independent
    direction (the positive mean of the ReLUs, the near-constant low-frequency cosines, attention
    averaging), and greedy decoding repeats one token per sentence. Three changes fix that:
    feed-forward output matrices are centred (each row sums to zero, so the ReLU mean adds nothing)
    and scaled 6x, so each layer's output is a strong random function of its input; attention output
    projections are scaled 0.5x; and the last LayerNorm's bias is shifted so that the final decoder
    state averages zero over random inputs. The padding (decoder start) and EOS rows of the shared
    embedding are zeroed (see the module docstring).
    """
    for name, p in model.named_parameters():
        if name.endswith("ff.w2.weight"):
            p.sub_(p.mean(dim=1, keepdim=True)).mul_(6.0)
        elif name.endswith("out_proj.weight"):
            p.mul_(0.5)
    table = model.encoder.embedding.table.weight
    table[PAD].zero_()
    table[EOS].zero_()
    src = torch.randint(2, PAD, (32, 30), generator=g)
    tgt = torch.randint(2, PAD, (32, 64), generator=g)
    final = model.decoder.layers[-1].norm3
    states = []
    hook = final.register_forward_hook(lambda module, inputs, output: states.append(output))
    model(src, None, tgt)
    hook.remove()
    final.bias.sub_(states[0].mean(dim=(0, 1)))


def to_marian(model, cfg: ModelConfig):
    """A Hugging Face MarianMTModel of the same shape holding seqmap's weights."""
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=cfg.tgt_vocab, d_model=cfg.d_model, encoder_layers=cfg.enc_layers, decoder_layers=cfg.dec_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function="relu",
        max_position_embeddings=512, scale_embedding=True, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=PAD,
        bos_token_id=None, forced_eos_token_id=None, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
    )
    hf = MarianMTModel(config).eval()
    src = model.state_dict()

    def linear(dst, prefix, rows=slice(None)):
        dst.weight.copy_(src[f"{prefix}.weight"][rows])
        dst.bias.copy_(src[f"{prefix}.bias"][rows])

    def norm(dst, prefix):
        dst.weight.copy_(src[f"{prefix}.weight"])
        dst.bias.copy_(src[f"{prefix}.bias"])

    def attention(dst, prefix):  # seqmap packs q|k|v rows in in_proj
        d = cfg.d_model
        for proj, rows in zip((dst.q_proj, dst.k_proj, dst.v_proj), (slice(0, d), slice(d, 2 * d), slice(2 * d, 3 * d)),
                              strict=True):
            linear(proj, f"{prefix}.in_proj", rows)
        linear(dst.out_proj, f"{prefix}.out_proj")

    with torch.no_grad():
        hf.model.shared.weight.copy_(src["encoder.embedding.table.weight"])
        hf.final_logits_bias.zero_()
        for i, layer in enumerate(hf.model.encoder.layers):
            p = f"encoder.layers.{i}"
            attention(layer.self_attn, f"{p}.self_attn")
            norm(layer.self_attn_layer_norm, f"{p}.norm1")
            linear(layer.fc1, f"{p}.ff.w1")
            linear(layer.fc2, f"{p}.ff.w2")
            norm(layer.final_layer_norm, f"{p}.norm2")
        for i, layer in enumerate(hf.model.decoder.layers):
            p = f"decoder.layers.{i}"
            attention(layer.self_attn, f"{p}.self_attn")
            norm(layer.self_attn_layer_norm, f"{p}.norm1")
            attention(layer.encoder_attn, f"{p}.cross_attn")
            norm(layer.encoder_attn_layer_norm, f"{p}.norm2")
            linear(layer.fc1, f"{p}.ff.w1")
            linear(layer.fc2, f"{p}.ff.w2")
            norm(layer.final_layer_norm, f"{p}.norm3")
    shared = hf.model.shared.weight
    for tied in (hf.model.encoder.embed_tokens.weight, hf.model.decoder.embed_tokens.weight, hf.lm_head.weight):
        assert tied.data_ptr() == shared.data_ptr(), "Marian's embeddings and output layer should be one table"
    ours = model.encoder.positional.table[:512]
    for stack in (hf.model.encoder, hf.model.decoder):  # Marian builds its own table: it must be seqmap's
        err = (stack.embed_positions.weight - ours).abs().max().item()
        assert err < 1e-5, f"Marian's position table differs from seqmap's split layout by {err:.2e}"
    return hf


def vocabulary(size: int) -> list[str]:
    return ["</s>", "<unk>"] + [f"w{i}" for i in range(2, size - 1)] + ["<pad>"]


def to_ctranslate2(hf, workdir: Path, **specials: str) -> str:
    """Save the transformers model (here Marian; GPT-2 in bench/generate.py) with a word-level tokenizer of
    ``vocabulary``'s names (and ``specials``, e.g. ``bos_token``) and convert it with CTranslate2's converter."""
    import ctranslate2
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    hf_dir, ct2_dir = workdir / "hf", workdir / "ct2"
    hf.save_pretrained(hf_dir)
    vocab = {token: i for i, token in enumerate(vocabulary(hf.config.vocab_size))}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                            **specials).save_pretrained(hf_dir)
    ctranslate2.converters.TransformersConverter(str(hf_dir)).convert(str(ct2_dir), force=True)
    return str(ct2_dir)


# -- decoding calls: every one returns the best hypothesis of each sentence as a list of ids -------------


def seqmap_decode(model, src: Tensor, mask: Tensor, beam: int, new_tokens: int) -> list[list[int]]:
    if beam == 1:
        result = greedy(model, src, mask, bos=PAD, eos=EOS, max_len=new_tokens, pad=PAD, scores=False)
        return result.tokens.tolist()
    result = beam_search(model, src, mask, beam_size=beam, bos=PAD, eos=EOS, max_len=new_tokens,
                         length_penalty=1.0, n_best=1, pad=PAD)
    return [hyps[0].tokens for hyps in result.hypotheses]


def hf_decode(hf, src: Tensor, mask: Tensor, beam: int, new_tokens: int) -> list[list[int]]:
    out = hf.generate(input_ids=src, attention_mask=mask.long(), num_beams=beam, do_sample=False,
                      max_new_tokens=new_tokens, length_penalty=1.0, num_return_sequences=1)
    return out[:, 1:].tolist()  # drop the decoder start token


def ct2_decode(translator, tokens: list[list[str]], beam: int, new_tokens: int, ids: dict[str, int]
               ) -> list[list[int]]:
    results = translator.translate_batch(tokens, beam_size=beam, max_decoding_length=new_tokens,
                                         max_batch_size=len(tokens), num_hypotheses=1, length_penalty=1.0)
    return [[ids[t] for t in r.hypotheses[0]] for r in results]


# -- agreement ------------------------------------------------------------------------------------------


def compare(name: str, ours: list[list[int]], theirs: list[list[int]]) -> dict:
    """Rows equal, tokens equal at the same position, and the first difference."""
    same_rows = sum(a == b for a, b in zip(ours, theirs, strict=True))
    same_tokens = sum(x == y for a, b in zip(ours, theirs, strict=True) for x, y in zip(a, b, strict=False))
    total = sum(len(a) for a in ours)
    first = None
    for row, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a != b:
            pos = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            first = f"sentence {row}, token {pos}: seqmap {a[pos:pos + 4]} vs {name} {b[pos:pos + 4]} " \
                    f"(lengths {len(a)} and {len(b)})"
            break
    return {"rows_equal": same_rows, "rows": len(ours), "tokens_equal": same_tokens, "tokens": total,
            "first_mismatch": first}


def describe(outputs: list[list[int]]) -> str:
    """Evidence that the outputs are not degenerate."""
    lengths = [len(o) for o in outputs]
    distinct = statistics.mean(len(set(o)) for o in outputs)
    repeats = sum(a == b for o in outputs for a, b in zip(o, o[1:], strict=False)) / max(1, sum(lengths) - len(lengths))
    vocab = len({t for o in outputs for t in o})
    return (f"lengths {min(lengths)}..{max(lengths)}, {distinct:.1f} distinct tokens per sentence on average, "
            f"{100 * repeats:.1f}% immediate repeats, {vocab} distinct tokens overall")


# -- one process per runtime ---------------------------------------------------------------------------


def make_sources(sentences: int, src_len: int, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randint(2, PAD, (sentences, src_len), generator=g)  # no EOS, UNK or PAD


def make_runner(runtime: str, args, ct2_dir: str | None):
    """Build one runtime; return ``decode(beam) -> best hypotheses``. Runs inside that runtime's process."""
    torch.set_num_threads(args.threads)
    check_isa(args.isa)
    src = make_sources(args.sentences, args.src_len, args.seed)
    mask = torch.ones_like(src, dtype=torch.bool)  # True = real token; every sentence has the full length
    if runtime in ("ct2", "ct2_int8"):
        import ctranslate2

        compute_type = "int8" if runtime == "ct2_int8" else "float32"
        translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type,
                                            intra_threads=args.threads, inter_threads=1)
        words = vocabulary(MODEL["vocab"])
        ids = {w: i for i, w in enumerate(words)}
        src_words = [[words[i] for i in row] for row in src.tolist()]
        return lambda beam: ct2_decode(translator, src_words, beam, args.new_tokens, ids)
    model, cfg = build_seqmap(args.seed)
    keep_freed_memory()  # as load_run does for CPU decoding (seqmap.decoding.memory)
    if runtime == "seqmap":  # what translate, evaluate, generate and serve run (seqmap.runs.load_run)
        packed = pack_linears(model)
        return lambda beam: seqmap_decode(packed, src, mask, beam, args.new_tokens)
    if runtime == "seqmap_plain":  # the same without packed weights: nn.Linear (MKL's sgemm)
        return lambda beam: seqmap_decode(model, src, mask, beam, args.new_tokens)
    if runtime == "seqmap_other":  # packed by the library this CPU does not choose
        other = pack_linears(model, other_backend())
        return lambda beam: seqmap_decode(other, src, mask, beam, args.new_tokens)
    if runtime == "seqmap_int8":  # what `--quantize int8` gives translate, evaluate, generate and serve
        int8 = pack_linears(quantize(model, "int8"))
        return lambda beam: seqmap_decode(int8, src, mask, beam, args.new_tokens)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    hf = to_marian(model, cfg)
    return lambda beam: hf_decode(hf, src, mask, beam, args.new_tokens)


def serve(conn, runtime: str, args, ct2_dir: str | None) -> None:
    """A runtime's process (``Runtimes``): answer each job ``(beam,)`` with (seconds, outputs) until sent None."""
    decode = make_runner(runtime, args, ct2_dir)
    answer_jobs(conn, decode)


def answer_jobs(conn, decode) -> None:
    """A runtime process's loop: say "ready", then time ``decode(*job)`` for each job until sent None."""
    conn.send("ready")
    while (job := conn.recv()) is not None:
        start = time.perf_counter()
        outputs = decode(*job)
        conn.send((time.perf_counter() - start, outputs))


def other_backend() -> str:
    """The packing library seqmap does not use here ("mkl" or "onednn")."""
    return next(b for b in BACKENDS if b != packing_backend())


class Runtimes:
    """Runtimes (seqmap, transformers, CTranslate2), each in its own process.

    Each library keeps its own OpenMP thread pool to itself, as in a real deployment. In one
    process they do not: after a CTranslate2 call, torch's decoding in that process took 1.25x
    (beam-5) to 1.7x (greedy) longer here, for seqmap and transformers alike (torch's OpenMP workers
    stopped spinning between parallel regions and slept instead: about 5,700 voluntary context
    switches per greedy call against 0 before). See docs/benchmarks.md.
    """

    def __init__(self, names: list[str], target, *target_args):
        """Start ``target(conn, name, *target_args)`` in a process per name (``serve``: it answers jobs with
        ``answer_jobs``) and wait until each is ready."""
        ctx = multiprocessing.get_context("spawn")
        self.conns, self.procs = {}, []
        for name in names:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=target, args=(child, name, *target_args), daemon=True)
            proc.start()
            self.conns[name], self.procs = parent, [*self.procs, proc]
        for conn in self.conns.values():
            if conn.recv() != "ready":
                raise SystemExit("a runtime process failed to start")

    def run(self, name: str, *job) -> tuple[float, list[list[int]]]:
        """(seconds, outputs) of one job in runtime ``name``."""
        self.conns[name].send(job)
        return self.conns[name].recv()

    def close(self) -> None:
        for conn in self.conns.values():
            conn.send(None)
        for proc in self.procs:
            proc.join(timeout=30)


def paired_ratio(samples: dict[str, list[float]], generated: dict[str, int], other: str) -> float:
    """Median over rounds of seqmap's tokens/s over ``other``'s in the same round: the two calls of a round
    ran back to back, so a load that drifts during the run cancels out (a check on the ratio of medians)."""
    ratios = [(generated["seqmap"] / ours) / (generated[other] / theirs)
              for ours, theirs in zip(samples["seqmap"], samples[other], strict=True)]
    return round(statistics.median(ratios), 3)


def time_calls(runtimes: Runtimes, beam: int, repeats: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per call of each runtime, sampled round-robin after warm-up."""
    for name in runtimes.conns:
        for _ in range(warmup):
            runtimes.run(name, beam)
    samples = {name: [] for name in runtimes.conns}
    for _ in range(repeats):
        for name in runtimes.conns:
            time.sleep(0.05)  # the previous runtime's threads go idle
            samples[name].append(runtimes.run(name, beam)[0])
    return samples




def profile_runtime(runtime: str, args, beams: list[int], rows: int = 25) -> None:
    """Where seqmap's (or transformers') decoding time goes: torch operators (self CPU time) against the wall time."""
    from torch.profiler import ProfilerActivity, profile

    decode = make_runner(runtime, args, None)
    for beam in beams:
        decode(beam)  # warm-up
        start = time.perf_counter()
        decode(beam)
        wall = time.perf_counter() - start
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            decode(beam)
            profiled = time.perf_counter() - start
        events = prof.key_averages()
        op_time = sum(e.self_cpu_time_total for e in events) / 1e6
        print(f"\n== {runtime} {'greedy' if beam == 1 else f'beam-{beam}'}: {wall:.3f} s unprofiled, {profiled:.3f} s "
              f"profiled, of which {op_time:.3f} s inside torch operators (self CPU time of the calling thread)")
        print(events.table(sort_by="self_cpu_time_total", row_limit=rows))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5], help="beam sizes to time (1 = greedy)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per runtime; the median is reported")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke test: 8 sentences, 16 new tokens, 2 repeats")
    parser.add_argument("--profile", nargs="?", const="seqmap", choices=["seqmap", "hf", "int8"],
                        help="profile seqmap's (with 'hf' transformers', with 'int8' seqmap --quantize int8) "
                        "decoding instead of timing")
    parser.add_argument("--pack", choices=["auto", *BACKENDS], default="auto",
                        help=f"the library of seqmap's packed Linear weights (sets {BACKEND_VARIABLE}); "
                        "auto: this CPU's choice (seqmap.nn.packed)")
    parser.add_argument("--isa", choices=sorted(ISA_LIMITS),
                        help="keep torch, oneDNN, MKL and CTranslate2 to this instruction set's kernels (on a CPU with "
                        "AVX-512, an approximation of an AVX2-only CPU; checked in each runtime's process)")
    parser.add_argument("--no-int8", dest="int8", action="store_false",
                        help="skip the int8 rows (seqmap --quantize int8 vs CTranslate2 compute_type int8)")
    parser.add_argument("--json", type=Path, help="also write the rows to this file as a JSON list; "
                        "ratio_vs_X = seqmap tokens/s / X tokens/s (above 1: seqmap is faster)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sentences, args.new_tokens, args.repeats, args.warmup = 8, 16, 2, 1
    if args.pack != "auto":  # read by every runtime process (spawned with this environment)
        os.environ[BACKEND_VARIABLE] = args.pack
    if args.isa:  # before any runtime's process starts (they inherit this environment)
        limit_isa(args.isa)
    if args.profile:
        profile_runtime("seqmap_int8" if args.profile == "int8" else args.profile, args, args.beams)
        return

    import ctranslate2
    import transformers

    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as tmp:
        model, cfg = build_seqmap(args.seed)
        translator_dir = to_ctranslate2(to_marian(model, cfg), Path(tmp))
        del model
        others = ("seqmap_other",) if mkl_packing_available() else ()
        names = ["seqmap", "seqmap_plain", *others, "hf", "ct2", *(("seqmap_int8", "ct2_int8") if args.int8 else ())]
        runtimes = Runtimes(names, serve, args, translator_dir)
        try:
            rows = measure(runtimes, args, args.beams, f"{transformers.__version__}", f"{ctranslate2.__version__}")
        finally:
            runtimes.close()

    print(f"\nnew tokens per second (median of {args.repeats}; ratio = seqmap / other, above 1: seqmap is faster)")
    other = "seqmap_other_tok_s" in rows[0]
    print(f"seqmap's Linear weights packed by {rows[0]['packing']}"
          + (f"; other pack: {rows[0]['other_packing']}" if other else ""))
    print(f"{'mode':>7} {'seqmap':>8} {'HF':>8} {'CT2':>8} {'seqmap/HF':>10} {'seqmap/CT2':>11} "
          f"{'plain Linear':>13} {'packed/plain':>13}" + (f" {'other pack':>11} {'vs other':>9}" if other else ""))
    for r in rows:
        print(f"{r['mode']:>7} {r['seqmap_tok_s']:>8.0f} {r['hf_tok_s']:>8.0f} {r['ct2_tok_s']:>8.0f} "
              f"{r['ratio_vs_hf']:>10.2f} {r['ratio_vs_ct2']:>11.2f} {r['seqmap_plain_tok_s']:>13.0f} "
              f"{r['ratio_packed_vs_plain']:>13.2f}"
              + (f" {r['seqmap_other_tok_s']:>11.0f} {r['ratio_vs_other_pack']:>9.2f}" if other else ""))
    print("paired (median over rounds of the ratio within a round): " + "; ".join(
        f"{r['mode']} {r['ratio_vs_hf_paired']:.2f} vs HF, {r['ratio_vs_ct2_paired']:.2f} vs CT2" for r in rows))
    if args.int8:
        print(f"\nint8 (seqmap --quantize int8 vs CTranslate2 compute_type int8); {cpu_name()}")
        print(f"{'mode':>7} {'seqmap8':>8} {'CT2 int8':>8} {'ratio':>7} {'same as fp32':>13}")
        for r in rows:
            print(f"{r['mode']:>7} {r['seqmap_int8_tok_s']:>8.0f} {r['ct2_int8_tok_s']:>8.0f} "
                  f"{r['ratio_int8_vs_ct2_int8']:>7.2f} {r['int8_agree_fp32_sentences']:>9}/{r['sentences']}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {args.json}")


def measure(runtimes: Runtimes, args, beams: list[int], hf_version: str, ct2_version: str) -> list[dict]:
    print(f"torch {torch.__version__}, transformers {hf_version}, ctranslate2 {ct2_version}; {cpu_name()} "
          f"({os.cpu_count()} cores), {args.threads} threads, fp32; {args.sentences} sentences, source length "
          f"{args.src_len}, {args.new_tokens} new tokens; load average {os.getloadavg()[0]:.2f}")
    expected = args.sentences * args.new_tokens
    rows = []
    for beam in beams:
        mode = "greedy" if beam == 1 else f"beam-{beam}"
        outputs = {name: runtimes.run(name, beam)[1] for name in runtimes.conns}
        print(f"{mode}: seqmap output: {describe(outputs['seqmap'])}")
        agreement = {}
        for name in ("hf", "ct2"):
            a = agreement[name] = compare(name, outputs["seqmap"], outputs[name])
            print(f"{mode}: seqmap vs {name}: {a['rows_equal']}/{a['rows']} sentences and "
                  f"{a['tokens_equal']}/{a['tokens']} tokens equal"
                  + (f"; first difference: {a['first_mismatch']}" if a["first_mismatch"] else ""))
        for name, out in outputs.items():
            generated = sum(len(o) for o in out)
            if generated != expected and not name.endswith("int8"):
                raise SystemExit(f"{mode}: {name} generated {generated} tokens, expected {expected}: "
                                 "the comparison would not be fair")
        if beam == 1 and any(a["first_mismatch"] for a in agreement.values()):
            raise SystemExit("greedy outputs differ: the three runtimes do not compute the same model")

        samples = time_calls(runtimes, beam, args.repeats, args.warmup)
        secs = {name: statistics.median(s) for name, s in samples.items()}
        # int8 runtimes may end a sentence early (EOS): count the tokens each one generated
        generated = {name: sum(len(o) for o in out) for name, out in outputs.items()}
        tok_s = {name: generated[name] / s for name, s in secs.items()}
        rows.append({
            "mode": mode, "beam_size": beam, "sentences": args.sentences, "src_len": args.src_len,
            "new_tokens": expected,
            **{f"{name}_s": round(s, 4) for name, s in secs.items()},
            **{f"{name}_tok_s": round(t, 1) for name, t in tok_s.items()},
            "ratio_vs_hf": round(tok_s["seqmap"] / tok_s["hf"], 3),
            "ratio_vs_ct2": round(tok_s["seqmap"] / tok_s["ct2"], 3),
            "ratio_packed_vs_plain": round(tok_s["seqmap"] / tok_s["seqmap_plain"], 3),
            **{f"ratio_vs_{name}_paired": paired_ratio(samples, generated, name) for name in ("hf", "ct2")},
            "plain_agree_sentences": compare("seqmap_plain", outputs["seqmap"], outputs["seqmap_plain"])["rows_equal"],
            "packing": packing_backend(),
            **({"other_packing": other_backend(),
                "ratio_vs_other_pack": round(tok_s["seqmap"] / tok_s["seqmap_other"], 3),
                "other_pack_agree_sentences": compare("seqmap_other", outputs["seqmap"],
                                                      outputs["seqmap_other"])["rows_equal"]}
               if "seqmap_other" in outputs else {}),
            "agree_hf_sentences": agreement["hf"]["rows_equal"],
            "agree_ct2_sentences": agreement["ct2"]["rows_equal"],
            **({"ratio_int8_vs_ct2_int8": round(tok_s["seqmap_int8"] / tok_s["ct2_int8"], 3),
                "int8_agree_fp32_sentences": compare("seqmap_int8", outputs["seqmap"],
                                                     outputs["seqmap_int8"])["rows_equal"],
                "ct2_int8_agree_ct2_sentences": compare("ct2_int8", outputs["ct2"], outputs["ct2_int8"])["rows_equal"]}
               if args.int8 else {}),
            **({"seqmap_int8_new_tokens": generated["seqmap_int8"], "ct2_int8_new_tokens": generated["ct2_int8"]}
               if args.int8 else {}),
            "cpu": cpu_name(), "threads": args.threads,
            "samples_s": {name: [round(x, 4) for x in s] for name, s in samples.items()},
        })
        print(f"{mode}: tokens/s seqmap {tok_s['seqmap']:.0f}, hf {tok_s['hf']:.0f}, ct2 {tok_s['ct2']:.0f} "
              f"(load average {os.getloadavg()[0]:.2f})", flush=True)
    return rows


if __name__ == "__main__":
    main()
