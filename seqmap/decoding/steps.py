"""What every search does at each step: the next token's log-probabilities, the ids it may not choose, the
first decoder input and each row's length limit, and the attention of a step.

Greedy decoding, sampling and beam search (``seqmap.decoding.greedy``, ``sampling``, ``beam``) share these.
Scores are kept in the model's dtype, or float32 for a 16-bit model (``score_dtype``).

``no_repeat_ngram`` n > 0 (fairseq's ``--no-repeat-ngram-size``) gives -inf, after the softmax, to
every token that would complete an n-gram its row already holds (``repeated_ngrams``); the rows are
the decoder's inputs, prompt (BOS or forced prefix) included, and the tokens generated so far.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


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
