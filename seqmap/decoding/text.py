"""Text in, text out: tokenize, batch by length under a token budget, decode, detokenize.

Used by validation, ``seqmap translate``, ``seqmap evaluate`` and ``seqmap generate``.
Sentences are sorted by length so each batch carries little padding, decoded,
and put back in their input order.

How to decode comes from a ``DecodeConfig`` (fields may be overridden by keyword,
e.g. ``beam_size=5``): ``beam_size`` 1 is greedy, more is beam search with the
GNMT ``length_penalty``; ``sample=True`` draws instead (``temperature``,
``top_k``, ``top_p``, seeded by ``seed``); ``no_repeat_ngram`` n > 0 keeps
each of them from repeating an n-gram. ``max_tokens`` bounds the beam-expanded
source tokens of a batch, rows x beams x (longest + 1), so a large test set
never runs out of memory.

With ``n_best == 1`` the functions return one output per input; with
``n_best > 1`` they return, per input, its n-best list of ``Scored`` entries
(best first). An empty source (a blank line: no tokens) is not decoded: its
translation is empty, in its place among the others.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor
from tqdm import tqdm

from seqmap.config import DecodeConfig, from_dict, to_dict
from seqmap.data.pipeline import truncate_source
from seqmap.data.tokenizers import BOS, EOS, NEVER_GENERATED, PAD, Tokenizer
from seqmap.decoding.beam import beam_search, n_best_error
from seqmap.decoding.greedy import decode_loop, pick_best
from seqmap.decoding.ranking import Hypothesis, length_norm
from seqmap.decoding.sampling import RowSampler


class Scored(NamedTuple):
    """One entry of an n-best list.

    Attributes:
        output: token ids (``*_nbest``, ``*_ids``) or text (``*_texts``), without
            EOS; a translation includes its forced ``prefix``, a generation
            excludes its prompt.
        score: sum of the log-probabilities of the generated tokens (EOS included); None when greedy
            decoding was asked for no scores (``translate_nbest(..., scores=False)``).
        normalized: score / GNMT length penalty, what beam search ranks by (None with score).
        attention: (L, H, T, S) attention of each generated token, when asked for.
    """

    output: list[int] | str
    score: float
    normalized: float
    attention: Tensor | None = None


def pad_sources(rows: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Token-id lists -> (src (B, S), src_mask (B, S)) padded with PAD; empty rows become one EOS."""
    rows = [list(r) or [EOS] for r in rows]
    width = max(len(r) for r in rows)
    src = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        src[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return src.to(device), (src != PAD).to(device)


def nothing_to_translate(scores: bool = True) -> list[Scored]:
    """The n-best list of an empty source: one empty output, certain (score 0), or unscored (None)."""
    return [Scored([], 0.0, 0.0) if scores else Scored([], None, None)]


def skip_empty(sources: Sequence[Sequence[int]], decode_rows, scores: bool = True) -> list[list[Scored]]:
    """``decode_rows(rows) -> n-best lists`` run on the non-empty sources only; an empty source gets
    ``nothing_to_translate``, in its place. For decoders of whole batches (``seqmap.hub.ct2``)."""
    kept = [i for i, s in enumerate(sources) if len(s)]
    out = [nothing_to_translate(scores) for _ in sources]
    for i, entries in zip(kept, decode_rows([sources[i] for i in kept]) if kept else [], strict=True):
        out[i] = entries
    return out


def source_ids(tok: Tokenizer, texts: Sequence[str], max_src_len: int = 0) -> list[list[int]]:
    """Token ids of source texts as translation reads them: a blank text (only whitespace) has none, so it is
    translated as empty whatever the tokenizer makes of spaces; with ``max_src_len`` > 0, the first that many."""
    return [truncate_source(tok.encode(t), max_src_len) if t.strip() else [] for t in texts]


def strip_output(ids: Sequence[int]) -> list[int]:
    """Generated ids up to (not including) the first EOS."""
    out = []
    for i in ids:
        if i == EOS:
            break
        out.append(i)
    return out


def resolve_config(decode: DecodeConfig | None, overrides: dict) -> DecodeConfig:
    """``decode`` (default ``DecodeConfig()``) with fields replaced; an unknown name is an error naming the nearest."""
    decode = decode or DecodeConfig()
    return from_dict(DecodeConfig, {**to_dict(decode), **overrides}, "decode") if overrides else decode


def budget_batches(lengths: Sequence[int], indices: Sequence[int], budget: int) -> list[list[int]]:
    """Cut ``indices`` (sorted by ``lengths``) into batches with rows x (longest + 1) <= budget.

    A row longer than the budget still gets a batch of its own, never an error.
    """
    order = sorted(indices, key=lambda i: lengths[i])
    batches: list[list[int]] = []
    batch: list[int] = []
    for i in order:  # sorted, so the newest row is the longest
        if batch and (len(batch) + 1) * (lengths[i] + 1) > budget:
            batches.append(batch)
            batch = []
        batch.append(i)
    return batches + ([batch] if batch else [])


def batch_budget(decode: DecodeConfig, sample: bool = False) -> int:
    """Source tokens (or frames) a batch may hold before beam expansion: ``decode.max_tokens`` counts them after
    it, so with k beams a batch holds max_tokens // k of them (at least 1; sampling decodes one row per input)."""
    return max(decode.max_tokens // (1 if sample else decode.beam_size), 1)


def decode_batch(model, src: Tensor | None, src_mask: Tensor | None, prompt: Tensor, max_len: int | Tensor,
                 decode: DecodeConfig, *, n_best: int = 1, sample: bool = False,
                 generators: Sequence[torch.Generator] | None = None, need_attention: bool = False,
                 scores: bool = True) -> list[list[Hypothesis]]:
    """Decode one batch as ``decode`` says (greedy, beam or sampling); per row its n-best ``Hypothesis`` list.

    ``sample``: row b draws from ``generators[b]`` (``RowSampler``), so its output does not depend on the
    rows beside it, and finished rows leave the batch. ``scores=False``: greedy decoding skips the scores
    (a softmax over the vocabulary per step), and its hypotheses' ``score`` and ``normalized`` are None;
    sampling and beam search always score.
    """
    if sample or (decode.beam_size == 1 and n_best == 1):
        if n_best != 1:
            raise ValueError(f"n_best={n_best} needs beam search (sampling draws one output per input)")
        if sample and (generators is None or len(generators) != prompt.size(0)):
            raise ValueError(f"sampling needs one generator per row: {prompt.size(0)} rows")
        choose = RowSampler(decode.temperature, decode.top_k, decode.top_p, generators) if sample else pick_best
        result = decode_loop(model, src, src_mask, bos=BOS, eos=EOS, max_len=max_len, pad=PAD, prompt=prompt,
                             choose=choose, need_attention=need_attention, banned=NEVER_GENERATED,
                             no_repeat_ngram=decode.no_repeat_ngram, scores=scores or sample)
        lengths = result.lengths.tolist()
        totals = [None] * len(lengths) if result.scores is None else result.scores.tolist()
        out = []
        for b, (length, score) in enumerate(zip(lengths, totals)):
            attention = None if result.attention is None else result.attention[b, :, :, :length]
            normalized = None if score is None else score / length_norm(length, decode.length_penalty,
                                                                          decode.beam_ranking)
            out.append([Hypothesis(result.tokens[b, :length].tolist(), score, normalized, attention)])
        return out
    if (why := n_best_error(n_best, decode.beam_size)) is not None:
        raise ValueError(why)
    return beam_search(model, src, src_mask, beam_size=decode.beam_size, bos=BOS, eos=EOS, max_len=max_len,
                       length_penalty=decode.length_penalty, n_best=n_best, prompt=prompt,
                       need_attention=need_attention, pad=PAD, banned=NEVER_GENERATED, ranking=decode.beam_ranking,
                       early_stopping=decode.hf_early_stopping, absent=decode.absent_ids,
                       no_repeat_ngram=decode.no_repeat_ngram).hypotheses


def _generators(sample: bool, seed: int, count: int, device) -> list[torch.Generator] | None:
    """Input i's sampling generator, seeded with ``seed + i``: its output depends on its own input and
    seed only, not on the inputs decoded beside it (nor on how they are batched)."""
    return [torch.Generator(device=device).manual_seed(seed + i) for i in range(count)] if sample else None


@torch.no_grad()
def translate_nbest(model, sources: Sequence[Sequence[int]], decode: DecodeConfig, *, n_best: int = 1,
                    prefixes: Sequence[Sequence[int]] | None = None, sample: bool = False, seed: int = 0,
                    need_attention: bool = False, device: torch.device | str = "cpu",
                    scores: bool = True, progress: bool = False) -> list[list[Scored]]:
    """Per source id list, its n-best translations as ``Scored`` id lists, in input order.

    Args:
        sources: source token ids (no BOS/EOS).
        decode: how to decode; the maximum length of each output is
            ``max_len_a * its source length + max_len_b`` tokens (EOS included).
        n_best: outputs per source (needs ``beam_size >= n_best``).
        prefixes: per source, target ids the translation is forced to start
            with (fed after BOS, returned as part of the output, not scored).
        sample: sample instead of searching (``temperature``, ``top_k``, ``top_p``).
        seed: seeds the sampling: source i draws from a generator seeded with ``seed + i``, so its
            translation depends on it and that seed only (alone with ``seed + i``, it is the same).
        need_attention: keep each output's attention (rows for generated tokens only).
        scores: False: greedy decoding (beam size 1, no sampling) does not score its outputs
            (``Scored.score`` and ``normalized`` are None), a softmax over the vocabulary per step saved.
        progress: show a bar of sentences decoded on stderr, when stderr is a terminal.

    An empty source is not decoded (nothing to translate): its n-best list is one empty output, scored 0
    (``nothing_to_translate``), whatever its prefix.
    """
    forced = [[BOS, *p] for p in prefixes] if prefixes is not None else [[BOS]] * len(sources)
    if len(forced) != len(sources):
        raise ValueError(f"{len(forced)} prefixes for {len(sources)} sources")
    lengths = [max(len(s), 1) for s in sources]
    generators = _generators(sample, seed, len(sources), device)
    out: list[list[Scored]] = [nothing_to_translate(scores or sample or n_best > 1 or decode.beam_size > 1)
                               for _ in sources]  # what an empty source keeps
    bar = _progress_bar(progress, sum(1 for s in sources if len(s)))
    for prefix_len in sorted({len(f) for f in forced}):  # rows of a batch share one prefix length
        group = [i for i, f in enumerate(forced) if len(f) == prefix_len and len(sources[i])]
        for batch in budget_batches(lengths, group, batch_budget(decode, sample)):
            src, src_mask = pad_sources([sources[i] for i in batch], device)
            max_len = (decode.max_len_a * src_mask.sum(1).cpu() + decode.max_len_b).long().clamp(min=1)
            prompt = torch.tensor([forced[i] for i in batch], dtype=torch.long, device=device)
            hyps = decode_batch(model, src, src_mask, prompt, max_len, decode, n_best=n_best, sample=sample,
                                generators=generators and [generators[i] for i in batch],
                                need_attention=need_attention, scores=scores)
            for i, nbest in zip(batch, hyps):
                out[i] = [Scored(forced[i][1:] + strip_output(h.tokens), h.score, h.normalized, h.attention)
                          for h in nbest]
            bar.update(len(batch))
    bar.close()
    return out


def _progress_bar(progress: bool, total: int) -> tqdm:
    """A bar of sentences decoded, on stderr and only on a terminal (in a log file it would be noise)."""
    return tqdm(total=total, unit=" sentences", desc="decoding", leave=False, dynamic_ncols=True, mininterval=1.0,
                disable=not (progress and _on_terminal(sys.stderr)), file=sys.stderr)


def _on_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def translate_ids(model, sources: Sequence[Sequence[int]], decode: DecodeConfig | None = None, *, n_best: int = 1,
                  prefixes: Sequence[Sequence[int]] | None = None, sample: bool = False, seed: int = 0,
                  device: torch.device | str = "cpu", **overrides) -> list[list[int]] | list[list[Scored]]:
    """Translations (id lists, no EOS) of source id lists, in input order; n-best lists when ``n_best > 1``.

    ``overrides`` replace fields of ``decode`` (e.g. ``beam_size=5, max_tokens=2000``).
    See ``translate_nbest`` for the other arguments.
    """
    decode = resolve_config(decode, overrides)
    nbest = translate_nbest(model, sources, decode, n_best=n_best, prefixes=prefixes, sample=sample, seed=seed,
                            device=device, scores=n_best > 1)  # one output each: returned without its score
    return [entries[0].output for entries in nbest] if n_best == 1 else nbest


def translate_texts(model, src_tok: Tokenizer, tgt_tok: Tokenizer, texts: Sequence[str],
                    decode: DecodeConfig | None = None, *, n_best: int = 1, prefix: str | Sequence[str] | None = None,
                    sample: bool = False, seed: int = 0, device: torch.device | str = "cpu", max_src_len: int = 0,
                    progress: bool = False, **overrides) -> list[str] | list[list[Scored]]:
    """Translate sentences; n-best lists of ``Scored`` texts when ``n_best > 1``.

    ``prefix``: target text every translation starts with (one string for all,
    or one per sentence); it is part of the returned translation. ``max_src_len`` > 0
    reads only each source's first that many tokens (the run's ``data.max_src_len``). A blank
    sentence translates as empty (``source_ids``). ``progress``: a bar on stderr, on a terminal.
    Other arguments as for ``translate_ids``.
    """
    decode = resolve_config(decode, overrides)
    prefixes = None
    if prefix is not None:
        prefix = [prefix] * len(texts) if isinstance(prefix, str) else list(prefix)
        prefixes = [tgt_tok.encode(p) for p in prefix]
    sources = source_ids(src_tok, texts, max_src_len)
    nbest = translate_nbest(model, sources, decode, n_best=n_best, prefixes=prefixes,
                            sample=sample, seed=seed, device=device, scores=n_best > 1, progress=progress)
    if n_best == 1:
        return [tgt_tok.decode(entries[0].output) for entries in nbest]
    return [[e._replace(output=tgt_tok.decode(e.output)) for e in entries] for entries in nbest]


@torch.no_grad()
def generate_nbest(model, prompts: Sequence[Sequence[int]], decode: DecodeConfig, *, n_best: int = 1,
                   sample: bool = False, seed: int = 0, need_attention: bool = False,
                   device: torch.device | str = "cpu") -> list[list[Scored]]:
    """Continue each prompt (ids, at least one) with a decoder-only model: per prompt its n-best continuations.

    Each continuation has at most ``decode.max_new_tokens`` tokens and ends at
    EOS; it excludes the prompt. Greedy, beam or sampling as in ``translate_nbest``.
    """
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token (a language model has no BOS of its own)")
    lengths = [len(p) + decode.max_new_tokens for p in prompts]
    generators = _generators(sample, seed, len(prompts), device)
    out: list[list[Scored]] = [[] for _ in prompts]
    for prompt_len in sorted({len(p) for p in prompts}):
        group = [i for i, p in enumerate(prompts) if len(p) == prompt_len]
        for batch in budget_batches(lengths, group, batch_budget(decode, sample)):
            prompt = torch.tensor([list(prompts[i]) for i in batch], dtype=torch.long, device=device)
            hyps = decode_batch(model, None, None, prompt, decode.max_new_tokens, decode, n_best=n_best,
                                sample=sample, generators=generators and [generators[i] for i in batch],
                                need_attention=need_attention)
            for i, nbest in zip(batch, hyps):
                out[i] = [Scored(strip_output(h.tokens), h.score, h.normalized, h.attention) for h in nbest]
    return out


def lm_prompt(tok: Tokenizer, text: str) -> list[int]:
    """Prompt ids laid out like the LM training stream (``seqmap.tasks.lm``).

    Character models learn from the raw text (newlines are characters, no EOS), so
    the prompt is its characters, or a newline if empty; other models saw an EOS
    after every line, so the prompt follows an EOS.
    """
    if tok.kind == "char":
        return tok.encode(text) or tok.encode("\n")
    if hasattr(tok, "lm_prompt_ids"):  # a pretrained tokenizer knows how its model's prompts start
        return tok.lm_prompt_ids(text)
    return [EOS, *tok.encode(text)]


def continuation(tok: Tokenizer, prompt_ids: Sequence[int], output: Sequence[int]) -> str:
    """The text of ``output`` as it reads after the prompt (``prompt_ids``), so that prompt + continuation is the
    whole text: decoded behind the prompt's ids, a word or subword tokenizer puts the space between them that
    decoding ``output`` alone drops ("the cat" + "sat on" read "the catsat on")."""
    before, whole = tok.decode(list(prompt_ids)), tok.decode([*prompt_ids, *output])
    return whole[len(before):] if whole.startswith(before) else tok.decode(list(output))


def generate_texts(model, tok: Tokenizer, prompts: Sequence[str], decode: DecodeConfig | None = None, *,
                   n_best: int = 1, sample: bool = False, seed: int = 0, device: torch.device | str = "cpu",
                   **overrides) -> list[str] | list[list[Scored]]:
    """Continue text prompts with a language model; the continuations (prompt excluded, as they read after it:
    ``continuation``), n-best lists if n_best > 1.

    Prompts are encoded as the training stream was (``lm_prompt``), so an empty
    prompt starts a new line.
    """
    decode = resolve_config(decode, overrides)
    ids = [lm_prompt(tok, p) for p in prompts]
    nbest = generate_nbest(model, ids, decode, n_best=n_best, sample=sample, seed=seed, device=device)
    if n_best == 1:
        return [continuation(tok, prompt, entries[0].output) for prompt, entries in zip(ids, nbest, strict=True)]
    return [[e._replace(output=continuation(tok, prompt, e.output)) for e in entries]
            for prompt, entries in zip(ids, nbest, strict=True)]

