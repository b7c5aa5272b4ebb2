"""Beam search over the model protocol: one batched search for every model family.

Each sentence keeps k live hypotheses ("beams"). One step of the search:

    expand    the log-probabilities of every live beam's next token, plus the beam's score   (G, n*V)
    prune     the 2k best candidates of each sentence (found chunk by chunk, without building
              the expanded (G, n*V) scores: ``seqmap.decoding.select.top_candidates``)        (G, 2k)
    finish    candidates ending in EOS among the k best become finished hypotheses, ranked by
              their score over the ranking scheme's length norm
    advance   the k best candidates not ending in EOS are the next live beams; the decoder state
              follows them (``state.reorder``)

G is the number of sentences still searching, n the live beams per sentence (1 at
the first step: the search starts from one beam per sentence, so no duplicate
hypotheses can appear; k afterwards). The source is encoded once; the first
decode step runs on one row per sentence, then memory and state are expanded to
k rows per sentence by the first reorder.

How hypotheses are scored, which beams finish at a sentence's maximum length, when a sentence
stops searching and how banned ids are masked is the ranking scheme's (``seqmap.decoding.ranking``:
``gnmt``, seqmap's, or ``hf``, ``transformers``' ``generate``); the search calls it and never asks which
it is.

Finished sentences leave the batch (memory and state shrink with them), so the
remaining steps run on the sentences still searching.

The decoder state follows the beams with ``state.reorder(index)``. While the
batch keeps its sentences, beams only move inside their sentence's block of k
rows, so the search calls ``state.reorder(index, same_sources=True)``: per-source
tensors (cross-attention keys/values, source masks) stay where they are, and an
identity reorder (always, with k = 1) is skipped. Expanding to k rows and
dropping finished sentences reorder everything, memory included; a state may
then keep one copy of a per-source tensor for each block of rows that read the
same source (the Transformer's cross-attention keys/values, which the k beams of
a sentence read as k queries: ``seqmap.models.transformer.TransformerState``).

``no_repeat_ngram`` n > 0 gives -inf, after the softmax, to every token that would complete an n-gram
the beam already holds (its prompt included), before the candidates are expanded (``seqmap.decoding.steps.
repeated_ngrams``; fairseq's ``--no-repeat-ngram-size``, ``transformers``' ``no_repeat_ngram_size``).

Scores are sums of natural-log probabilities of the generated tokens (EOS
included, prompt excluded); hypotheses are ranked by their score over the scheme's length norm.

One difference from ``transformers`` remains by construction: ``transformers`` starts from k copies of
the first beam, k - 1 of them scored -1e9, where seqmap starts from one beam; the two agree whenever the
first step has at least 2k tokens that are not banned (any real vocabulary).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from seqmap.decoding.greedy import GreedyResult
from seqmap.decoding.inference import inference
from seqmap.decoding.ranking import Hypothesis, Ranking, make_ranking
from seqmap.decoding.select import top_candidates
from seqmap.decoding.steps import (
    ban_repeats,
    check_banned,
    check_no_repeat_ngram,
    last_query,
    max_lengths,
    pad_keys,
    score_dtype,
    start_tokens,
)


@dataclass
class BeamResult:
    """Per sentence, its n-best list: at most ``n_best`` distinct hypotheses, best (highest normalized score) first."""

    hypotheses: list[list[Hypothesis]]
    pad: int = 0
    score_dtype: torch.dtype = torch.float32  # of ``best().scores``: the search's (``steps.score_dtype``)

    def best(self) -> GreedyResult:
        """The best hypothesis of each sentence in ``greedy``'s layout, as CPU tensors (tokens padded with ``pad``)."""
        best = [h[0] for h in self.hypotheses]
        width = max((len(h.tokens) for h in best), default=0)
        tokens = torch.full((len(best), width), self.pad, dtype=torch.long)
        for i, h in enumerate(best):
            tokens[i, : len(h.tokens)] = torch.tensor(h.tokens, dtype=torch.long)
        scores = torch.tensor([h.score for h in best], dtype=self.score_dtype)
        lengths = torch.tensor([len(h.tokens) for h in best])
        attention = None
        if best and best[0].attention is not None:
            keys = max(h.attention.size(-1) for h in best)
            attention = torch.stack([F.pad(pad_keys(h.attention.cpu(), keys), (0, 0, 0, width - len(h.tokens)))
                                     for h in best])  # (B, L, H, T, S)
        return GreedyResult(tokens, scores, lengths, attention)


class Candidates(NamedTuple):
    """The 2k best continuations of each of G sentences, best first.

    scores: (G, 2k) beam score + token log-prob (-inf for missing candidates).
    rows: (G, 2k) the live row each continues (an index into the G*n current rows).
    tokens: (G, 2k) the next token.
    """

    scores: Tensor
    rows: Tensor
    tokens: Tensor


@dataclass
class Beams:
    """The live beams of the G sentences still searching.

    sentences: (G,) the input position of each sentence (CPU).
    scores: (G, n) sum of log-probs of each live beam (-inf: no beam).
    tokens: (G*n, t) tokens generated so far, row g*n + j = beam j of sentence g.
    attention: (G*n, L, H, t, S) attention of every step, or None.
    """

    sentences: Tensor
    scores: Tensor
    tokens: Tensor
    attention: Tensor | None = None
    finished: list[list[Hypothesis]] = field(default_factory=list)  # per input sentence

    @property
    def width(self) -> int:
        return self.scores.size(1)


def prune(beam_scores: Tensor, log_probs: Tensor, beam_size: int) -> Candidates:
    """The 2k best continuations of each sentence: beam scores (G, n) + next-token log-probs (G*n, V).

    The candidates are expanded (module docstring) only in effect: ``top_candidates`` finds the best
    without building all G x n*V sums.
    """
    g, n = beam_scores.shape
    vocab = log_probs.size(-1)
    n_v, want = n * vocab, 2 * beam_size
    scores, flat = top_candidates(beam_scores, log_probs, min(want, n_v))  # sorted, best first
    rows = torch.arange(g, device=log_probs.device)[:, None] * n + flat // vocab  # (G, 2k)
    tokens = flat % vocab
    if scores.size(1) < want:  # tiny vocabulary at the first step: pad with impossible candidates
        missing = want - scores.size(1)
        scores = torch.cat([scores, scores.new_full((g, missing), float("-inf"))], dim=1)
        rows = torch.cat([rows, rows[:, :1].expand(g, missing)], dim=1)
        tokens = torch.cat([tokens, tokens[:, :1].expand(g, missing)], dim=1)
    return Candidates(scores, rows, tokens)


def advance(candidates: Candidates, beam_size: int, eos: int) -> Candidates:
    """The next live beams: the k best candidates that do not end in EOS, as (G, k) tensors."""
    live = candidates.scores.masked_fill(candidates.tokens == eos, float("-inf"))
    scores, pick = live.topk(beam_size, dim=1)
    return Candidates(scores, candidates.rows.gather(1, pick), candidates.tokens.gather(1, pick))


def finish(beams: Beams, candidates: Candidates, eos: int, step_attention: Tensor | None, ranking: Ranking,
           at_limit: Tensor | None = None) -> None:
    """Move candidates that end in EOS and rank among the k best of their sentence to the finished lists.

    ``at_limit`` (G,) bool: those sentences' k best candidates finish whatever their last token
    (``Ranking.candidates_end``).
    """
    k = candidates.scores.size(1) // 2
    ends = candidates.tokens[:, :k] == eos
    if at_limit is not None:
        ends = ends | at_limit.to(ends.device)[:, None]
    ends = ends & torch.isfinite(candidates.scores[:, :k])
    if not bool(ends.any()):
        return
    scores, rows, history = candidates.scores[:, :k].cpu(), candidates.rows[:, :k].cpu(), beams.tokens.cpu()
    tokens = candidates.tokens[:, :k].cpu()
    for g, j in ends.nonzero().tolist():
        row = int(rows[g, j])
        attention = None
        if step_attention is not None:
            attention = step_attention[row]  # (L, H, 1, S)
            if beams.attention is not None:
                attention = torch.cat([pad_keys(beams.attention[row], attention.size(-1)), attention], dim=-2)
        hyp = ranking.hypothesis(history[row].tolist() + [int(tokens[g, j])], float(scores[g, j]), attention)
        beams.finished[int(beams.sentences[g])].append(hyp)


def follow(beams: Beams, live: Candidates, step_attention: Tensor | None) -> Beams:
    """The live beams after this step: histories of the rows they continue, plus their new token."""
    rows = live.rows.flatten()  # (G*k,)
    tokens = torch.cat([beams.tokens.index_select(0, rows), live.tokens.flatten()[:, None]], dim=1)
    attention = None
    if step_attention is not None:
        new = step_attention.index_select(0, rows)
        attention = new if beams.attention is None else torch.cat(
            [pad_keys(beams.attention.index_select(0, rows), new.size(-1)), new], dim=-2)
    return Beams(beams.sentences, live.scores, tokens, attention, beams.finished)


def finish_live(beams: Beams, which: Tensor, ranking: Ranking) -> None:
    """Finish, without EOS, the live beams of sentences ``which`` (G,): at their length limit
    (``Ranking.live_end``), or where no token may extend any of them (``no_repeat_ngram`` has banned every
    one), so that no sentence ends with nothing."""
    if not bool(which.any()):
        return
    k, scores, history = beams.width, beams.scores.cpu(), beams.tokens.cpu()
    for g in which.nonzero().squeeze(1).tolist():
        for j in range(k):
            if scores[g, j] > float("-inf"):
                row = g * k + j
                attention = None if beams.attention is None else beams.attention[row]
                hyp = ranking.hypothesis(history[row].tolist(), float(scores[g, j]), attention)
                beams.finished[int(beams.sentences[g])].append(hyp)


def stopped(beams: Beams, limits: list[int], ranking: Ranking) -> Tensor:
    """(G,) which sentences stop searching now (``Ranking.stops``); ``limits`` each input sentence's maximum length."""
    best_live = beams.scores.max(dim=1).values.tolist()  # (G,) as Python floats: one transfer, no per-item ops
    length = beams.tokens.size(1)
    return torch.tensor([ranking.stops(beams.finished[sentence], best_live[g], length, limits[sentence])
                         for g, sentence in enumerate(beams.sentences.tolist())], dtype=torch.bool)


def history(beams: Beams, prompt: Tensor) -> Tensor:
    """(G*n, P + t) what each live beam has read: its sentence's prompt (B, P) row, then its tokens."""
    prompts = prompt.index_select(0, beams.sentences.to(prompt.device)).repeat_interleave(beams.width, dim=0)
    return torch.cat([prompts, beams.tokens], dim=1)


def keep_sentences(beams: Beams, keep: Tensor) -> Beams:
    """The beams of the sentences ``keep`` (G,) bool (CPU)."""
    k = beams.width
    idx = keep.nonzero().squeeze(1)
    rows = (idx[:, None] * k + torch.arange(k)).flatten().to(beams.tokens.device)
    return Beams(beams.sentences[idx], beams.scores.index_select(0, idx.to(beams.scores.device)),
                 beams.tokens.index_select(0, rows),
                 None if beams.attention is None else beams.attention.index_select(0, rows), beams.finished)


def n_best_error(n_best: int, beam_size: int, beam: str = "decode.beam_size", *,
                 n_best_as: str | None = None) -> str | None:
    """The one check that ``n_best`` hypotheses can come from a beam of ``beam_size``: None when they can, else
    its one-line message. ``beam`` names the setting to raise (``decode.beam_size``; a server request's
    ``beam_size``); ``n_best_as`` shows the n_best asked for (default ``n_best=N``)."""
    if n_best <= beam_size:
        return None
    return f"{n_best_as or f'n_best={n_best}'} needs {beam} >= {n_best} (got {beam_size})"


@inference
def beam_search(
    model,
    src: Tensor | None,
    src_mask: Tensor | None,
    *,
    beam_size: int,
    bos: int,
    eos: int,
    max_len: int | Tensor,
    length_penalty: float = 0.0,
    n_best: int = 1,
    prompt: Tensor | None = None,
    need_attention: bool = False,
    pad: int = 0,
    banned: Sequence[int] = (),
    ranking: str = "gnmt",
    early_stopping: bool | str = False,
    absent: Sequence[int] = (),
    no_repeat_ngram: int = 0,
) -> BeamResult:
    """Beam search for a batch of sentences (the algorithm: the module docstring; the stopping rules: the ranking).

    Args:
        model: anything speaking the protocol: ``encode``, ``decode_step``, and a
            state with ``reorder(index, *, same_sources=False)``.
        src: (B, S) source ids, or None for a decoder-only model (give ``prompt``).
        src_mask: (B, S) True at real source tokens, or None.
        beam_size: k, live hypotheses per sentence (1 = greedy).
        bos: fed first when there is no ``prompt``.
        eos: ends a hypothesis.
        max_len: most tokens generated per sentence, EOS included: one int, or a
            (B,) tensor (e.g. a * source length + b).
        length_penalty: alpha of the ranking's length norm (0 = rank by summed log-prob).
        n_best: hypotheses returned per sentence, 1 <= n_best <= beam_size.
        prompt: (B, P) forced first decoder inputs, fed in one ``decode_step``
            instead of BOS: include BOS if the model expects it (a forced target
            prefix is ``[BOS, ...]``; a language model's prompt is its text).
            Rows share one length P. Not part of the returned tokens or scores.
        need_attention: keep each hypothesis's attention (L, H, T, S).
        pad: fills ``BeamResult.best().tokens`` after a hypothesis ends.
        banned: ids never generated (see ``next_log_probs``); text-level decoding bans PAD, BOS and UNK.
        ranking: gnmt (seqmap's) or hf (``transformers``' ``generate``; see ``seqmap.decoding.ranking``).
        early_stopping: ranking hf: ``transformers``' early_stopping (True, False or "never").
        absent: ranking hf: ids left out of the softmax (those the original model has no token for).
        no_repeat_ngram: n > 0: never extend a beam into an n-gram it already holds (module docstring).
    """
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an int >= 1, got {beam_size!r}")
    if n_best < 1:
        raise ValueError(f"n_best must be between 1 and beam_size={beam_size}, got {n_best}")
    if (why := n_best_error(n_best, beam_size, "beam_size")) is not None:
        raise ValueError(why)
    scheme = make_ranking(ranking, length_penalty, beam_size, n_best, early_stopping, absent)
    check_no_repeat_ngram(no_repeat_ngram)
    step_input = start_tokens(src, prompt, bos)
    batch, device = step_input.size(0), step_input.device
    limits = max_lengths(max_len, batch)
    if batch == 0:
        return BeamResult([], pad)
    memory = model.encode(src, src_mask)
    logits, state, attn = model.decode_step(step_input, memory, None, need_attention=need_attention)
    check_banned(banned, logits.size(-1))
    scheme.check(logits.size(-1))
    limit_of = limits.tolist()
    beams = Beams(torch.arange(batch), torch.zeros(batch, 1, dtype=score_dtype(logits), device=device),
                  torch.empty(batch, 0, dtype=torch.long, device=device), finished=[[] for _ in range(batch)])
    for _ in range(int(limits.max())):
        log_probs = scheme.log_probs(logits, banned)  # (G*n, V)
        if no_repeat_ngram:
            log_probs = ban_repeats(log_probs, history(beams, step_input), no_repeat_ngram)
        candidates = prune(beams.scores, log_probs, beam_size)
        if no_repeat_ngram:  # the only way every token of a step is banned: keep the beams it strands
            stranded = ~torch.isfinite(candidates.scores).any(dim=1)  # (G,)
            if bool(stranded.any()):
                finish_live(beams, stranded, scheme)
        step_attention = last_query(attn) if need_attention else None
        at_limit = limits[beams.sentences] <= beams.tokens.size(1) + 1  # (G,) at their maximum length after this step
        finish(beams, candidates, eos, step_attention, scheme, scheme.candidates_end(at_limit))
        live = advance(candidates, beam_size, eos)
        same_sources = beams.width == beam_size  # beams move within their sentence's block of k rows
        beams = follow(beams, live, step_attention)
        finish_live(beams, scheme.live_end(at_limit), scheme)
        keep = ~(at_limit | stopped(beams, limit_of, scheme))
        if not bool(keep.any()):
            break
        index = live.rows
        if not bool(keep.all()):
            beams = keep_sentences(beams, keep)
            index, same_sources = index[keep.to(device)], False
        index = index.flatten()
        if not same_sources:
            memory = memory.index_select(index)
            state.reorder(index)
        elif not torch.equal(index, torch.arange(index.numel(), device=device)):
            state.reorder(index, same_sources=True)
        logits, state, attn = model.decode_step(beams.tokens[:, -1:], memory, state, need_attention=need_attention)
    for finished in beams.finished:
        finished.sort(key=lambda h: -h.normalized)
        del finished[n_best:]
    return BeamResult(beams.finished, pad, beams.scores.dtype)
