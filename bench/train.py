"""Training speed: seqmap vs torch.nn.Transformer vs Hugging Face MarianMTModel, one Transformer shape.

    python bench/train.py                   # fixed batch + a sample of real Multi30k batches
    python bench/train.py --quick           # smoke test: tiny batches, 2 timed steps
    python bench/train.py --full-epoch      # real batches: the whole Multi30k epoch, not a sample
    python bench/train.py --json out.json   # also write the rows as JSON
    python bench/train.py --profile --no-real   # also: where each step's time goes (torch.profiler)
    python bench/train.py --no-real --impls seqmap,seqmap_logits,seqmap_logits_torchdrop,marian   # ablation
    python bench/train.py --impls seqmap,seqmap_convs2s,torch   # beside it: ConvS2S of a similar size

The shape (issue 5): 3 + 3 layers, d_model 256, 4 heads, feed-forward 1024 (ReLU), post-LayerNorm,
one vocabulary of 8000 shared by source, target and output layer (tied), sinusoidal positions,
dropout 0.1 where the paper puts it (embeddings, each sublayer's output; none inside the feed-forward
or on attention weights: Marian's defaults, ``model.ff_dropout=0`` in seqmap, the feed-forward's
inner dropout removed from nn.Transformer's layers), label-smoothed (0.1) cross-entropy, gradient
clipping at 1.0. One *step* is what a trainer does per batch: forward, loss, backward, clip,
optimiser step, zero the gradients. All three use the optimiser ``seqmap train`` builds
(``make_optimizer``: AdamW, fused kernel, no decay on biases and norms), so that the comparison is of
the models and their losses.

Implementations (all PyTorch, all fp32 on the CPU, each in train mode with dropout on):

* seqmap: ``build_model`` and ``output_nll`` (the output layer and the label-smoothed loss in one
  chunked pass, no (N, V) logits), what ``seqmap train`` runs for a Transformer in float32.
* torch: ``torch.nn.Transformer`` (batch-first) with an ``nn.Embedding`` scaled by sqrt(D), a fixed
  sinusoidal table and an output layer tied to the embedding; ``F.cross_entropy`` with
  ``label_smoothing``. (nn.Transformer adds a final LayerNorm to each stack; seqmap's post-LN does not.)
* marian: ``MarianMTModel`` built from a ``MarianConfig`` of the same shape (its default attention
  implementation), loss as for torch.
* seqmap_convs2s (not a peer: another architecture of a similar parameter count, beside the Transformer):
  ``configs/multi30k_de_en_convs2s.yaml``'s ConvS2S, logits then ``label_smoothed_nll``. Its GFLOP/s and
  MFU are not computed (``step_flops`` counts a Transformer's matmuls): nan.

Two measurements:

1. **Fixed batch**: B sentences of source and target length L (no padding; B * L is about 4096
   target tokens), random ids. Each implementation is warmed up, then steps are taken round-robin
   (so that background load hits all alike) and the median step time gives target tokens/s. Model
   FLOPs utilisation (MFU) = the step's matmul FLOPs (counted analytically, see ``step_flops``) /
   step time / the CPU's fp32 matmul peak, which the script measures itself (best of square
   ``torch.mm`` sizes at the same thread count).
2. **Real batches**: Multi30k de-en training pairs (raw cased text from ``--data``) encoded with
   one 8000-piece sentencepiece BPE model, in two batchings of the same epoch, and every
   implementation trains on both: token-budget batches (``token_budget_batches``, 4096 tokens of the
   longer side per batch, length-bucketed, as fairseq and Marian batch too) and the same pairs
   shuffled into fixed-size padded batches of ``n`` sentences, ``n`` chosen so that both hold the
   same number of real target tokens per batch on average (so both take the same number of optimiser
   steps per epoch). Within a batching, steps are taken round-robin, the same batch for all, as for
   the fixed batch. Speed is *real* (non-pad) target tokens per second; the comparison with the peers
   is within one batching, and bucketed over padded is each implementation's bucketing gain. By
   default a seeded random sample of ``--real-batches`` batches of each epoch is timed (an unbiased
   estimate of the epoch's speed); ``--full-epoch`` times every batch.

Target tokens count the EOS each target ends with (the decoder's outputs), not the BOS it starts with.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/machine.py

from machine import cpu_name  # noqa: E402

from seqmap.config import ModelConfig, TrainConfig  # noqa: E402
from seqmap.data.batching import collate_pairs  # noqa: E402
from seqmap.data.samplers import token_budget_batches  # noqa: E402
from seqmap.data.tokenizers import BOS, EOS, PAD  # noqa: E402
from seqmap.models.builder import build_model  # noqa: E402
from seqmap.nn.dropout import Dropout  # noqa: E402
from seqmap.training.loss import label_smoothed_nll, output_nll  # noqa: E402
from seqmap.training.trainer import make_optimizer  # noqa: E402

SHAPE = dict(d_model=256, n_heads=4, d_ff=1024, layers=3, vocab=8000, dropout=0.1)
SMOOTHING, CLIP, LR = 0.1, 1.0, 5e-4
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


# -- three models of one shape; each takes (src, src_pad, tgt_in) and returns (B, T, V) logits ----------


def build_seqmap(features: bool = True, torch_dropout: bool = False, shape: dict | None = None) -> nn.Module:
    """seqmap's model; ``features``: return the final states for ``output_nll`` (else logits);
    ``torch_dropout``: its dropout layers call ``F.dropout`` instead of seqmap's (for the ablation);
    ``shape``: keys as ``SHAPE`` (the default)."""
    shape = shape or SHAPE
    cfg = ModelConfig(family="transformer", src_vocab=shape["vocab"], tgt_vocab=shape["vocab"], pad_id=PAD,
                      d_model=shape["d_model"], n_heads=shape["n_heads"], d_ff=shape["d_ff"],
                      enc_layers=shape["layers"], dec_layers=shape["layers"], dropout=shape["dropout"],
                      ff_dropout=0.0, norm_position="post", activation="relu", positional="sinusoidal",
                      scale_embeddings=True, tie_embeddings=True, share_vocab=True)
    model = build_model(cfg)
    if torch_dropout:
        for module in model.modules():
            if isinstance(module, Dropout):
                module.forward = lambda x, m=module: F.dropout(x, m.p, m.training)

    class Seqmap(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, src, src_pad, tgt_in):
            mask = None if src_pad is None else ~src_pad  # seqmap: True = may attend
            return self.model(src, mask, tgt_in, features=features)  # features: the loss applies the output layer

    return Seqmap()


def sinusoids(length: int, d: int) -> Tensor:
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(length, d)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return table


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with the embeddings, positions and output layer a user has to add."""

    def __init__(self):
        super().__init__()
        d, v = SHAPE["d_model"], SHAPE["vocab"]
        self.embed = nn.Embedding(v, d, padding_idx=PAD)
        nn.init.normal_(self.embed.weight, std=d**-0.5)
        self.register_buffer("positions", sinusoids(1024, d), persistent=False)
        self.dropout = nn.Dropout(SHAPE["dropout"])
        self.core = nn.Transformer(d, SHAPE["n_heads"], SHAPE["layers"], SHAPE["layers"], SHAPE["d_ff"],
                                   SHAPE["dropout"], batch_first=True)
        for layer in [*self.core.encoder.layers, *self.core.decoder.layers]:
            layer.dropout = nn.Identity()  # the dropout inside the feed-forward (after ReLU): none, as in the others
        self.out = nn.Linear(d, v, bias=False)
        self.out.weight = self.embed.weight

    def embed_tokens(self, ids: Tensor) -> Tensor:
        x = self.embed(ids) * math.sqrt(self.embed.embedding_dim) + self.positions[: ids.size(1)]
        return self.dropout(x)

    def forward(self, src, src_pad, tgt_in):
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), dtype=torch.float32)
        h = self.core(self.embed_tokens(src), self.embed_tokens(tgt_in), tgt_mask=causal, tgt_is_causal=True,
                      src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad)
        return self.out(h)


class Marian(nn.Module):
    def __init__(self, shape: dict | None = None):
        super().__init__()
        from transformers import MarianConfig, MarianMTModel

        shape = shape or SHAPE
        config = MarianConfig(
            vocab_size=shape["vocab"], d_model=shape["d_model"], encoder_layers=shape["layers"],
            decoder_layers=shape["layers"], encoder_attention_heads=shape["n_heads"],
            decoder_attention_heads=shape["n_heads"], encoder_ffn_dim=shape["d_ff"], decoder_ffn_dim=shape["d_ff"],
            activation_function="relu", max_position_embeddings=1024, scale_embedding=True,
            dropout=shape["dropout"], attention_dropout=0.0, activation_dropout=0.0, pad_token_id=PAD,
            eos_token_id=EOS, decoder_start_token_id=BOS, share_encoder_decoder_embeddings=True,
            tie_word_embeddings=True)
        self.model = MarianMTModel(config)

    def forward(self, src, src_pad, tgt_in):
        attn = None if src_pad is None else (~src_pad).long()
        return self.model(input_ids=src, attention_mask=attn, decoder_input_ids=tgt_in).logits


def build_seqmap_convs2s() -> nn.Module:
    """ConvS2S of the Multi30k rung (E 256, C 256, kernel 3, 4 + 3 layers, dropout 0.25), returning logits."""
    cfg = ModelConfig(family="convs2s", src_vocab=SHAPE["vocab"], tgt_vocab=SHAPE["vocab"], pad_id=PAD,
                      emb_size=256, hidden_size=256, kernel_size=3, enc_layers=4, dec_layers=3, dropout=0.25,
                      positional="learned", share_vocab=True, tie_embeddings=True)
    model = build_model(cfg)

    class Seqmap(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, src, src_pad, tgt_in):
            return self.model(src, None if src_pad is None else ~src_pad, tgt_in)

    return Seqmap()


IMPLS: dict[str, Callable[[], nn.Module]] = {
    "seqmap": build_seqmap, "torch": TorchTransformer, "marian": Marian,
    # ablations of seqmap (not peers): logits then label_smoothed_nll; and with torch's dropout as well
    "seqmap_logits": lambda: build_seqmap(features=False),
    "seqmap_logits_torchdrop": lambda: build_seqmap(features=False, torch_dropout=True),
    "seqmap_convs2s": build_seqmap_convs2s,  # beside the Transformer, not a peer (see the module docstring)
}


def loss_fn(name: str, model: nn.Module, logits: Tensor, tgt_out: Tensor) -> Tensor:
    if name == "seqmap":  # ``logits`` are the final features here
        return output_nll(logits, model.model.output_layer, tgt_out, PAD, SMOOTHING)[0]
    if name.startswith("seqmap_"):
        return label_smoothed_nll(logits, tgt_out, PAD, SMOOTHING)[0]
    return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD, label_smoothing=SMOOTHING,
                           reduction="sum")


class Trainee:
    """One implementation with its optimiser: ``step`` is a whole training step on one batch."""

    def __init__(self, name: str, seed: int):
        torch.manual_seed(seed)
        self.name, self.model = name, IMPLS[name]().train()
        self.params = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        self.opt = make_optimizer(self.model, TrainConfig(lr=LR, betas=[0.9, 0.98]), torch.device("cpu"))

    def step(self, src: Tensor, src_pad: Tensor | None, tgt_in: Tensor, tgt_out: Tensor) -> float:
        logits = self.model(src, src_pad, tgt_in)
        n = int((tgt_out != PAD).sum())
        loss = loss_fn(self.name, self.model, logits, tgt_out) / n
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), CLIP)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.item()


# -- FLOPs and the machine's peak ---------------------------------------------------------------------------


def step_flops(batch: int, src_len: int, tgt_len: int, shape: dict | None = None) -> float:
    """Matmul FLOPs of one training step (forward x 3: backward costs two forwards), padding included.

    Per layer and token, in multiply-adds: projections 4 D^2 (Q, K, V, out), feed-forward 2 D F,
    attention scores and weighted values 2 L D over the L keys (computed in full, as every
    implementation here does, causal or not). The decoder's cross-attention projects queries and
    outputs per target token (2 D^2) and keys and values per source token (2 D^2). The output layer
    is D V per target token. Embedding lookups, norms, softmax and the optimiser are not counted.
    ``shape``: keys as ``SHAPE`` (the default).
    """
    shape = shape or SHAPE
    d, f, v, n = shape["d_model"], shape["d_ff"], shape["vocab"], shape["layers"]
    s, t = batch * src_len, batch * tgt_len
    enc = n * s * (4 * d * d + 2 * d * f + 2 * src_len * d)
    dec = n * (t * (4 * d * d + 2 * tgt_len * d + 2 * d * d + 2 * src_len * d + 2 * d * f) + s * 2 * d * d)
    return 3 * 2 * (enc + dec + t * d * v)


def matmul_peak(repeats: int = 5) -> tuple[float, int]:
    """Best fp32 ``torch.mm`` FLOP/s over a few square sizes, at the current thread count."""
    best, best_n = 0.0, 0
    for n in (512, 1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            rate = 2 * n**3 / (time.perf_counter() - start)
            if rate > best:
                best, best_n = rate, n
    return best, best_n


# -- timing -----------------------------------------------------------------------------------------------


def round_robin(trainees: list[Trainee], batches: Callable[[int], list[tuple]], steps: int, warmup: int
                ) -> dict[str, list[float]]:
    """Seconds per step of each trainee, interleaved: trainee order rotates every step.

    ``batches(i)`` gives the i-th step's batch per trainee (the same batch for all of them).
    """
    times: dict[str, list[float]] = {t.name: [] for t in trainees}
    for i in range(warmup + steps):
        batch = batches(i)
        order = trainees[i % len(trainees):] + trainees[: i % len(trainees)]
        for trainee in order:
            start = time.perf_counter()
            trainee.step(*batch)
            if i >= warmup:
                times[trainee.name].append(time.perf_counter() - start)
    return times


def fixed_batch(args, trainees: list[Trainee], peak: float) -> list[dict]:
    length = args.length
    batch = args.tokens // length
    g = torch.Generator().manual_seed(args.seed)
    src = torch.randint(4, SHAPE["vocab"], (batch, length), generator=g)
    tgt = torch.randint(4, SHAPE["vocab"], (batch, length + 1), generator=g)
    tgt[:, 0] = BOS
    data = (src, None, tgt[:, :-1], tgt[:, 1:])
    times = round_robin(trainees, lambda i: data, args.steps, args.warmup)
    flops = step_flops(batch, length, length)
    rows = []
    for t in trainees:
        median = statistics.median(times[t.name])
        f = math.nan if t.name == "seqmap_convs2s" else flops  # step_flops counts a Transformer's matmuls
        rows.append(dict(bench="fixed_batch", impl=t.name, params=t.params, batch=batch, src_len=length,
                         tgt_len=length, tgt_tokens=batch * length, step_s=median, tok_s=batch * length / median,
                         gflop_s=f / median / 1e9, mfu=f / median / peak, samples_s=times[t.name]))
    return rows


# -- profile ---------------------------------------------------------------------------------------------

# op-name fragments -> a kind of work; the first match wins (names of aten ops and their backwards)
OP_KINDS = [
    ("optimizer", ("adam", "_foreach")),
    ("loss", ("nll", "cross_entropy", "log_softmax", "logsumexp", "smoothed", "outputnll")),
    ("layernorm", ("layer_norm",)),
    ("attention", ("attention", "flash", "sdpa", "softmax")),
    ("matmul", ("addmm", "mm", "linear", "matmul")),
    ("embedding", ("embedding",)),
]


def op_kind(name: str) -> str:
    low = name.lower()
    return next((kind for kind, parts in OP_KINDS if any(p in low for p in parts)), "elementwise/other")


def profile(args, trainees: list[Trainee]) -> list[dict]:
    """Self CPU time per kind of work in one fixed-batch step of each implementation (torch.profiler)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    length = args.length
    g = torch.Generator().manual_seed(args.seed)
    src = torch.randint(4, SHAPE["vocab"], (args.tokens // length, length), generator=g)
    tgt = torch.randint(4, SHAPE["vocab"], (args.tokens // length, length + 1), generator=g)
    tgt[:, 0] = BOS
    rows = []
    for t in trainees:
        t.step(src, None, tgt[:, :-1], tgt[:, 1:])  # warm
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            t.step(src, None, tgt[:, :-1], tgt[:, 1:])
        kinds: dict[str, float] = {}
        for e in prof.key_averages():
            kinds[op_kind(e.key)] = kinds.get(op_kind(e.key), 0.0) + e.self_cpu_time_total / 1e3
        total = sum(kinds.values())
        for kind, ms in sorted(kinds.items(), key=lambda kv: -kv[1]):
            rows.append(dict(bench="profile", impl=t.name, kind=kind, self_ms=ms, share=ms / total))
    return rows


# -- real batches ----------------------------------------------------------------------------------------


def multi30k_pairs(data: Path, limit: int | None) -> list[tuple[list[int], list[int]]]:
    """Multi30k train de-en, encoded with one BPE model of 8000 pieces trained on both sides."""
    import gzip

    from seqmap.data.tokenizers import train_tokenizer

    def lines(name: str) -> list[str]:
        path = data / name
        if not path.exists():
            raise SystemExit(f"{path} not found: pass --data DIR holding Multi30k's train.de.gz and train.en.gz")
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read().splitlines()

    de, en = lines("train.de.gz"), lines("train.en.gz")
    if limit:
        de, en = de[:limit], en[:limit]
    tok = train_tokenizer("bpe", de + en, SHAPE["vocab"])
    if tok.vocab_size > SHAPE["vocab"]:
        raise SystemExit(f"the BPE model has {tok.vocab_size} pieces, more than the model's {SHAPE['vocab']}")
    return [(tok.encode(s), tok.encode(t)) for s, t in zip(de, en)]


def real_batches(args, trainees: list[Trainee], pairs) -> list[dict]:
    """Every implementation on both batchings of the same epoch, round-robin per batch.

    bucketed: seqmap's token-budget batches (length-bucketed), which the peers' own toolkits
    also offer (fairseq's and Marian's token-budget batching); padded: the same pairs shuffled
    into fixed-size batches. Like with like is each batching's column; the bucketing gain is
    one implementation's bucketed speed over its padded speed.
    """
    src_len = [len(s) for s, _ in pairs]
    tgt_len = [len(t) + 1 for _, t in pairs]  # + EOS (or BOS on the input side)
    bucketed = token_budget_batches(src_len, tgt_len, args.tokens, shuffle=True, seed=args.seed)
    real_per_batch = sum(tgt_len) / len(bucketed)
    size = max(1, round(real_per_batch / statistics.mean(tgt_len)))
    order = list(range(len(pairs)))
    random.Random(args.seed).shuffle(order)
    padded = [order[i: i + size] for i in range(0, len(order), size)]
    epoch = {"bucketed": bucketed, "padded": padded}
    pick = random.Random(args.seed + 1)
    plans = dict(epoch) if args.full_epoch else {k: pick.sample(v, min(args.real_batches, len(v)))
                                                 for k, v in epoch.items()}

    def collate(indices):
        b = collate_pairs([pairs[i] for i in indices])
        return b.src, ~b.src_mask, b.tgt_in, b.tgt_out  # src_pad: True at padding

    rows = []
    for batching, plan in plans.items():
        batches = [collate(indices) for indices in plan]
        warm = [collate(indices) for indices in plan[: args.warmup]]  # warm up on this batching's shapes
        steps = warm + batches
        times = round_robin(trainees, steps.__getitem__, len(batches), len(warm))
        real = sum(int((b[3] != PAD).sum()) for b in batches)
        total = sum(b[3].numel() for b in batches)
        for trainee in trainees:
            seconds = sum(times[trainee.name])
            rows.append(dict(bench="real_batches", impl=trainee.name, batching=batching, batches=len(plan),
                             epoch_batches=len(epoch[batching]), sentences_per_padded_batch=size,
                             real_tgt_tokens=real, padded_tgt_tokens=total, seconds=seconds,
                             real_tok_s=real / seconds))
    return rows


# -- main ------------------------------------------------------------------------------------------------


def table(rows: list[dict]) -> str:
    fixed = [r for r in rows if r["bench"] == "fixed_batch"]
    out = []
    if fixed:
        best_peer = max(r["tok_s"] for r in fixed if not r["impl"].startswith("seqmap"))
        r0 = fixed[0]
        out += [f"fixed batch: B={r0['batch']}, L={r0['src_len']}, {r0['tgt_tokens']} target tokens",
                "| impl | params | step ms | tgt tok/s | GFLOP/s | MFU | vs fastest peer |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for r in fixed:
            out.append(f"| {r['impl']} | {r['params'] / 1e6:.2f}M | {r['step_s'] * 1e3:.0f} | {r['tok_s']:,.0f} | "
                       f"{r['gflop_s']:.1f} | {r['mfu']:.0%} | {r['tok_s'] / best_peer:.2f} |")
    prof = [r for r in rows if r["bench"] == "profile"]
    if prof:
        impls = list(dict.fromkeys(r["impl"] for r in prof))
        kinds = list(dict.fromkeys(r["kind"] for r in prof))
        ms = {(r["impl"], r["kind"]): r["self_ms"] for r in prof}
        out += ["", "profile of one fixed-batch step: self CPU ms per kind of work (torch.profiler)",
                "| kind | " + " | ".join(impls) + " |", "|---|" + "---:|" * len(impls)]
        for kind in kinds + ["total"]:
            cells = [sum(v for (i, _), v in ms.items() if i == impl) if kind == "total" else ms.get((impl, kind), 0.0)
                     for impl in impls]
            out.append(f"| {kind} | " + " | ".join(f"{c:,.0f}" for c in cells) + " |")
    real = [r for r in rows if r["bench"] == "real_batches"]
    if real:
        def best_peer(batching: str) -> float:  # the fastest peer on the same batches: like with like
            peers = [r["real_tok_s"] for r in real if r["batching"] == batching and not r["impl"].startswith("seqmap")]
            return max(peers) if peers else float("nan")

        speed = {(r["impl"], r["batching"]): r["real_tok_s"] for r in real}
        out += ["", "real batches (Multi30k de-en train): real target tokens per second, round-robin per batch",
                "| impl | batching | batches timed | real tok | padded tok | pad share | real tok/s | "
                "vs fastest peer, same batches | bucketing gain |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in real:
            pad = 1 - r["real_tgt_tokens"] / r["padded_tgt_tokens"]
            gain = speed.get((r["impl"], "padded"))
            gain = f"{r['real_tok_s'] / gain:.2f}" if r["batching"] == "bucketed" and gain else ""
            out.append(f"| {r['impl']} | {r['batching']} | {r['batches']}/{r['epoch_batches']} | "
                       f"{r['real_tgt_tokens']:,} | {r['padded_tgt_tokens']:,} | {pad:.0%} | "
                       f"{r['real_tok_s']:,.0f} | {r['real_tok_s'] / best_peer(r['batching']):.2f} | {gain} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impls", default="seqmap,torch,marian",
                   help="comma-separated subset of seqmap,torch,marian; also seqmap_logits and "
                        "seqmap_logits_torchdrop (seqmap without its fused output loss, and also without its dropout), "
                        "and seqmap_convs2s (ConvS2S of a similar size)")
    p.add_argument("--tokens", type=int, default=4096, help="target tokens per batch")
    p.add_argument("--length", type=int, default=32, help="fixed batch: source and target length")
    p.add_argument("--steps", type=int, default=10, help="fixed batch: timed steps per implementation")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before timing")
    p.add_argument("--real-batches", type=int, default=40, help="real batches: batches sampled per epoch")
    p.add_argument("--full-epoch", action="store_true", help="real batches: time the whole epoch")
    p.add_argument("--no-real", action="store_true", help="skip the real-batch measurement")
    p.add_argument("--profile", action="store_true", help="also profile one fixed-batch step per implementation")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with Multi30k train.{de,en}.gz")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="smoke test: small batches, 2 steps; not a result")
    p.add_argument("--json", type=Path, help="write the rows to this file as JSON")
    args = p.parse_args(argv)
    limit = None
    if args.quick:
        args.tokens, args.length, args.steps, args.warmup, args.real_batches, limit = 256, 16, 2, 1, 3, 2000
    torch.set_num_threads(args.threads)
    names = [n.strip() for n in args.impls.split(",") if n.strip()]
    unknown = sorted(set(names) - set(IMPLS))
    if unknown:
        p.error(f"unknown --impls {unknown}; choose from {sorted(IMPLS)}")
    peak, peak_n = matmul_peak()
    print(f"# {cpu_name()}, {args.threads} threads, torch {torch.__version__}; "
          f"fp32 matmul peak {peak / 1e9:.1f} GFLOP/s (torch.mm {peak_n}x{peak_n})", flush=True)
    trainees = [Trainee(n, args.seed) for n in names]
    rows = fixed_batch(args, trainees, peak)
    print(table(rows), flush=True)
    if args.profile:
        prof = profile(args, trainees)
        print(table(prof), flush=True)
        rows += prof
    if not args.no_real:
        pairs = multi30k_pairs(args.data, limit)
        real = real_batches(args, [Trainee(n, args.seed) for n in names], pairs)
        print("\n" + table(real))
        rows += real
    meta = dict(cpu=cpu_name(), threads=args.threads, torch=torch.__version__, peak_flop_s=peak)
    if args.json:
        args.json.write_text(json.dumps([{**meta, **r} for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
