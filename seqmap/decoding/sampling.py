"""Sampling: temperature, top-k and nucleus (top-p) filters as pure functions, and samplers over the protocol.

The filters map log-probabilities (B, V) to log-probabilities with the excluded
tokens at -inf; a sampler draws from what is left with a seeded generator, so
the same seed gives the same text. ``RowSampler`` gives each row its own generator
(``seqmap generate`` and ``translate --sample``: input i seeded with seed + i; the
server: each request's seed), so a row's text does not depend on the rows beside it
and finished rows may leave the batch (``decode_loop`` drops them, as it does for
greedy). ``sampling_choice`` draws every row from one generator (``sample`` below).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from seqmap.decoding.greedy import GreedyResult, decode_loop


def top_k_filter(log_probs: Tensor, k: int) -> Tensor:
    """Keep exactly the k most likely tokens of each row (k <= 0 keeps all); among ties, the lower ids.

    ``topk`` finds the k-th value; every token above it stays, and of the tokens equal to it the lower ids
    fill the k places (what a stable descending sort would keep, without sorting the vocabulary)."""
    if k <= 0 or k >= log_probs.size(-1):
        return log_probs
    kth = log_probs.topk(k, dim=-1).values[..., -1:]  # (B, 1)
    above, tied = log_probs > kth, log_probs == kth
    places = k - above.sum(-1, keepdim=True)  # left for the tied tokens, lowest ids first
    keep = above | (tied & (tied.cumsum(-1) <= places))
    return log_probs.masked_fill(~keep, float("-inf"))


TOP_P_CANDIDATES = 256  # top_p_filter ranks this many tokens first, more only for a row whose mass is spread wider


def top_p_filter(log_probs: Tensor, p: float) -> Tensor:
    """Keep the smallest set of most likely tokens whose probability mass reaches p (p >= 1 keeps all).

    Only the most likely ``TOP_P_CANDIDATES`` tokens of a row are ranked (``topk``) when they hold mass p:
    a token past them has at least that much mass before it, so it is dropped. A row spread wider has all
    its tokens ranked. A trained model's peaked distributions so skip the full sort of the vocabulary; nearly
    flat ones cost about a sort."""
    if p >= 1.0:
        return log_probs
    probs = log_probs.softmax(-1)  # the rows need not be normalized (temperature, top-k)

    def kept(rows_lp: Tensor, rows_probs: Tensor, ranked: int) -> tuple[Tensor, Tensor]:
        ranks = rows_lp.sort(dim=-1, descending=True) if ranked == rows_lp.size(-1) else rows_lp.topk(ranked, dim=-1)
        order = ranks.indices  # most likely first
        ranked_probs = rows_probs.gather(-1, order)
        mass = ranked_probs.cumsum(-1)
        keep_ranked = mass - ranked_probs < p  # the mass of strictly better tokens: the best token always stays
        return torch.zeros_like(rows_lp, dtype=torch.bool).scatter(-1, order, keep_ranked), mass[..., -1]

    vocab = log_probs.size(-1)
    keep, reached = kept(log_probs, probs, min(vocab, TOP_P_CANDIDATES))
    if TOP_P_CANDIDATES < vocab:
        wide = (reached < p).nonzero().squeeze(-1)  # rows whose candidates hold less than p
        if wide.numel():
            keep[wide] = kept(log_probs[wide], probs[wide], vocab)[0]
    return log_probs.masked_fill(~keep, float("-inf"))


def inverse_cdf(probs: Tensor, uniform: Tensor) -> Tensor:
    """One token per row of ``probs`` (B, V): the first whose cumulative probability passes ``uniform`` (B,)
    (float64 draws in [0, 1)) times the row's total. Exact sampling (in float64), and tokens of probability 0
    are never drawn. One random number per row, where ``torch.multinomial`` draws one exponential per
    vocabulary entry on the CPU."""
    cdf = probs.double().cumsum(-1)  # (B, V)
    total = cdf[:, -1:]
    below_total = torch.nextafter(total, torch.zeros_like(total))  # u * total may round up to total
    value = torch.minimum(uniform.to(cdf)[:, None] * total, below_total)
    tokens = torch.searchsorted(cdf, value, right=True).squeeze(-1)
    return tokens.masked_fill(tokens == probs.size(-1), 0)  # a row with nothing to draw (every id banned: NaN)
    #                                                        takes id 0, as greedy's does, at log-prob -inf


def check_filters(temperature: float, top_p: float) -> None:
    """Once per search: a temperature > 0 and a top_p > 0 (0 or NaN would leave no token to draw)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not top_p > 0:
        raise ValueError(f"top_p must be > 0 (1 keeps every token; top_k=1 is greedy), got {top_p}")


def _probabilities(log_probs: Tensor, temperature: float, top_k: int, top_p: float) -> Tensor:
    return top_p_filter(top_k_filter(log_probs / temperature, top_k), top_p).softmax(-1)


def sampling_choice(temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                    generator: torch.Generator | None = None):
    """A ``choose`` function for ``decode_loop``: sample from the filtered, tempered distribution, every row
    from ``generator`` (one uniform number per row and step, ``inverse_cdf``)."""
    check_filters(temperature, top_p)

    def choose(log_probs: Tensor) -> tuple[Tensor, Tensor]:
        probs = _probabilities(log_probs, temperature, top_k, top_p)  # (B, V)
        uniform = torch.rand(probs.size(0), dtype=torch.float64, generator=generator, device=probs.device)
        tokens = inverse_cdf(probs, uniform)  # (B,)
        return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)

    return choose


class RowSampler:
    """A ``decode_loop`` choice that samples row b with ``generators[b]`` (filters as ``sampling_choice``).

    With one row it draws exactly what ``sampling_choice`` draws; with several, each row's draws depend on
    its own generator only. ``keep(rows)`` follows ``decode_loop`` when it drops finished rows.
    """

    def __init__(self, temperature: float, top_k: int, top_p: float, generators: Sequence[torch.Generator]):
        check_filters(temperature, top_p)
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.generators = list(generators)

    def __call__(self, log_probs: Tensor) -> tuple[Tensor, Tensor]:
        probs = _probabilities(log_probs, self.temperature, self.top_k, self.top_p)  # (B, V)
        uniform = torch.cat([torch.rand(1, dtype=torch.float64, generator=g, device=probs.device)
                             for g in self.generators])  # (B,): row b's number from its own generator
        tokens = inverse_cdf(probs, uniform)
        return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)

    def keep(self, rows: Tensor) -> None:
        """Keep the generators of batch rows ``rows`` (B',), in that order: the rows still decoding."""
        self.generators = [self.generators[i] for i in rows.tolist()]


def sample(model, src: Tensor | None, src_mask: Tensor | None, *, bos: int, eos: int, max_len: int, pad: int = 0,
           prompt: Tensor | None = None, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           generator: torch.Generator | None = None, banned: Sequence[int] = (),
           no_repeat_ngram: int = 0) -> GreedyResult:
    """Sample a continuation per row; scores are the model's log-probabilities of the drawn tokens.

    ``banned`` ids are never drawn (see ``seqmap.decoding.steps.next_log_probs``), nor tokens that would
    repeat an n-gram of size ``no_repeat_ngram`` (see ``seqmap.decoding.steps``).
    """
    choose = sampling_choice(temperature, top_k, top_p, generator)
    return decode_loop(model, src, src_mask, bos=bos, eos=eos, max_len=max_len, pad=pad, prompt=prompt,
                       choose=choose, banned=banned, no_repeat_ngram=no_repeat_ngram)
