"""Label-smoothed cross-entropy over the real (non-PAD) target tokens.

The loss returns *sums* and a token count; the caller divides. Summing per batch
and dividing once keeps gradient accumulation and perplexity honest:
``perplexity = exp(total nll_sum / total n_tokens)``, never an average of batch
averages (see ``seqmap.metrics.perplexity``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


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


class _SmoothedNLL(torch.autograd.Function):
    """Masked label-smoothed cross-entropy over (N, V) rows with a hand-written backward.

    Autograd's version of the same formula (log_softmax, gather, mean, mask) keeps
    several (N, V) tensors alive and its backward writes about five more: a zero
    tensor per gather, the mean's expansion, their sum, the softmax backward. At
    V = 8000 those passes over memory cost as much as a Transformer layer. The
    gradient has a closed form, ``softmax - (1 - eps) * one_hot - eps / V``
    per real row, computed here in one new tensor. Padding rows are computed and then
    zeroed rather than indexed out beforehand: indexing would copy every real row,
    and padding is rare in bucketed batches.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, real: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
        wide = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()  # half -> float32
        logp = F.log_softmax(wide, dim=-1)  # (N, V)
        zero = logp.new_zeros(())
        nll = torch.where(real, -logp.gather(1, target.unsqueeze(1)).squeeze(1), zero)  # (N,); where, not *: NaN-safe
        loss = nll if smoothing == 0.0 else (1.0 - smoothing) * nll - smoothing * torch.where(real, logp.mean(-1), zero)
        pad_rows = (~real).nonzero().squeeze(1)
        ctx.save_for_backward(logp, target, pad_rows)
        ctx.smoothing, ctx.dtype = smoothing, logits.dtype
        nll_sum = nll[real].sum()  # summing the real rows only: the same sum whatever padding surrounds them
        ctx.mark_non_differentiable(nll_sum)
        return loss[real].sum(), nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor, None, None, None]:
        logp, target, pad_rows = ctx.saved_tensors
        eps, vocab = ctx.smoothing, logp.size(1)
        grad = torch.exp(logp)  # softmax, (N, V)
        if eps:
            grad.sub_(eps / vocab)
        grad.scatter_add_(1, target.unsqueeze(1), grad.new_full((grad.size(0), 1), eps - 1.0))
        grad.mul_(grad_loss)
        if pad_rows.numel():
            grad.index_fill_(0, pad_rows, 0.0)  # touches only the padding rows (NaN there stays out)
        return grad.to(ctx.dtype), None, None, None
