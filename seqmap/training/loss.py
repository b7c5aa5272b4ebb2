"""Label-smoothed cross-entropy over the real (non-PAD) target tokens.

The loss returns *sums* and a token count; the caller divides. Summing per batch
and dividing once keeps gradient accumulation and perplexity honest:
``perplexity = exp(total nll_sum / total n_tokens)``, never an average of batch
averages (see ``seqmap.metrics.perplexity``).
"""

from __future__ import annotations

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

    Positions where ``target == pad_id`` are removed before the softmax, so they
    contribute exactly zero to the loss and to the gradient. The softmax runs in
    float32 whatever the dtype of ``logits`` (half and bfloat16 are safe).

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
    real = target != pad_id  # (B, T)
    logp = F.log_softmax(logits[real].float(), dim=-1)  # (N, V), real positions only
    nll = -logp.gather(-1, target[real].unsqueeze(-1)).squeeze(-1)  # (N,)
    loss = nll if smoothing == 0.0 else (1.0 - smoothing) * nll - smoothing * logp.mean(dim=-1)
    return loss.sum(), nll.detach().sum(), int(nll.numel())
