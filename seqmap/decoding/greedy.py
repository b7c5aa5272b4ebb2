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

``no_repeat_ngram`` n > 0 (fairseq's ``--no-repeat-ngram-size``) gives -inf, after the softmax, to
every token that would complete an n-gram its row already holds (``repeated_ngrams``); the rows are
the decoder's inputs, prompt (BOS or forced prefix) included, and the tokens generated so far.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from seqmap.decoding.inference import inference
from seqmap.decoding.select import row_max


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
# batch computes its longest output's steps for all of its rows. docs/benchmarks.md, issue 18.
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
    best_score, best = row_max(log_probs)  # log_probs.max(dim=-1), faster on wide rows
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


def score_dtype(logits: Tensor) -> torch.dtype:
    """The dtype of log-probabilities and scores from these logits: the model's, or float32 for 16-bit floats
    (a sum of many log-probabilities in float16 or bfloat16 would lose the ranking of close hypotheses)."""
    return torch.promote_types(logits.dtype, torch.float32)


def next_logits(logits: Tensor, banned: Sequence[int] = ()) -> Tensor:
    """(B, t, V) logits of a decode step -> (B, V) logits of each row's next token (``score_dtype``), -inf at
    ``banned``."""
    last = logits[:, -1].to(score_dtype(logits))
    if banned:
        last = last.index_fill(-1, torch.tensor(list(banned), device=last.device), float("-inf"))
    return last


def next_log_probs(logits: Tensor, banned: Sequence[int] = (), absent: Sequence[int] | None = None) -> Tensor:
    """(B, t, V) logits of a decode step -> (B, V) log-probabilities of each row's next token (``score_dtype``).

    ``banned`` ids (e.g. PAD, BOS and UNK, which a translation must never contain) get -inf
    before the softmax: they are never chosen, and the rest renormalize among themselves.
    With ``absent`` given (``transformers``' way, for ``beam_ranking: hf``), only the ``absent`` ids
    (those the original model has no token for) are left out of the softmax, and the other banned
    ids get -inf after it, without renormalizing.
    """
    log_probs = torch.log_softmax(next_logits(logits, banned if absent is None else absent), dim=-1)
    after = [] if absent is None else sorted(set(banned) - set(absent))
    if after:
        log_probs = log_probs.index_fill(-1, torch.tensor(after, device=log_probs.device), float("-inf"))
    return log_probs


def repeated_ngrams(history: Tensor, n: int, vocab: int) -> Tensor:
    """(R, t) token history -> (R, vocab) bool, True at each token that would complete an n-gram of its row.

    Token x is banned for a row when (its last n - 1 tokens, x) is an n-gram the row
    already holds; n = 1 bans every token the row holds, n = 0 bans nothing. Negative
    ids are padding (``left_padded``: rows of unequal length padded on the left with
    -1), which never form a match with real tokens: a row's tail can only equal an
    earlier n-gram's first n - 1 tokens if both hold the same number of leading -1,
    which puts them at the same place.
    """
    rows, t = history.shape
    banned = torch.zeros(rows, vocab + 1, dtype=torch.bool, device=history.device)  # + a column for no ban
    if n > 0 and t >= n:
        grams = history.unfold(1, n, 1)  # (R, t - n + 1, n) every n-gram of each row
        tail = history[:, t - n + 1:]  # (R, n - 1) what the next token would complete
        completes = (grams[..., :-1] == tail[:, None]).all(dim=-1)  # (R, t - n + 1)
        last = grams[..., -1]
        banned.scatter_(1, last.masked_fill(~completes | (last < 0) | (last >= vocab), vocab), True)
    return banned[:, :vocab]


def ban_repeats(log_probs: Tensor, history: Tensor, n: int) -> Tensor:
    """(R, V) log-probabilities with -inf at the tokens that would repeat an n-gram of ``history`` (R, t)."""
    if n <= 0:
        return log_probs
    return log_probs.masked_fill(repeated_ngrams(history, n, log_probs.size(-1)), float("-inf"))


def check_no_repeat_ngram(n: int) -> None:
    if n < 0:
        raise ValueError(f"no_repeat_ngram must be >= 0 (0 = off), got {n}")


def check_banned(banned: Sequence[int], vocab: int, name: str = "banned") -> None:
    """Once per search, when the first logits give the vocabulary size V: every banned id is in [0, V) (a
    negative id would silently ban V + id), and at least one id is left to generate."""
    outside = sorted(i for i in banned if not 0 <= i < vocab)
    if outside:
        raise ValueError(f"{name} ids must be in [0, {vocab}) (the model's vocabulary), got {outside}")
    if len(set(banned)) >= vocab:
        raise ValueError(f"{name} holds every id of the {vocab}-token vocabulary; leave at least one to generate")


def start_tokens(src: Tensor | None, prompt: Tensor | None, bos: int) -> Tensor:
    """The first decoder input (B, P): the prompt, or one BOS per source row."""
    if prompt is not None:
        if not isinstance(prompt, Tensor):
            raise TypeError(f"prompt must be a (B, P) tensor here, got a {type(prompt).__name__}; prompts of "
                            "unequal length (a list) are for greedy and sampling, or group them by length")
        if prompt.dim() != 2 or prompt.size(1) == 0:
            raise ValueError(f"prompt must be (B, P) with P >= 1, got shape {tuple(prompt.shape)}")
        return prompt
    if src is None:
        raise ValueError("decoding needs a source or a prompt")
    return torch.full((src.size(0), 1), bos, dtype=torch.long, device=src.device)


def max_lengths(max_len: int | Tensor, batch: int) -> Tensor:
    """Per-row maximum output length (B,) (long, CPU) from one int or a (B,) integer tensor; each must be >= 1.

    The one check of every search's ``max_len``: a float (10.5, or a tensor of them) is refused rather than
    truncated, and so is a bool.
    """
    limits = torch.as_tensor(max_len)
    if limits.is_floating_point() or limits.is_complex() or limits.dtype == torch.bool:
        shown = f"a {str(limits.dtype).removeprefix('torch.')} tensor" if isinstance(max_len, Tensor) else repr(max_len)
        raise TypeError(f"max_len must be a whole number of tokens (an int or an integer tensor), got {shown}; "
                        "round it, e.g. math.ceil(max_len), or max_len.ceil().long() for a tensor")
    limits = limits.long().cpu().flatten()
    if limits.numel() == 1:
        limits = limits.expand(batch)
    if limits.numel() != batch:
        raise ValueError(f"max_len has {limits.numel()} entries for a batch of {batch}")
    if batch and int(limits.min()) < 1:
        raise ValueError(f"max_len must be >= 1, got {int(limits.min())}")
    return limits.clone()


def last_query(attention: Tensor | None) -> Tensor | None:
    """(B, L, H, t, S) attention of a decode step -> (B, L, H, 1, S) of its last new token (None passes)."""
    return None if attention is None else attention[..., -1:, :]


def pad_keys(attention: Tensor, keys: int) -> Tensor:
    """Right-pad the key axis (last) of attention weights with zeros to ``keys`` (a decoder-only model's keys grow)."""
    return F.pad(attention, (0, keys - attention.size(-1)))


def stack_steps(steps: list[Tensor]) -> Tensor:
    """Per-step attention (B, L, H, 1, S_i) -> (B, L, H, N, max S_i)."""
    keys = max(a.size(-1) for a in steps)
    return torch.cat([pad_keys(a, keys) for a in steps], dim=-2)


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
