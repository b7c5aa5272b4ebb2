"""Text in, text out: tokenize, batch by length under a token budget, decode, detokenize.

Used by validation, ``seqmap translate`` and ``seqmap evaluate``. Sentences are
sorted by length so each batch carries little padding, decoded, and put back in
their input order.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from seqmap.data.batching import token_budget_batches
from seqmap.data.tokenizers import BOS, EOS, PAD, Tokenizer
from seqmap.decoding.greedy import greedy


def pad_sources(rows: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Token-id lists -> (src (B, S), src_mask (B, S)) padded with PAD; empty rows become one EOS."""
    rows = [list(r) or [EOS] for r in rows]
    width = max(len(r) for r in rows)
    src = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        src[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return src.to(device), (src != PAD).to(device)


def strip_output(ids: Sequence[int]) -> list[int]:
    """Generated ids up to (not including) the first EOS."""
    out = []
    for i in ids:
        if i == EOS:
            break
        out.append(i)
    return out


@torch.no_grad()
def translate_ids(model, sources: Sequence[Sequence[int]], *, max_tokens: int = 4096, max_len_a: float = 1.5,
                  max_len_b: int = 10, device: torch.device | str = "cpu") -> list[list[int]]:
    """Greedy translations (id lists, no EOS) of source id lists, in input order."""
    lengths = [max(len(s), 1) for s in sources]
    out: list[list[int]] = [[] for _ in sources]
    for batch in token_budget_batches(lengths, None, max_tokens, shuffle=False):
        src, src_mask = pad_sources([sources[i] for i in batch], device)
        max_len = int(max_len_a * src.size(1) + max_len_b)
        result = greedy(model, src, src_mask, bos=BOS, eos=EOS, max_len=max_len, pad=PAD)
        for row, i in zip(result.tokens.tolist(), batch):
            out[i] = strip_output(row)
    return out


def translate_texts(model, src_tok: Tokenizer, tgt_tok: Tokenizer, texts: Sequence[str], **options) -> list[str]:
    """Translate sentences; ``options`` as for ``translate_ids``."""
    hyps = translate_ids(model, [src_tok.encode(t) for t in texts], **options)
    return [tgt_tok.decode(h) for h in hyps]
