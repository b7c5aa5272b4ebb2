"""Label-smoothed cross-entropy over the real (non-PAD) target tokens.

The loss returns *sums* and a token count; the caller divides. Summing per batch
and dividing once keeps gradient accumulation and perplexity honest:
``perplexity = exp(total nll_sum / total n_tokens)``, never an average of batch
averages (see ``seqmap.metrics.perplexity``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def label_smoothed_nll(
    logits: Tensor, target: Tensor, pad_id: int = 0, smoothing: float = 0.0
) -> tuple[Tensor, Tensor, int]:
    """Summed label-smoothed cross-entropy, summed NLL and the number of real tokens.

    Smoothing with ``eps`` trains towards ``(1 - eps) * one_hot(target) + eps / V``:
    ``eps / V`` on *every* class, the true one included (and PAD). This is
    ``F.cross_entropy(..., label_smoothing=eps)``; fairseq instead spreads
    ``eps / (V - 1)`` over the other classes only. Per token the loss is
    ``(1 - eps) * nll + eps * mean_v(-log p_v)``.

    Positions where ``target == pad_id`` contribute exactly zero to the loss and to
    the gradient. The softmax runs in float32 whatever the dtype of ``logits`` (half
    and bfloat16 are safe). The gradient is written by hand (see ``_SmoothedNLL``).

    Args:
        logits: (B, T, V) unnormalised scores (any leading shape ``(...)``, V last).
        target: (B, T) target ids (the same leading shape), ``pad_id`` where there is no token.
        pad_id: the id whose positions are ignored.
        smoothing: eps in [0, 1).

    Returns:
        loss_sum: float32 scalar to back-propagate (label-smoothed).
        nll_sum: float32 scalar, the plain negative log-likelihood, detached (for logging and perplexity).
        n_tokens: number of non-PAD target positions.
    """
    if logits.shape[:-1] != target.shape:
        raise ValueError(f"logits {tuple(logits.shape)} must be target {tuple(target.shape)} plus a vocabulary axis")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    real = (target != pad_id).reshape(-1)
    loss, nll = _SmoothedNLL.apply(logits.reshape(-1, logits.size(-1)), target.reshape(-1), real, smoothing)
    return loss, nll, int(real.sum())


def label_nll(logits: Tensor, labels: Tensor, smoothing: float = 0.0, not_scored: int = -1
              ) -> tuple[Tensor, Tensor, int]:
    """``label_smoothed_nll`` for one label per row: logits (B, C), labels (B,), rows labelled ``not_scored`` left out.

    Returns (loss_sum, nll_sum, number of scored rows), like ``label_smoothed_nll``.
    """
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"label_nll needs logits (B, C) and labels (B,), got {tuple(logits.shape)} and "
                         f"{tuple(labels.shape)}")
    scored = labels != not_scored
    if bool(((labels[scored] < 0) | (labels[scored] >= logits.size(1))).any()):
        raise ValueError(f"labels must be class ids in 0..{logits.size(1) - 1} (or {not_scored}: not scored)")
    return label_smoothed_nll(logits[scored], labels[scored], pad_id=not_scored, smoothing=smoothing)


def _row_losses(logp: Tensor, target: Tensor, real: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
    """Per-row (label-smoothed loss, NLL) from log-probabilities (N, V); zero on padding rows (NaN-safe)."""
    nll = torch.where(real, -logp.gather(1, target.unsqueeze(1)).squeeze(1), 0.0)  # where, not *: NaN stays out
    if not smoothing:
        return nll, nll
    return (1.0 - smoothing) * nll - smoothing * torch.where(real, logp.mean(-1), 0.0), nll


def _gradient_in_place(logp: Tensor, target: Tensor, smoothing: float) -> Tensor:
    """Turn log-probabilities (N, V) into the loss gradient ``softmax - (1 - eps) one_hot - eps / V``, in place.

    In place because a fresh (N, V) tensor costs more (page faults on every step) than the exp itself.
    Padding rows are left for the caller to zero.
    """
    grad = logp.exp_()  # softmax
    if smoothing:
        grad.sub_(smoothing / grad.size(1))
    return grad.scatter_add_(1, target.unsqueeze(1), grad.new_full((grad.size(0), 1), smoothing - 1.0))


class _SmoothedNLL(torch.autograd.Function):
    """Masked label-smoothed cross-entropy over (N, V) rows with a hand-written backward.

    Autograd's version of the same formula (log_softmax, gather, mean, mask) keeps
    several (N, V) tensors alive and its backward writes about five more: a zero
    tensor per gather, the mean's expansion, their sum, the softmax backward. At
    V = 8000 those passes over memory cost as much as a Transformer layer. The
    gradient has a closed form, ``softmax - (1 - eps) * one_hot - eps / V``
    per real row, computed here in place of the saved log-probabilities (so the
    backward runs once per forward, and says so if asked twice). Padding rows are
    computed and then zeroed rather than indexed out beforehand: indexing would
    copy every real row, and padding is rare in bucketed batches.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, real: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
        wide = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()  # half -> float32
        logp = F.log_softmax(wide, dim=-1)  # (N, V)
        loss, nll = _row_losses(logp, target, real, smoothing)  # (N,) each
        pad_rows = (~real).nonzero().squeeze(1)
        ctx.save_for_backward(logp, target, pad_rows)
        ctx.smoothing, ctx.dtype, ctx.spent = smoothing, logits.dtype, False
        nll_sum = nll[real].sum()  # summing the real rows only: the same sum whatever padding surrounds them
        ctx.mark_non_differentiable(nll_sum)
        return loss[real].sum(), nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None, None]:
        if ctx.spent:
            raise RuntimeError(
                "label_smoothed_nll's backward turns its saved log-probabilities into the gradient in place, so it "
                "runs once per forward; to back-propagate twice (retain_graph=True), compute the loss again")
        ctx.spent = True
        logp, target, pad_rows = ctx.saved_tensors
        grad = _gradient_in_place(logp, target, ctx.smoothing)  # (N, V)
        grad.mul_(grad_loss)
        if pad_rows.numel():
            grad.index_fill_(0, pad_rows, 0.0)  # touches only the padding rows (NaN there stays out)
        return grad.to(ctx.dtype), None, None, None


def output_nll(
    features: Tensor, output: nn.Linear, target: Tensor, pad_id: int = 0, smoothing: float = 0.0,
    chunk_elements: int = 1 << 22,
) -> tuple[Tensor, Tensor, int]:
    """``label_smoothed_nll(output(features), target, ...)`` without the (N, V) logits.

    The output layer and the loss run together over chunks of rows (about
    ``chunk_elements`` logits, 16 MB, at a time), and the gradients of the
    features and of the output layer are made in the same pass (the closed form
    of ``_SmoothedNLL``), so neither the logits nor their log-probabilities nor
    their gradient ever exist for the whole batch:
    at 4,096 tokens and V = 8,000 each would be 131 MB, written to fresh memory on
    every step. The chunks are small enough to be reused by the allocator and to
    stay in cache. Same values, same gradients (to float rounding), same returns.

    Float32 features only (the CPU path of ``seqmap train``); use
    ``label_smoothed_nll`` on the logits for half precision and autocast.

    Args:
        features: (B, T, D) the final hidden states (any leading shape, D last).
        output: the Linear from D to the vocabulary (tied or not, with or without bias).
        target, pad_id, smoothing: as for ``label_smoothed_nll``.
        chunk_elements: logits per chunk (rows per chunk = this // V, at least 1).
    """
    if features.shape[:-1] != target.shape:
        raise ValueError(f"features {tuple(features.shape)} must be target {tuple(target.shape)} plus a feature axis")
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    if features.dtype != torch.float32 or output.weight.dtype != torch.float32:
        raise ValueError("output_nll works in float32; for other dtypes use label_smoothed_nll on the logits")
    real = (target != pad_id).reshape(-1)
    rows = max(1, chunk_elements // output.weight.size(0))
    # under torch.no_grad() (evaluation) no gradient is wanted, whatever the inputs' requires_grad says
    loss, nll = _OutputNLL.apply(features.reshape(-1, features.size(-1)), output.weight, output.bias,
                                 target.reshape(-1), real, smoothing, rows, torch.is_grad_enabled())
    return loss, nll, int(real.sum())


def fused_output_layer(model: nn.Module) -> nn.Linear | None:
    """The model's float32 output Linear when ``output_nll`` can run it with the loss (the model offers
    ``forward(..., features=True)`` and ``output_layer``), else None (logits, then ``label_smoothed_nll``)."""
    output = getattr(model, "output_layer", None)
    return output if isinstance(output, nn.Linear) and output.weight.dtype == torch.float32 else None


class _OutputNLL(torch.autograd.Function):
    """Linear output layer + masked label-smoothed cross-entropy, chunked over rows, gradients made in forward."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, real: Tensor,
                smoothing: float, chunk: int, grad_enabled: bool) -> tuple[Tensor, Tensor]:
        need_h, need_w, need_b = (need and grad_enabled for need in ctx.needs_input_grad[:3])
        loss_sum, nll_sum = h.new_zeros(()), h.new_zeros(())
        grad_h = torch.empty_like(h) if need_h else None
        grad_w = torch.zeros_like(weight) if need_w else None
        grad_b = torch.zeros_like(bias) if need_b else None
        for start in range(0, h.size(0), chunk):
            rows = slice(start, start + chunk)
            hc, tc, rc = h[rows], target[rows], real[rows]
            logp = F.log_softmax(F.linear(hc, weight, bias), dim=-1)  # (c, V)
            loss, nll = _row_losses(logp, tc, rc, smoothing)
            loss_sum += loss[rc].sum()
            nll_sum += nll[rc].sum()
            if not (need_h or need_w or need_b):
                continue
            grad = _gradient_in_place(logp, tc, smoothing)
            grad.masked_fill_(~rc.unsqueeze(1), 0.0)  # padding rows: zero (NaN there stays out)
            if need_h:
                torch.mm(grad, weight, out=grad_h[rows])
            if need_w:
                grad_w.addmm_(grad.t(), hc)
            if need_b:
                grad_b.add_(grad.sum(0))
        ctx.save_for_backward(*(g for g in (grad_h, grad_w, grad_b) if g is not None))
        ctx.needs = (need_h, need_w, need_b)
        ctx.mark_non_differentiable(nll_sum)
        return loss_sum, nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        saved = iter(ctx.saved_tensors)
        grads = [next(saved) * grad_loss if need else None for need in ctx.needs]
        return (*grads, None, None, None, None, None)
