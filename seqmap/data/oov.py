"""Extended ids for source words outside the vocabulary, so that a copy model can copy them (See et al. 2017).

A tokenizer that can produce UNK (``word``, ``char``; sentencepiece without ``byte_fallback``) loses an
unseen source word. With extended ids each distinct UNK word of one source gets its own id V, V + 1, ...
(V: the vocabulary size), in order of first occurrence:

    src_ids, oov = extend_source(tok, "install zyxwv now")    # [.., V, ..], ["zyxwv"]
    tgt_ids = extend_target(tok, "zyxwv tool", oov)           # [V, ..]: the target may name it too
    text = decode_extended(tok, hyp_ids, oov)                  # ids >= V back to their words

``seqmap.models.transformer.Transformer`` with a copy head reads ids >= V as UNK in its embeddings and
puts copy mass on them (``seqmap.nn.copy.mix_copy``). The ``bpe`` / ``unigram`` tokenizers of the
shipped configs use byte fallback and never produce UNK, so their extended ids are their ids.
"""

from __future__ import annotations

from collections.abc import Sequence

from seqmap.data.tokenizer_base import UNK, Tokenizer


def _aligned(tok: Tokenizer, text: str) -> tuple[list[int], list[str]]:
    ids, pieces = tok.encode(text), tok.tokens(text)
    if len(ids) != len(pieces):
        raise ValueError(f"the {tok.kind} tokenizer gives {len(ids)} ids but {len(pieces)} pieces for one text, so "
                         "its UNK pieces cannot be named; extended ids need one piece per id (word or char)")
    return ids, pieces


def extend_source(tok: Tokenizer, text: str) -> tuple[list[int], list[str]]:
    """(ids with each distinct UNK piece as V + k, the UNK pieces in order: the source's OOV list)."""
    ids, pieces = _aligned(tok, text)
    oov: list[str] = []
    out = []
    for i, piece in zip(ids, pieces):
        if i == UNK:
            if piece not in oov:
                oov.append(piece)
            i = tok.vocab_size + oov.index(piece)
        out.append(i)
    return out, oov


def extend_target(tok: Tokenizer, text: str, oov: Sequence[str]) -> list[int]:
    """Target ids where a UNK piece found in the source's ``oov`` list gets its extended id (others stay UNK)."""
    ids, pieces = _aligned(tok, text)
    return [tok.vocab_size + oov.index(p) if i == UNK and p in oov else i for i, p in zip(ids, pieces)]


def decode_extended(tok: Tokenizer, ids: Sequence[int], oov: Sequence[str]) -> str:
    """Text of ids in the extended vocabulary: ids >= V are the source's OOV pieces."""
    v, parts, run = tok.vocab_size, [], []
    for i in ids:
        if i < v:
            run.append(i)
            continue
        if i - v >= len(oov):
            raise ValueError(f"extended id {i} names OOV piece {i - v}, but the source has {len(oov)}")
        if run:
            parts.append(tok.decode(run))
            run = []
        parts.append(oov[i - v])
    if run:
        parts.append(tok.decode(run))
    return ("" if tok.kind == "char" else " ").join(p for p in parts if p)
