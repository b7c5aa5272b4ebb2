"""The training loop, written once: ``Trainer`` takes optimiser steps over any stream of batches.

``Trainer`` owns the optimiser, the learning-rate schedule, mixed precision, gradient clipping,
NaN handling, logging and the ``train.*`` stopping rules; the caller brings the model, the batches
and what happens at a validation. Two callers train through it: ``seqmap.training.run_trainer.RunTrainer``
(one config on real data, with a run directory) and ``seqmap.training.toy`` (a synthetic task, no run directory).

Each optimiser step sums the gradients of ``accum_steps`` batches (on every rank)
and normalises by the number of target tokens in all of them, so 2 processes with
one batch each take exactly the step one process takes with both batches.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from seqmap.config import TrainConfig
from seqmap.data.batching import NOT_SCORED, Batch, LabelBatch
from seqmap.data.tokenizers import PAD
from seqmap.nn.attention import avoid_cudnn_attention
from seqmap.training import distributed
from seqmap.training.carry import CarriedState
from seqmap.training.loss import fused_output_layer, label_nll, label_smoothed_nll, output_nll
from seqmap.training.runlog import RunLog
from seqmap.training.schedule import make_schedule, set_lr


class TrainingError(RuntimeError):
    """Training cannot go on; the message says why and what to change."""


INTERRUPTED = "interrupted (Ctrl-C)"  # the stop reason of a run the user interrupted


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for fp32. On CPU always fp32 (no fast half-precision matmuls)."""
    if device.type != "cuda" or precision == "fp32":
        return None
    if precision == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    return torch.bfloat16 if precision == "bf16" else torch.float16


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: matrices (weights, embeddings) decay; vectors (biases, norm gains) do not.

    Decaying a LayerNorm gain pulls it towards 0, which only shrinks the layer's output; the usual
    practice (GPT-2, nanoGPT, fairseq's ``--weight-decay`` with no-decay lists) exempts them.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, t: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """``train.optimizer`` over ``param_groups``: AdamW (the fused kernel, one pass per tensor, on CPU and
    CUDA), plain SGD with optional momentum (the classic recipe for LSTM language models), or Adam with
    L2 regularisation coupled into the gradient (``weight_decay * w`` added before the moments), on every
    parameter, biases included: the GAT paper's optimiser (the authors' code adds ``weight_decay / 2 *
    sum(w^2)`` over all variables to the loss).

    The default for-each-tensor AdamW runs about ten elementwise kernels per parameter
    tensor (exp_avg, exp_avg_sq, sqrt, division, ...), each a pass over memory.
    """
    if t.optimizer == "adam":
        return torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=t.lr, betas=tuple(t.betas),
                                weight_decay=t.weight_decay)
    if t.optimizer == "sgd":
        return torch.optim.SGD(param_groups(model, t.weight_decay), lr=t.lr, momentum=t.momentum)
    return torch.optim.AdamW(param_groups(model, t.weight_decay), lr=t.lr, betas=tuple(t.betas),
                             fused=device.type in ("cpu", "cuda"))


def make_lr_schedule(t: TrainConfig) -> Callable[[int], float]:
    """``train.schedule`` with its ``train.*`` parameters: a function ``step -> lr``."""
    params = dict(warmup=t.warmup, lr=t.lr)
    if t.schedule == "cosine":
        if t.max_steps <= 0:
            raise TrainingError("train.schedule=cosine needs train.max_steps (the step where it ends)")
        params.update(total=t.max_steps, min_lr=t.min_lr)
    elif t.schedule == "step":
        params.update(decay_start=t.decay_start, decay_every=t.decay_every, decay_factor=t.decay_factor)
    try:
        return make_schedule(t.schedule, **params)
    except ValueError as e:  # e.g. cosine over fewer steps than the warm-up
        raise TrainingError(f"train.schedule={t.schedule}: {e} (check train.warmup and train.max_steps)") from None


class Trainer:
    """The one training loop: optimiser steps over a stream of batches until a ``train.*`` stopping rule fires.

    Args:
        model: the model to train (on ``device`` already).
        t: the optimisation: optimiser, schedule, precision, clipping, ``accum_steps``, logging and
            the stopping rules (``max_steps``, ``max_time``, ``patience``, ``max_bad_steps``).
        log: where log lines and ``train`` metrics go (default: nowhere).
        dist: this process's place in a distributed run (default: a single process).
        carry: the model wrapped in a ``CarriedState`` (``train.stateful``), trained in its place.
        progress: show a progress bar (on a terminal, in the main process).
    """

    def __init__(self, model: nn.Module, t: TrainConfig, device: torch.device, *, log: RunLog | None = None,
                 dist: distributed.Dist | None = None, carry: CarriedState | None = None, progress: bool = False):
        self.model, self.train_cfg, self.device = model, t, device
        self.log = log or RunLog(None)
        self.dist = dist or distributed.Dist()
        self.carry = carry
        trained = carry or model  # what the training step calls
        self.ddp = (nn.parallel.DistributedDataParallel(trained, device_ids=[device] if device.type == "cuda"
                                                         else None) if self.dist.enabled else trained)
        self.optimizer = make_optimizer(model, t, device)
        self.schedule = make_lr_schedule(t)
        self.amp_dtype = autocast_dtype(t.precision, device)
        if device.type == "cuda":
            avoid_cudnn_attention()  # token-budget batches change shape every step (seqmap.nn.attention)
        self.scaler = torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None
        # the output layer and the loss in one chunked pass (no (N, V) logits) where the model offers its
        # features and runs in float32; otherwise logits, then the loss
        self.fused_output = carry is None and self.amp_dtype is None and fused_output_layer(model) is not None
        self.progress = progress
        self.ctc_weight = getattr(model, "ctc_weight", 0.0)  # speech: the weight of the encoder's CTC loss
        # the counters a checkpoint stores (RunTrainer adds the data position)
        self.state = {"step": 0, "best": None, "bad_validations": 0, "skipped_steps": 0, "train_seconds": 0.0,
                      "tokens": 0}
        self.interrupted = False  # set by the first Ctrl-C: the loop stops after the step it is in

    @contextmanager
    def _stop_on_interrupt(self) -> Iterator[None]:
        """The first Ctrl-C (SIGINT) ends the run after the current step, with weights and optimiser consistent
        for a checkpoint; a second one interrupts at once. One process in the main thread only: the processes
        of a distributed run would not stop at the same step."""
        if self.dist.enabled or threading.current_thread() is not threading.main_thread():
            yield
            return

        def request_stop(signum, frame) -> None:
            self.interrupted = True
            signal.signal(signal.SIGINT, previous)
            self.log.info("Ctrl-C: stopping after this step and saving it (Ctrl-C again stops at once, unsaved)")

        previous = signal.signal(signal.SIGINT, request_stop)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    # -- one optimiser step ---------------------------------------------------------------
    def step(self, micro_batches: list[Batch | LabelBatch]) -> tuple[float, float, int] | None:
        """Forward/backward over the micro-batches, then one update. Returns (loss, nll, tokens) or None if skipped.

        A ``Batch`` is scored on its target tokens, a ``LabelBatch`` on its labels ("tokens" then count labels).
        """
        t = self.train_cfg
        n_tokens = sum(b.n_tokens for b in micro_batches)
        global_tokens = distributed.all_reduce_sum([float(n_tokens)], self.dist, self.device)[0]
        loss_total = nll_total = 0.0
        self.ddp.train()
        for i, batch in enumerate(micro_batches):
            batch = batch.to(self.device)
            last = i == len(micro_batches) - 1
            sync = nullcontext() if last or not self.dist.enabled else self.ddp.no_sync()
            amp = (torch.autocast(self.device.type, dtype=self.amp_dtype) if self.amp_dtype else nullcontext())
            with sync, amp:
                if isinstance(batch, LabelBatch):  # a classifier: one label per example, logits (B, C)
                    logits = self.ddp(batch.src, batch.src_mask)
                    loss, nll, _ = label_nll(logits, batch.labels, t.label_smoothing, NOT_SCORED)
                else:
                    # a speech model with model.ctc_weight > 0 also returns its encoder's summed CTC NLL
                    extra = {"features": True} if self.fused_output else {}
                    if self.ctc_weight:
                        extra["ctc_targets"] = batch.tgt_out
                    out = self.ddp(batch.src, batch.src_mask, batch.tgt_in, **extra)
                    out, ctc = out if self.ctc_weight else (out, None)
                    if self.fused_output:
                        loss, nll, _ = output_nll(out, self.model.output_layer, batch.tgt_out, PAD, t.label_smoothing)
                    else:
                        loss, nll, _ = label_smoothed_nll(out, batch.tgt_out, PAD, t.label_smoothing)
                    if ctc is not None:  # hybrid CTC/attention training (Watanabe et al. 2017); nll stays attention's
                        loss = (1 - self.ctc_weight) * loss + self.ctc_weight * ctc
                # DDP averages gradients over ranks; scale so the result is sum(loss) / all tokens
                scaled = loss * (self.dist.world_size / global_tokens)
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            loss_total += loss.item()
            nll_total += nll.item()
        loss_total, nll_total = distributed.all_reduce_sum([loss_total, nll_total], self.dist, self.device)
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        if t.clip_norm > 0:
            grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
        else:  # no clipping, but the norm still says whether a gradient is NaN/inf
            grad_norm = nn.utils.get_total_norm([p.grad for p in self.model.parameters() if p.grad is not None])
        finite = math.isfinite(loss_total) and bool(torch.isfinite(grad_norm))
        if not finite and not self.scaler:
            self.optimizer.zero_grad(set_to_none=True)
            return None
        set_lr(self.optimizer, self.schedule(self.state["step"] + 1))
        if self.scaler:
            self.scaler.step(self.optimizer)  # skips the update itself on inf/NaN gradients
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if not finite:
            return None
        return loss_total / global_tokens, nll_total / global_tokens, int(global_tokens)

    # -- the loop -----------------------------------------------------------------------
    def should_stop(self) -> str | None:
        t, s = self.train_cfg, self.state
        if self.interrupted:
            return INTERRUPTED
        if t.max_steps > 0 and s["step"] >= t.max_steps:
            return f"reached train.max_steps={t.max_steps}"
        if t.max_time > 0 and s["train_seconds"] >= 60 * t.max_time:
            return f"reached train.max_time={t.max_time} minutes"
        if t.patience > 0 and s["bad_validations"] >= t.patience:
            return f"no better {t.early_stopping} in {t.patience} validations (train.patience)"
        return None

    def run(self, batches: Iterable[Batch], *, validate: Callable[[], Path | None] | None = None,
            on_step: Callable[[int, float, float], None] | None = None) -> dict:
        """Train on ``batches`` until a stopping rule fires or they run out (the end of ``train.max_epochs``).

        ``validate()`` runs every ``train.valid_every`` steps and after the last one (it may save a
        checkpoint and return its path, and update ``state["bad_validations"]`` for ``train.patience``);
        ``on_step(step, loss, lr)`` after every update. A Ctrl-C stops the run after its current step with
        ``stop_reason`` INTERRUPTED and ``interrupted`` true, without a validation (the caller saves the step).
        """
        with self._stop_on_interrupt():
            return self._run(batches, validate, on_step)

    def _run(self, batches: Iterable[Batch], validate: Callable[[], Path | None] | None,
             on_step: Callable[[int, float, float], None] | None) -> dict:
        t, s, batches = self.train_cfg, self.state, iter(batches)
        # with a time budget the step count that ends the run is unknown: show no total (and no false ETA).
        # The bar is for a terminal only: in a file it would be thousands of carriage-return frames, and the
        # log line every train.log_every steps says the same.
        bar = tqdm(total=t.max_steps if t.max_steps > 0 and t.max_time <= 0 else None, initial=s["step"],
                   disable=not (self.progress and self.dist.is_main and _is_terminal(sys.stderr)), unit="step",
                   dynamic_ncols=True, mininterval=1.0)
        window_tokens, window_time, window_loss, window_nll, bad_in_a_row = 0, 0.0, 0.0, 0.0, 0
        stop_reason = self.should_stop()
        last_valid_step = -1
        while stop_reason is None:
            start = time.perf_counter()  # tokens/s counts batching too
            micro = [b for _, b in zip(range(t.accum_steps), batches)]
            if not micro:
                stop_reason = f"reached train.max_epochs={t.max_epochs}"
                break
            result = self.step(micro)
            elapsed = time.perf_counter() - start
            s["train_seconds"] += elapsed
            if result is None:
                s["skipped_steps"] += 1
                bad_in_a_row += 1
                self.log.info(f"step {s['step'] + 1}: loss or gradient is NaN/inf, update skipped "
                              f"({bad_in_a_row} in a row, {s['skipped_steps']} in all)")
                if bad_in_a_row >= t.max_bad_steps:
                    saved = validate() if validate else None
                    where = f"the last good weights are saved in {saved.parent}. " if saved else ""
                    raise TrainingError(
                        f"{bad_in_a_row} steps in a row had a NaN/inf loss (train.max_bad_steps); {where}"
                        "Lower train.lr, raise train.warmup, or use train.precision=fp32")
                continue
            bad_in_a_row = 0
            loss, nll, tokens = result
            s["step"] += 1
            s["tokens"] += tokens
            window_tokens += tokens
            window_time += elapsed
            window_loss += loss * tokens
            window_nll += nll * tokens
            lr = self.optimizer.param_groups[0]["lr"]
            bar.update(1)
            if on_step is not None:
                on_step(s["step"], loss, lr)
            if s["step"] % t.log_every == 0 or s["step"] == 1:
                # token-weighted means over the steps since the last log line
                tok_s = window_tokens / max(window_time, 1e-9)
                loss, nll = window_loss / window_tokens, window_nll / window_tokens
                bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:.0f}")
                self.log.metrics("train", s["step"], loss=loss, nll=nll, ppl=math.exp(min(nll, 50)), lr=lr,
                                 tokens_per_s=tok_s, epoch=s.get("epoch", 0))
                self.log.info(f"step {s['step']} epoch {s.get('epoch', 0)} loss {loss:.4f} ppl "
                              f"{math.exp(min(nll, 50)):.2f} lr {lr:.2e} {tok_s:.0f} tok/s")
                window_tokens, window_time, window_loss, window_nll = 0, 0.0, 0.0, 0.0
            # rank 0 decides (time limits differ slightly per rank); validation holds collectives
            stop_reason = self._broadcast_stop(self.should_stop())
            if stop_reason == INTERRUPTED:
                break
            if validate is not None and (s["step"] % t.valid_every == 0 or stop_reason is not None):
                validate()
                last_valid_step = s["step"]
                stop_reason = self._broadcast_stop(self.should_stop())
        bar.close()
        if validate is not None and last_valid_step != s["step"] and s["step"] > 0 and stop_reason != INTERRUPTED:
            validate()
        self.log.info(f"training stopped: {stop_reason}; {s['step']} steps, "
                      f"{s['train_seconds'] / 60:.1f} min, {s['skipped_steps']} skipped steps")
        return {"step": s["step"], "best": s["best"], "stop_reason": stop_reason,
                "train_seconds": s["train_seconds"], "tokens": s["tokens"], "interrupted": stop_reason == INTERRUPTED}

    def _broadcast_stop(self, reason: str | None) -> str | None:
        stop = distributed.broadcast_flag(reason is not None, self.dist, self.device)
        return (reason or "stopped by rank 0") if stop else None
