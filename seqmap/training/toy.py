"""The smallest useful real run: train a model on a synthetic task, then decode a held-out set.

Trained by the one training loop (``seqmap.training.trainer.Trainer``) on a fresh random batch
per step: teacher forcing, AdamW, cross-entropy that ignores padding, a short linear warmup then
cosine decay to lr / 10, gradient clipping, fp32 on the CPU (``toy_train_config`` says how a
``ToyConfig`` maps onto ``train.*``). Held-out data comes from another seed and is decoded with
``seqmap.decoding.greedy``; the run reports exact-match (whole sequence) and token accuracy.

An encoder-decoder (transformer, rnn) maps source to target directly. A
decoder-only LM (lm, rnn_lm) sees one sequence ``<bos> src <sep> tgt <eos>`` with the loss on
``tgt <eos>`` only, and decodes by prefilling the prompt ``<bos> src <sep>``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from seqmap.config import ConfigError, ModelConfig, TrainConfig, from_dict
from seqmap.data.batching import Batch
from seqmap.data.synthetic import BOS, EOS, PAD, TASKS, SyntheticTask, render, strip
from seqmap.decoding.greedy import greedy
from seqmap.models.builder import build_model
from seqmap.training.trainer import Trainer


@dataclass
class ToyConfig:
    """The toy task and the training run."""

    task: str = "reverse"  # copy | reverse | sort
    vocab: int = 20  # vocabulary size, 3 specials (pad, bos, eos) included; the LM adds a separator
    min_len: int = 5  # shortest source, in symbols
    max_len: int = 12  # longest source, in symbols
    steps: int = 1000  # optimiser steps (one fresh random batch each)
    batch_size: int = 64  # sequences per step
    lr: float = 1e-3  # peak learning rate (AdamW)
    warmup: int = 100  # steps of linear warmup to lr (capped at steps - 1); then half a cosine to lr / 10
    weight_decay: float = 0.01  # AdamW weight decay
    clip: float = 1.0  # clip the global gradient norm to this (0 = off)
    seed: int = 0  # seeds the model initialisation and the training data
    eval_seed: int = 12345  # seeds the held-out data (must differ from seed)
    eval_size: int = 500  # held-out sequences to decode
    log_every: int = 100  # print the training loss every this many steps (0 = never)
    examples: int = 3  # held-out src/ref/hyp examples to print and return

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ConfigError(f"toy.task = {self.task!r} is not valid; choose one of {list(TASKS)}")
        for name in ("vocab", "min_len", "max_len", "steps", "batch_size", "eval_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"toy.{name} must be > 0, got {getattr(self, name)!r}")
        if self.vocab <= 3:
            raise ConfigError(f"toy.vocab = {self.vocab} leaves no symbols; ids 0-2 are pad, bos, eos, so use >= 4")
        if self.min_len > self.max_len:
            raise ConfigError(f"toy.min_len = {self.min_len} is larger than toy.max_len = {self.max_len}")
        if self.lr <= 0:
            raise ConfigError(f"toy.lr must be > 0, got {self.lr!r}")
        for name in ("warmup", "clip", "weight_decay", "log_every", "examples"):
            if getattr(self, name) < 0:
                raise ConfigError(f"toy.{name} must be >= 0, got {getattr(self, name)!r}")
        if self.eval_seed == self.seed:
            raise ConfigError(f"toy.eval_seed = {self.eval_seed} equals toy.seed; held-out data needs another seed")


@dataclass
class ToyRun:
    """A toy config file: the ``model:`` section and the ``toy:`` section."""

    model: ModelConfig = field(default_factory=ModelConfig)
    toy: ToyConfig = field(default_factory=ToyConfig)

    @classmethod
    def from_dict(cls, data: dict | None) -> ToyRun:
        """Parse a config dict (e.g. loaded YAML); unknown keys raise ``ConfigError`` naming the nearest one."""
        return from_dict(cls, data)


def _sep_id(cfg: ToyConfig) -> int:
    """The LM's separator between source and target: one id past the task's symbols."""
    return cfg.vocab


TOY_FAMILIES = ("transformer", "rnn", "convs2s", "lm", "rnn_lm")  # the families that map a sequence to a sequence
LM_FAMILIES = ("lm", "rnn_lm")  # decoder-only: trained and decoded on <bos> src <sep> tgt <eos>


def _with_vocab(model_cfg: ModelConfig, cfg: ToyConfig) -> ModelConfig:
    """Fill in the vocabulary sizes the task needs; reject a config that sets other ones."""
    if model_cfg.family not in TOY_FAMILIES:
        raise ConfigError(f"model.family = {model_cfg.family} cannot learn a toy task (copy, reverse, sort: "
                          f"sequence to sequence); use one of {', '.join(TOY_FAMILIES)}")
    if model_cfg.family in LM_FAMILIES:
        need = {"tgt_vocab": cfg.vocab + 1}  # + the separator; an LM has no source vocabulary
    else:
        need = {"src_vocab": cfg.vocab, "tgt_vocab": cfg.vocab}
    for name, value in need.items():
        given = getattr(model_cfg, name)
        if given not in (0, value):
            raise ConfigError(f"model.{name} = {given} does not fit toy.vocab = {cfg.vocab}; "
                              f"leave model.{name} unset (0) and it is set from the task")
    return dataclasses.replace(model_cfg, pad_id=PAD, **need)


def lm_sequences(batch: Batch, sep: int) -> tuple[Tensor, Tensor]:
    """Frame a seq2seq batch for a decoder-only LM.

    Returns (inputs, targets), both (B, S + T): inputs ``<bos> src <sep> tgt``,
    targets the same sequence shifted left with everything up to and including
    ``<sep>`` set to PAD, so the loss sees only ``tgt <eos>``.
    """
    src_len = batch.src_mask.sum(dim=1)  # (B,)
    tgt = batch.tgt_out  # (B, T): tgt <eos> <pad>...
    tgt_len = (tgt != PAD).sum(dim=1)  # target + eos
    rows = []
    for i in range(src_len.size(0)):
        s, t = int(src_len[i]), int(tgt_len[i])
        rows.append(torch.cat([torch.tensor([BOS]), batch.src[i, :s], torch.tensor([sep]), tgt[i, :t]]))
    width = max(len(r) for r in rows)
    seq = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        seq[i, : len(r)] = r
    inputs, targets = seq[:, :-1].clone(), seq[:, 1:].clone()
    prompt_end = src_len + 1  # targets before this index are the source and the separator
    targets[torch.arange(width - 1)[None, :] < prompt_end[:, None]] = PAD
    return inputs, targets


def framed(batch: Batch, family: str, sep: int) -> Batch:
    """The batch a model of ``family`` trains on: as it is for an encoder-decoder, LM-framed for an LM."""
    if family not in LM_FAMILIES:
        return batch
    inputs, targets = lm_sequences(batch, sep)
    return Batch.from_lm_windows(inputs, targets, pad_id=PAD)


def toy_train_config(cfg: ToyConfig) -> TrainConfig:
    """The trainer's settings for a toy run: AdamW, warmup then half a cosine to lr / 10, clipping, fp32 on the CPU."""
    warmup = min(cfg.warmup, cfg.steps - 1)  # cosine needs a step after the warmup
    return TrainConfig(seed=cfg.seed, device="cpu", precision="fp32", max_steps=cfg.steps, lr=cfg.lr,
                       betas=[0.9, 0.999], weight_decay=cfg.weight_decay, schedule="cosine", warmup=warmup,
                       min_lr=cfg.lr / 10, label_smoothing=0.0, clip_norm=cfg.clip,
                       log_every=cfg.log_every or cfg.steps, valid_every=cfg.steps)


def _decode(model: nn.Module, batch: Batch, family: str, sep: int, max_len: int) -> list[list[int]]:
    """Greedy hypotheses for one batch, each cut at its EOS (a PAD generated before it is kept: a wrong token)."""
    if family not in LM_FAMILIES:
        out = greedy(model, batch.src, batch.src_mask, bos=BOS, eos=EOS, max_len=max_len)
        return [strip(row, pad=-1) for row in out.tokens]
    # an LM prompt has no padding mask, so decode sources of one length together
    hyps: list[list[int]] = [[] for _ in range(batch.src.size(0))]
    src_len = batch.src_mask.sum(dim=1)
    for length in src_len.unique().tolist():
        rows = (src_len == length).nonzero().squeeze(1)
        src = batch.src[rows, :length]
        prompt = torch.cat([torch.full_like(src[:, :1], BOS), src, torch.full_like(src[:, :1], sep)], dim=1)
        out = greedy(model, None, None, bos=BOS, eos=EOS, max_len=max_len, prompt=prompt)
        for row, tokens in zip(rows.tolist(), out.tokens, strict=True):
            hyps[row] = strip(tokens, pad=-1)
    return hyps


def evaluate(model: nn.Module, task: SyntheticTask, cfg: ToyConfig, family: str) -> dict:
    """Decode ``cfg.eval_size`` held-out sequences greedily and score them.

    Exact match: the hypothesis (cut at its EOS) equals the reference. Token
    accuracy: the share of reference positions, EOS included, where the
    hypothesis has the same token.
    """
    sep = _sep_id(cfg)
    batch_size = min(cfg.eval_size, 250)
    n_batches = math.ceil(cfg.eval_size / batch_size)
    exact = tokens_right = tokens_total = seen = 0
    examples = []
    model.eval()
    for batch in task.batches(n_batches, batch_size, seed=cfg.eval_seed):
        hyps = _decode(model, batch, family, sep, max_len=task.max_len + 1)
        for i, hyp in enumerate(hyps):
            if seen == cfg.eval_size:
                break
            seen += 1
            ref = strip(batch.tgt_out[i])
            exact += hyp == ref
            ref_eos, hyp_eos = ref + [EOS], hyp + [EOS]  # a missing or early EOS counts as wrong
            tokens_right += sum(r == h for r, h in zip(ref_eos, hyp_eos, strict=False))
            tokens_total += len(ref_eos)
            if len(examples) < cfg.examples:
                examples.append({"src": render(strip(batch.src[i])), "ref": render(ref), "hyp": render(hyp)})
    return {"exact_match": exact / seen, "token_accuracy": tokens_right / tokens_total,
            "eval_size": seen, "examples": examples}


def train_toy(model_cfg: ModelConfig, cfg: ToyConfig | None = None, *,
              log: Callable[[str], None] | None = print) -> dict:
    """Train ``build_model(model_cfg)`` on ``cfg.task`` and evaluate it on held-out data.

    The vocabulary sizes of ``model_cfg`` are set from the task (leave them 0).
    ``log`` receives progress lines (None: silent).

    Returns:
        Metrics: exact_match, token_accuracy, eval_size, first_loss, final_loss
        (mean of the last 10% of steps), losses (every step), params, train_seconds,
        eval_seconds, and ``examples`` (dicts of rendered src/ref/hyp).
    """
    cfg = cfg or ToyConfig()
    say = log or (lambda _line: None)
    model_cfg = _with_vocab(model_cfg, cfg)
    task = SyntheticTask(cfg.task, cfg.vocab, cfg.min_len, cfg.max_len)
    sep = _sep_id(cfg)

    torch.manual_seed(cfg.seed)
    model = build_model(model_cfg).float()
    params = sum(p.numel() for p in model.parameters())
    say(f"toy: {model_cfg.family} on {cfg.task} (vocab {cfg.vocab}, lengths {cfg.min_len}-{cfg.max_len}), "
        f"{params:,} parameters, {cfg.steps} steps of {cfg.batch_size}")
    generator = torch.Generator().manual_seed(cfg.seed)

    def batches() -> Iterator[Batch]:
        while True:
            yield framed(task.batch(cfg.batch_size, generator), model_cfg.family, sep)

    losses: list[float] = []
    start = time.perf_counter()

    def on_step(step: int, loss: float, lr: float) -> None:
        losses.append(loss)
        if cfg.log_every and (step % cfg.log_every == 0 or step == cfg.steps):
            recent = losses[-cfg.log_every:]
            say(f"step {step:5d}  loss {sum(recent) / len(recent):.4f}  lr {lr:.2e}  "
                f"{time.perf_counter() - start:.1f}s")

    if Trainer(model, toy_train_config(cfg), torch.device("cpu")).run(batches(), on_step=on_step)["interrupted"]:
        raise KeyboardInterrupt  # a toy run keeps nothing: Ctrl-C ends it, as before the loop stopped cleanly
    train_seconds = time.perf_counter() - start

    start = time.perf_counter()
    metrics = evaluate(model, task, cfg, model_cfg.family)
    eval_seconds = time.perf_counter() - start
    tail = losses[-max(1, len(losses) // 10):]
    metrics.update(first_loss=losses[0], final_loss=sum(tail) / len(tail), losses=losses, params=params,
                   train_seconds=train_seconds, eval_seconds=eval_seconds)
    return metrics
