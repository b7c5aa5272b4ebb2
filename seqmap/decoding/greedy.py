"""Greedy decoding: at each step take the most likely next token.

Written once over the model protocol (``seqmap.models.protocol``), so it serves
every family: encode the source once, then call ``decode_step`` one token at a
time, threading the decoder state through. A decoder-only model has no source
(``src=None``); give it a ``prompt`` instead. ``decode_loop`` is the shared loop;
``choose`` picks the token (greedy here, sampling in ``seqmap.decoding.sampling``).

Prompts of one length are fed as one (B, P) tensor. Prompts of unequal length
(a list) are each fed alone and their states stacked (``prefill_each``), for a
model whose decoder state offers ``stack`` (the decoder-only and RNN language
models); every row then decodes as it would alone.

What each step shares with sampling and beam search (log-probabilities, banned ids, n-gram bans,
length limits) is in ``seqmap.decoding.steps``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from seqmap.decoding.inference import inference
from seqmap.decoding.select import row_max
from seqmap.decoding.steps import (
    ban_repeats,
    check_banned,
    check_no_repeat_ngram,
    last_query,
    max_lengths,
    next_log_probs,
    next_logits,
    pad_keys,
    score_dtype,
    stack_steps,
    start_tokens,
)


class GreedyResult(NamedTuple):
    """What ``greedy`` (and ``decode_loop``, ``sample``, ``BeamResult.best``) return.

    Attributes:
        tokens: (B, N) generated ids, N <= max_len. A row that finished holds its
            EOS and then ``pad``; a row that hit its maximum length has no EOS.
        scores: (B,) sum of the log-probabilities of each row's tokens, EOS included, in the model's dtype
            (float32 for a 16-bit model: ``score_dtype``); None when not asked for (``greedy(..., scores=False)``).
        lengths: (B,) tokens per row, EOS included.
        attention: (B, L, H, N, S) attention of the query that produced each token
            (cross-attention over the source; a decoder-only model's self-attention
            over the S keys seen so far, zero beyond those a step saw), zero after a
            row's last token; None unless asked for, or when the model returns none.
    """

    tokens: Tensor
    scores: Tensor | None
    lengths: Tensor
    attention: Tensor | None = None


# Greedy decoding drops finished rows from the batch (its memory and decoder state: ``state.reorder``) once
# at least 1 / DROP_FINISHED_AT of the rows have finished: each later step then computes only live rows
# (CTranslate2 does the same). Sentences of a test set end at different steps; with every row kept, a
# batch computes its longest output's steps for all of its rows.
DROP_FINISHED_AT = 4

# log-probs (B, V) -> (tokens (B,), their log-probs (B,)). A choice that draws each row on its own may offer
# ``keep(rows)`` (``seqmap.decoding.sampling.RowSampler``): ``decode_loop`` then drops finished rows as for greedy
# and tells it which rows stay; a choice without it (one generator for all rows) keeps every row, so that its
# random draws stay as they were.
Choose = Callable[[Tensor], tuple[Tensor, Tensor]]


def pick_best(log_probs: Tensor) -> tuple[Tensor, Tensor]:
    """The greedy choice: the most likely token of each row.

    ``decode_loop`` takes it from the logits instead (``greedy_step``): the same token, without a softmax.
    """
    best_score, best = row_max(log_probs)  # log_probs.max(dim=-1) without its index-tracking loop
    return best, best_score


def greedy_step(logits: Tensor, banned: Sequence[int], history: Tensor | None, no_repeat_ngram: int,
                scores: bool) -> tuple[Tensor, Tensor | None]:
    """Greedy's choice from a decode step's (B, t, V) logits: (tokens (B,), their log-probs (B,) or None).

    The best logit of a row is its best log-probability (the softmax keeps the order), so the softmax
    over the vocabulary runs only when the scores are wanted: CTranslate2 and transformers skip it too
    unless asked for scores. Ties go to the first id, as ``Tensor.max``; the scores are exactly
    ``next_log_probs``'s, with the n-gram bans after the softmax.
    """
    last = next_logits(logits, banned)
    allowed = last if history is None else ban_repeats(last, history, no_repeat_ngram)
    best_logit, best = row_max(allowed)
    if not scores:
        return best, None
    best_score = torch.log_softmax(last, dim=-1).gather(1, best[:, None]).squeeze(1)
    if history is not None:  # every id banned: -inf, as the banned log-probs
        best_score = best_score.masked_fill(best_logit == float("-inf"), float("-inf"))
    return best, best_score


def prefill_each(model, memory, prompts: Sequence[Tensor], *,
                 need_attention: bool = False) -> tuple[Tensor, Any, Tensor | None]:
    """Feed each prompt (P_b,) alone, then stack the states: one batch of rows of unequal length.

    Each row's logits are exactly those of its prompt alone. The state class must
    offer ``stack(states)`` (a classmethod); ``memory`` has one row per prompt.

    Returns:
        (logits (B, 1, V) after each prompt's last token, the stacked state,
        attention (B, L, H, 1, max P_b) of each last token, zero past a row's own
        keys, or None).
    """
    if not prompts or any(p.dim() != 1 or p.numel() == 0 for p in prompts):
        raise ValueError(f"prompts must be 1-D and non-empty, got shapes {[tuple(p.shape) for p in prompts]}")
    logits, states, attention = [], [], []
    for b, prompt in enumerate(prompts):
        row = torch.tensor([b], device=prompt.device)
        out, state, attn = model.decode_step(prompt[None], memory.index_select(row), None,
                                             need_attention=need_attention)
        stack = getattr(type(state), "stack", None)
        if stack is None:  # known after the first prompt: do not prefill the others
            raise ValueError(f"{type(model).__name__} cannot batch prompts of unequal length (its "
                             f"{type(state).__name__} has no stack); group them by length")
        logits.append(out[:, -1:])
        states.append(state)
        attention.append(last_query(attn))
    if attention[0] is None:
        return torch.cat(logits), stack(states), None
    keys = max(a.size(-1) for a in attention)
    return torch.cat(logits), stack(states), torch.cat([pad_keys(a, keys) for a in attention])


def left_padded(rows: Sequence[Tensor]) -> Tensor:
    """1-D token rows of unequal length -> (B, longest), padded on the left with -1 (see ``repeated_ngrams``)."""
    return torch.nn.utils.rnn.pad_sequence(list(rows), batch_first=True, padding_value=-1, padding_side="left")


def greedy(
    model,
    src: Tensor | None,
    src_mask: Tensor | None,
    *,
    bos: int,
    eos: int,
    max_len: int | Tensor,
    pad: int = 0,
    prompt: Tensor | None = None,
    need_attention: bool = False,
    banned: Sequence[int] = (),
    no_repeat_ngram: int = 0,
    scores: bool = True,
) -> GreedyResult:
    """Decode a batch greedily.

    Args:
        model: anything with ``encode(src, src_mask) -> memory`` and
            ``decode_step(tokens, memory, state) -> (logits, state, attn)``.
        src: (B, S) source ids, or None for a decoder-only model.
        src_mask: (B, S) True at real source tokens, or None.
        bos: start-of-sequence id, fed first when there is no ``prompt``.
        eos: end-of-sequence id; a row is finished once it emits it.
        max_len: most tokens to generate per row (EOS included): one int, or a
            (B,) tensor of per-row limits (e.g. a * source length + b).
        pad: id written after a row's EOS.
        prompt: (B, P) forced first tokens, fed in one ``decode_step`` call
            (BOS included if the model expects it), or a list of B 1-D prompts of
            any lengths, fed one at a time (see ``prefill_each``). Not part of the
            returned tokens.
        need_attention: also return the attention of every step (see ``GreedyResult``).
        banned: ids never generated (see ``next_log_probs``); text-level decoding bans PAD, BOS and UNK.
        no_repeat_ngram: n > 0: never complete an n-gram a row already holds (see the module docstring).
        scores: False: do not compute the scores (``GreedyResult.scores`` is None), which saves a softmax
            over the vocabulary per step (``greedy_step``); the tokens are the same.

    Returns:
        GreedyResult(tokens (B, <= max_len), scores (B,), lengths (B,), attention).
    """
    return decode_loop(model, src, src_mask, bos=bos, eos=eos, max_len=max_len, pad=pad, prompt=prompt,
                       choose=pick_best, need_attention=need_attention, banned=banned,
                       no_repeat_ngram=no_repeat_ngram, scores=scores)


@inference
def decode_loop(model, src: Tensor | None, src_mask: Tensor | None, *, bos: int, eos: int, max_len: int | Tensor,
                pad: int = 0, prompt: Tensor | Sequence[Tensor] | None = None, choose: Choose = pick_best,
                need_attention: bool = False, banned: Sequence[int] = (),
                no_repeat_ngram: int = 0, scores: bool = True) -> GreedyResult:
    """One token per row per step, chosen by ``choose`` from the log-probabilities (greedy, sampling).

    ``prompt``: (B, P), or a list of B 1-D prompts of any lengths (see ``greedy``). With ``choose=pick_best``
    (greedy) the tokens are taken from the logits (``greedy_step``), and ``scores=False`` skips the scores.
    """
    check_no_repeat_ngram(no_repeat_ngram)
    if not scores and choose is not pick_best:
        raise ValueError("scores=False is for greedy decoding (choose=pick_best); sampling draws from the scores")
    ragged = prompt is not None and not isinstance(prompt, Tensor)
    step_input = None if ragged else start_tokens(src, prompt, bos)  # (B, P)
    if ragged and not prompt:
        raise ValueError("prompt is an empty list; give at least one prompt")
    batch = len(prompt) if ragged else step_input.size(0)
    device = prompt[0].device if ragged else step_input.device
    limits = max_lengths(max_len, batch).to(device)
    if batch == 0:
        return empty_result(device, scores)

    memory = model.encode(src, src_mask)
    if ragged:
        logits, state, attn = prefill_each(model, memory, prompt, need_attention=need_attention)
    else:
        logits, state, attn = model.decode_step(step_input, memory, None, need_attention=need_attention)
    check_banned(banned, logits.size(-1))
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    total = torch.zeros(batch, dtype=score_dtype(logits), device=device) if scores else None
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    history = None  # (B, P + step) what each row has read and generated, for no_repeat_ngram
    if no_repeat_ngram:
        history = left_padded(prompt) if ragged else step_input
    out, attention = [], []  # per step, over the rows live at that step
    rows = torch.arange(batch, device=device)  # the input row of each live row
    segments = [(0, rows)]  # (first step, rows): the live rows change only where rows are dropped
    totals = torch.zeros_like(total) if scores else None  # each input row's, once dropped or done
    all_lengths = torch.zeros(batch, dtype=torch.long, device=device)
    compact = choose is pick_best or hasattr(choose, "keep")  # see ``Choose``
    for step in range(int(limits.max())):
        if choose is pick_best:
            best, best_score = greedy_step(logits, banned, history, no_repeat_ngram, scores)  # (B,), (B,) or None
        else:
            log_probs = next_log_probs(logits, banned)  # (B, V)
            if history is not None:
                log_probs = ban_repeats(log_probs, history, no_repeat_ngram)
            best, best_score = choose(log_probs)  # (B,), (B,)
        best = best.masked_fill(finished, pad)
        if history is not None:
            history = torch.cat([history, best[:, None]], dim=1)
        if total is not None:
            total += best_score.masked_fill(finished, 0.0)
        lengths += (~finished).long()
        out.append(best)
        if need_attention and attn is not None:
            attention.append(last_query(attn).masked_fill(finished[:, None, None, None, None], 0.0))
        finished |= (best == eos) | (limits <= step + 1)
        done = int(finished.sum())  # one reduction (and one sync) a step for both questions
        if done == finished.numel():
            break
        if compact and done * DROP_FINISHED_AT >= finished.numel():
            live = (~finished).nonzero().squeeze(1)  # drop the finished rows from the batch
            all_lengths.index_copy_(0, rows, lengths)
            if total is not None:
                totals.index_copy_(0, rows, total)
                total = total.index_select(0, live)
            lengths, limits, finished, best, rows = (t.index_select(0, live)
                                                     for t in (lengths, limits, finished, best, rows))
            if history is not None:
                history = history.index_select(0, live)
            memory = memory.index_select(live)
            state.reorder(live)
            if choose is not pick_best:
                choose.keep(live)
            segments.append((step + 1, rows))
        logits, state, attn = model.decode_step(best[:, None], memory, state, need_attention=need_attention)
    all_lengths.index_copy_(0, rows, lengths)
    if total is not None:
        totals.index_copy_(0, rows, total)
    tokens = torch.stack(by_input_row(out, segments, batch, pad), dim=1)
    return GreedyResult(tokens, totals, all_lengths,
                        stack_steps(by_input_row(attention, segments, batch, 0)) if attention else None)


def empty_result(device: torch.device, scores: bool = True) -> GreedyResult:
    """What decoding an empty batch (B = 0) gives: no rows, no tokens."""
    return GreedyResult(torch.empty(0, 0, dtype=torch.long, device=device),
                        torch.empty(0, device=device) if scores else None,
                        torch.empty(0, dtype=torch.long, device=device))


def by_input_row(steps: list[Tensor], segments: list[tuple[int, Tensor]], batch: int, fill: int) -> list[Tensor]:
    """Per-step (B_live, ...) tensors (tokens, attention) -> per-step (B, ...) by input row, ``fill`` for rows
    no longer in the batch; ``segments`` gives the live rows from each step on."""
    if len(segments) == 1:
        return steps
    full = []
    for (start, rows), (end, _) in zip(segments, [*segments[1:], (len(steps), None)]):
        for x in steps[start:end]:
            full.append(x.new_full((batch, *x.shape[1:]), fill).index_copy_(0, rows, x))
    return full
