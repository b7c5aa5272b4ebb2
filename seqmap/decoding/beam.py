"""Beam search over the model protocol: one batched search for every model family.

Each sentence keeps k live hypotheses ("beams"). One step of the search:

    expand    the log-probabilities of every live beam's next token, plus the beam's score   (G, n*V)
    prune     the 2k best candidates of each sentence (found chunk by chunk, without building
              the expanded (G, n*V) scores: ``seqmap.decoding.select.top_candidates``)        (G, 2k)
    finish    candidates ending in EOS among the k best become finished hypotheses, ranked by
              their score divided by the GNMT length penalty
    advance   the k best candidates not ending in EOS are the next live beams; the decoder state
              follows them (``state.reorder``)

G is the number of sentences still searching, n the live beams per sentence (1 at
the first step: the search starts from one beam per sentence, so no duplicate
hypotheses can appear; k afterwards). The source is encoded once; the first
decode step runs on one row per sentence, then memory and state are expanded to
k rows per sentence by the first reorder.

Stopping rule (per sentence). A sentence stops searching as soon as one holds:

1. it has ``beam_size`` finished hypotheses (the usual rule of NMT toolkits);
2. it has ``n_best`` finished hypotheses and no live beam can still beat the
   ``n_best``-th of them: scores only fall as tokens are added, so a live beam's
   best possible normalized score is bounded by its score over the largest
   length penalty it can still reach. This changes nothing in the result of
   rule 1; it only saves steps;
3. it reached its maximum length: its live beams are finished as they are,
   without EOS.

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
included, prompt excluded). Hypotheses are ranked by the normalized score
``score / lp(length)`` with ``lp = ((5 + length) / 6) ** alpha`` (Wu et al. 2016),
``length`` counting the generated tokens, EOS included; alpha = 0 ranks by score.

``ranking="hf"`` reproduces ``transformers``' ``generate(num_beams=k)`` instead (``decode.beam_ranking: hf``):

* the normalized score is ``score / length ** alpha``;
* banned ids are masked after the softmax (the model's own tokens keep their probability mass), and only
  the ``absent`` ids (seqmap's reserved ids the original model has no token for) are left out of it;
* at the maximum length, the candidates among the k best of the step finish (EOS or not), not the k live
  beams chosen from all 2k;
* the stopping rule is its ``early_stopping``: ``True`` is rule 1; ``False`` stops a sentence with k
  finished hypotheses once the best live beam's score over its current length ** alpha cannot beat the
  k-th of them; ``"never"`` does the same with the maximum length when alpha > 0 (rule 3 as above).

One difference remains by construction: ``transformers`` starts from k copies of the first beam, k - 1 of
them scored -1e9, where seqmap starts from one beam; the two agree whenever the first step has at least
2k tokens that are not banned (any real vocabulary).
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
from seqmap.decoding.select import top_candidates
from seqmap.decoding.steps import (
    ban_repeats,
    check_banned,
    check_no_repeat_ngram,
    last_query,
    max_lengths,
    next_log_probs,
    pad_keys,
    score_dtype,
    start_tokens,
)


def gnmt_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + length) / 6) ** alpha; 1 when alpha = 0."""
    return ((5.0 + length) / 6.0) ** alpha


def length_norm(length: int, alpha: float, ranking: str = "gnmt") -> float:
    """What a hypothesis's score is divided by: GNMT's penalty, or ``length ** alpha`` (``transformers``)."""
    return gnmt_penalty(length, alpha) if ranking == "gnmt" else float(max(length, 1)) ** alpha


@dataclass
class Hypothesis:
    """One finished hypothesis of one sentence.

    Attributes:
        tokens: generated ids (no BOS, no prompt), ending in EOS unless the
            sentence reached its maximum length.
        score: sum of the log-probabilities of ``tokens`` (None from greedy decoding asked for no
            scores, ``seqmap.decoding.text.decode_batch``).
        normalized: ``score / gnmt_penalty(len(tokens), alpha)``, what the search ranks by (None with score).
        attention: (L, H, T, S) attention of the query that produced each token, when asked for.
    """

    tokens: list[int]
    score: float | None
    normalized: float | None
    attention: Tensor | None = None


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


def _hypothesis(tokens: list[int], score: float, attention: Tensor | None, alpha: float,
                ranking: str = "gnmt") -> Hypothesis:
    return Hypothesis(tokens, score, score / length_norm(len(tokens), alpha, ranking), attention)


def finish(beams: Beams, candidates: Candidates, eos: int, step_attention: Tensor | None, alpha: float,
           ranking: str = "gnmt", at_limit: Tensor | None = None) -> None:
    """Move candidates that end in EOS and rank among the k best of their sentence to the finished lists.

    ``at_limit`` (G,) bool (ranking hf): those sentences' k best candidates finish whatever their last token.
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
        hyp = _hypothesis(history[row].tolist() + [int(tokens[g, j])], float(scores[g, j]), attention, alpha, ranking)
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


def finish_at_limit(beams: Beams, limits: Tensor, alpha: float) -> Tensor:
    """Finish, without EOS, the live beams of the sentences that reached their maximum length; return those (G,)."""
    at_limit = limits[beams.sentences] <= beams.tokens.size(1)  # (G,)
    if bool(at_limit.any()):
        finish_live(beams, at_limit, alpha)
    return at_limit


def finish_live(beams: Beams, which: Tensor, alpha: float, ranking: str = "gnmt") -> None:
    """Finish, without EOS, the live beams of sentences ``which`` (G,): at their length limit, or where no token
    may extend any of them (``no_repeat_ngram`` has banned every one), so that no sentence ends with nothing."""
    k, scores, history = beams.width, beams.scores.cpu(), beams.tokens.cpu()
    for g in which.nonzero().squeeze(1).tolist():
        for j in range(k):
            if scores[g, j] > float("-inf"):
                row = g * k + j
                attention = None if beams.attention is None else beams.attention[row]
                hyp = _hypothesis(history[row].tolist(), float(scores[g, j]), attention, alpha, ranking)
                beams.finished[int(beams.sentences[g])].append(hyp)


def stopped(beams: Beams, limits: Tensor, n_best: int, beam_size: int, alpha: float) -> Tensor:
    """(G,) which sentences stop searching now (rules 1 and 2 of the module docstring)."""
    best_live = beams.scores.max(dim=1).values.tolist()  # (G,) as Python floats: one transfer, no per-item ops
    stop = []
    for g, sentence in enumerate(beams.sentences.tolist()):
        finished = beams.finished[sentence]
        if len(finished) >= beam_size or best_live[g] == float("-inf"):
            stop.append(True)
        elif len(finished) >= n_best:
            reachable = int(limits[sentence]) if alpha >= 0 else beams.tokens.size(1) + 1
            nth = sorted((h.normalized for h in finished), reverse=True)[n_best - 1]
            stop.append(best_live[g] / gnmt_penalty(reachable, alpha) <= nth)
        else:
            stop.append(False)
    return torch.tensor(stop, dtype=torch.bool)


def stopped_hf(beams: Beams, limits: Tensor, beam_size: int, alpha: float, early_stopping: bool | str) -> Tensor:
    """(G,) which sentences stop searching now under ``transformers``' ``early_stopping`` (ranking hf)."""
    best_live = beams.scores.max(dim=1).values.tolist()  # (G,)
    stop = []
    for g, sentence in enumerate(beams.sentences.tolist()):
        finished = beams.finished[sentence]
        if best_live[g] == float("-inf"):
            stop.append(True)
        elif len(finished) >= beam_size:
            if early_stopping is True:
                stop.append(True)
                continue
            length = int(limits[sentence]) if early_stopping == "never" and alpha > 0 else beams.tokens.size(1)
            worst = sorted((h.normalized for h in finished), reverse=True)[beam_size - 1]
            stop.append(best_live[g] / length_norm(length, alpha, "hf") <= worst)
        else:
            stop.append(False)
    return torch.tensor(stop, dtype=torch.bool)


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
    """Beam search for a batch of sentences (see the module docstring for the algorithm and stopping rule).

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
        length_penalty: GNMT alpha (0 = rank by summed log-prob).
        n_best: hypotheses returned per sentence, 1 <= n_best <= beam_size.
        prompt: (B, P) forced first decoder inputs, fed in one ``decode_step``
            instead of BOS: include BOS if the model expects it (a forced target
            prefix is ``[BOS, ...]``; a language model's prompt is its text).
            Rows share one length P. Not part of the returned tokens or scores.
        need_attention: keep each hypothesis's attention (L, H, T, S).
        pad: fills ``BeamResult.best().tokens`` after a hypothesis ends.
        banned: ids never generated (see ``next_log_probs``); text-level decoding bans PAD, BOS and UNK.
        ranking: gnmt (seqmap's) or hf (``transformers``' ``generate``; see the module docstring).
        early_stopping: ranking hf: ``transformers``' early_stopping (True, False or "never").
        absent: ranking hf: ids left out of the softmax (those the original model has no token for).
        no_repeat_ngram: n > 0: never extend a beam into an n-gram it already holds (module docstring).
    """
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an int >= 1, got {beam_size!r}")
    if not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be between 1 and beam_size={beam_size}, got {n_best}")
    if ranking not in ("gnmt", "hf"):
        raise ValueError(f"ranking must be gnmt or hf, got {ranking!r}")
    if early_stopping not in (True, False, "never"):
        raise ValueError(f"early_stopping must be True, False or 'never' (transformers'), got {early_stopping!r}")
    check_no_repeat_ngram(no_repeat_ngram)
    hf = ranking == "hf"
    step_input = start_tokens(src, prompt, bos)
    batch, device = step_input.size(0), step_input.device
    limits = max_lengths(max_len, batch)
    if batch == 0:
        return BeamResult([], pad)
    memory = model.encode(src, src_mask)
    logits, state, attn = model.decode_step(step_input, memory, None, need_attention=need_attention)
    check_banned(banned, logits.size(-1))
    if hf:
        check_banned(absent, logits.size(-1), "absent")
    beams = Beams(torch.arange(batch), torch.zeros(batch, 1, dtype=score_dtype(logits), device=device),
                  torch.empty(batch, 0, dtype=torch.long, device=device), finished=[[] for _ in range(batch)])
    for _ in range(int(limits.max())):
        log_probs = next_log_probs(logits, banned, absent if hf else None)  # (G*n, V)
        if no_repeat_ngram:
            log_probs = ban_repeats(log_probs, history(beams, step_input), no_repeat_ngram)
        candidates = prune(beams.scores, log_probs, beam_size)
        if no_repeat_ngram:  # the only way every token of a step is banned: keep the beams it strands
            stranded = ~torch.isfinite(candidates.scores).any(dim=1)  # (G,)
            if bool(stranded.any()):
                finish_live(beams, stranded, length_penalty, ranking)
        step_attention = last_query(attn) if need_attention else None
        at_limit = limits[beams.sentences] <= beams.tokens.size(1) + 1 if hf else None  # (G,)
        finish(beams, candidates, eos, step_attention, length_penalty, ranking, at_limit)
        live = advance(candidates, beam_size, eos)
        same_sources = beams.width == beam_size  # beams move within their sentence's block of k rows
        beams = follow(beams, live, step_attention)
        if hf:
            keep = ~(at_limit | stopped_hf(beams, limits, beam_size, length_penalty, early_stopping))
        else:
            keep = ~(finish_at_limit(beams, limits, length_penalty)
                     | stopped(beams, limits, n_best, beam_size, length_penalty))
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
