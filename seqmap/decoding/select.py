"""The best entries of wide rows (a vocabulary, or k beams times a vocabulary), found chunk by chunk.

Decoding picks, at every step, the best token of each row (greedy) or the 2k best
(beam score + token log-prob) among a sentence's k beams times V tokens (beam search).
On the CPU ``Tensor.max(dim)`` and ``topk`` over a vocabulary's worth of entries run an
index-tracking loop that is slower than the vectorized ``amax`` route here:

1. split each row into chunks of C entries and take each chunk's maximum (``amax``);
2. keep the chunks whose maxima are best (1 for the argmax, 2k for the top 2k);
3. search only the entries of those chunks.

Each of the n best entries lies in a chunk whose maximum is at least that entry, so it
lies in one of the n chunks with the best maxima: the values found are exactly
``topk``'s. Ties resolve to the first position (the chunk first, then its entry), as
``Tensor.max`` does; ``topk`` leaves ties in no documented order. Rows whose width has
no divisor in [32, 256] use ``max``/``topk`` directly.
"""

from __future__ import annotations

from functools import lru_cache

from torch import Tensor


@lru_cache(maxsize=64)
def chunk_width(width: int) -> int:
    """A divisor of ``width`` in [64, 256] (else [32, 64)) to cut rows into, or 0 if there is none."""
    for c in (*range(64, 257), *range(32, 64)):
        if width % c == 0 and width // c >= 2:
            return c
    return 0


def row_max(x: Tensor) -> tuple[Tensor, Tensor]:
    """(R, V) -> (values (R,), indices (R,)): the maximum of each row and its first position, as ``x.max(-1)``."""
    rows, width = x.shape
    c = chunk_width(width)
    if not c or not x.is_contiguous():
        return x.max(dim=-1)
    chunks = x.view(rows, width // c, c)
    _, chunk = chunks.amax(dim=-1).max(dim=-1)  # (R,) the first chunk holding the row's maximum
    values, offset = chunks.gather(1, chunk[:, None, None].expand(-1, 1, c)).squeeze(1).max(dim=-1)
    return values, chunk * c + offset


def top_candidates(scores: Tensor, log_probs: Tensor, want: int) -> tuple[Tensor, Tensor]:
    """Beam scores (G, n) and next-token log-probs (G*n, V) -> the ``want`` best sums of each sentence.

    Returns (values (G, want) best first, indices (G, want) into the n*V candidates, beam-major), the
    values of ``(scores[:, :, None] + log_probs.view(G, n, V)).view(G, -1).topk(want)`` without
    building that (G, n*V) tensor.
    """
    g, n = scores.shape
    width = log_probs.size(-1)
    c = chunk_width(width)
    per_beam = width // c if c else 0
    if not c or want > n * per_beam or not log_probs.is_contiguous():
        return (scores[:, :, None] + log_probs.view(g, n, width)).view(g, -1).topk(want, dim=1)
    chunks = log_probs.view(g, n * per_beam, c)
    best = (chunks.amax(dim=-1).view(g, n, per_beam) + scores[:, :, None]).view(g, -1)  # (G, n * V / C)
    _, top = best.topk(want, dim=1)  # (G, want) the chunks holding the best candidates
    picked = chunks.gather(1, top[:, :, None].expand(-1, -1, c)) + scores.gather(1, top // per_beam)[:, :, None]
    values, position = picked.view(g, -1).topk(want, dim=1)
    return values, top.gather(1, position // c) * c + position % c
