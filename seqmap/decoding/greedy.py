"""Greedy decoding: at each step take the most likely next token.

Written once over the model protocol (``seqmap.models.protocol``), so it serves
every family: encode the source once, then call ``decode_step`` one token at a
time, threading the decoder state through. A decoder-only model has no source
(``src=None``); give it a ``prompt`` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor


class GreedyResult(NamedTuple):
    """What ``greedy`` returns.

    Attributes:
        tokens: (B, N) generated ids, N <= max_len. A row that finished holds its
            EOS and then ``pad``; a row that hit ``max_len`` has no EOS.
        scores: (B,) sum of the log-probabilities of each row's tokens, EOS included.
        lengths: (B,) tokens per row, EOS included.
    """

    tokens: Tensor
    scores: Tensor
    lengths: Tensor


Choose = Callable[[Tensor], tuple[Tensor, Tensor]]  # log-probs (B, V) -> (tokens (B,), their log-probs (B,))


def pick_best(log_probs: Tensor) -> tuple[Tensor, Tensor]:
    """The greedy choice: the most likely token of each row."""
    best_score, best = log_probs.max(dim=-1)
    return best, best_score


@torch.no_grad()
def greedy(
    model,
    src: Tensor | None,
    src_mask: Tensor | None,
    *,
    bos: int,
    eos: int,
    max_len: int,
    pad: int = 0,
    prompt: Tensor | None = None,
) -> GreedyResult:
    """Decode a batch greedily.

    Args:
        model: anything with ``encode(src, src_mask) -> memory`` and
            ``decode_step(tokens, memory, state) -> (logits, state, attn)``.
        src: (B, S) source ids, or None for a decoder-only model.
        src_mask: (B, S) True at real source tokens, or None.
        bos: start-of-sequence id, fed first when there is no ``prompt``.
        eos: end-of-sequence id; a row is finished once it emits it.
        max_len: most tokens to generate per row (EOS included).
        pad: id written after a row's EOS.
        prompt: (B, P) forced first tokens, fed in one ``decode_step`` call
            (BOS included if the model expects it). Rows share one length P, so
            group prompts by length. Not part of the returned tokens.

    Returns:
        GreedyResult(tokens (B, <= max_len), scores (B,), lengths (B,)).
    """
    return decode_loop(model, src, src_mask, bos=bos, eos=eos, max_len=max_len, pad=pad, prompt=prompt,
                       choose=pick_best)


@torch.no_grad()
def decode_loop(model, src: Tensor | None, src_mask: Tensor | None, *, bos: int, eos: int, max_len: int,
                pad: int = 0, prompt: Tensor | None = None, choose: Choose = pick_best) -> GreedyResult:
    """One token per row per step, chosen by ``choose`` from the log-probabilities (greedy, sampling)."""
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    if prompt is None:
        if src is None:
            raise ValueError("greedy needs a source or a prompt")
        prompt = torch.full((src.size(0), 1), bos, dtype=torch.long, device=src.device)
    batch, device = prompt.size(0), prompt.device

    memory = model.encode(src, src_mask)
    state = None
    step_input = prompt  # (B, P) at first, then (B, 1)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    scores = torch.zeros(batch, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    out = []
    for _ in range(max_len):
        logits, state, _ = model.decode_step(step_input, memory, state)
        log_probs = torch.log_softmax(logits[:, -1].float(), dim=-1)  # (B, V)
        best, best_score = choose(log_probs)  # (B,), (B,)
        best = best.masked_fill(finished, pad)
        scores += best_score.masked_fill(finished, 0.0)
        lengths += (~finished).long()
        out.append(best)
        finished |= best == eos
        if bool(finished.all()):
            break
        step_input = best[:, None]  # (B, 1)
    return GreedyResult(torch.stack(out, dim=1), scores, lengths)
