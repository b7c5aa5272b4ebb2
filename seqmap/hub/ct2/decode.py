"""Decoding with an export: translating and generating as seqmap does with the run.

The same length limit per sentence, PAD, BOS and UNK never generated, batches cut at the same token budget;
greedy outputs are seqmap's, beam search ranks by CTranslate2's rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from seqmap.config import DecodeConfig
from seqmap.data.tokenizer_base import EOS, NEVER_GENERATED, UNK
from seqmap.decoding.beam import n_best_error
from seqmap.decoding.ranking import length_norm
from seqmap.decoding.text import Scored, batch_budget
from seqmap.hub.ct2.load import ids_of_pieces
from seqmap.hub.source import HubError


def _suppressed(model, tok) -> list[list[str]]:
    """PAD and BOS (never generated; UNK has ``disable_unk``) as CTranslate2's ``suppress_sequences``: those the
    export has a token for (``target_tokens`` of a model ``load_translator`` or ``load_generator`` opened; an
    imported Marian's or GPT-2's export has none for some of seqmap's reserved ids)."""
    tokens = getattr(model, "target_tokens", None)  # None: a model opened by its own constructor
    pieces = tok.pieces([t for t in NEVER_GENERATED if t != UNK])
    return [[piece] for piece in pieces if tokens is None or piece in tokens]


def translate_ct2(translator, src_tok, tgt_tok, sources: Sequence[Sequence[int]],
                  decode: DecodeConfig) -> list[list[int]]:
    """Source ids -> output ids (no EOS), decoded by CTranslate2 as ``translate_ids`` decodes with the run
    (``translate_ct2_nbest``'s best output of each sentence, unscored)."""
    return [entries[0].output for entries in translate_ct2_nbest(translator, src_tok, tgt_tok, sources, decode)]


def translate_ct2_nbest(translator, src_tok, tgt_tok, sources: Sequence[Sequence[int]], decode: DecodeConfig, *,
                        n_best: int = 1, scores: bool = False) -> list[list[Scored]]:
    """Per source, its ``n_best`` outputs decoded by CTranslate2, as ``Scored`` entries of ``translate_nbest``.

    As seqmap: a sentence of S tokens gets at most ``max_len_a * S + max_len_b`` tokens (EOS included);
    PAD, BOS and UNK are never generated, EOS may come first (CTranslate2 bans it there by default);
    batches are cut at ``decode.max_tokens`` source tokens times beams (CTranslate2 sorts the sentences by
    length first). CTranslate2 takes one length limit per call, the longest of all; each output is then cut at its own
    sentence's limit, which is exact for greedy decoding (a row's tokens do not depend on its limit
    until it is reached). Beam search ranks finished hypotheses by CTranslate2's rule (score / length **
    ``length_penalty``, stopping when the best is finished), not seqmap's GNMT one, so beam outputs can
    differ from seqmap's on some sentences (and on those that reach their limit). An empty source gives an
    empty output (CTranslate2 does not decode it; seqmap decodes a source of one EOS).

    ``scores``: each entry's ``score`` is the sum of its tokens' log-probabilities (EOS included when it
    finished) and ``normalized`` that over ``decode.beam_ranking``'s length norm, as seqmap defines them
    (read back from CTranslate2's length-normalised score), and each list is sorted best first by
    ``normalized`` (``best_first``). Without ``scores`` both are None, in CTranslate2's order. With
    ``scores`` or a beam, a sentence that reached its own limit below the call's is decoded again under
    its own limit (a second call for those sentences only), so its score, and its beam, are its own.
    """
    if decode.no_repeat_ngram:
        raise HubError("--decode.no_repeat_ngram is not passed to CTranslate2; decode with seqmap instead")
    if (why := n_best_error(n_best, decode.beam_size)) is not None:
        raise HubError(why)
    if not sources:
        return []
    ids_of = ids_of_pieces(tgt_tok)
    suppressed = _suppressed(translator, tgt_tok)
    rows = [list(s) for s in sources]
    limits = [max(1, int(decode.max_len_a * max(len(s), 1) + decode.max_len_b)) for s in rows]
    alpha = decode.length_penalty

    def call(indices: list[int], limit: int) -> list:
        try:
            return translator.translate_batch(
                [src_tok.pieces(rows[i]) for i in indices], beam_size=decode.beam_size, length_penalty=alpha,
                max_decoding_length=limit, min_decoding_length=0, disable_unk=True, suppress_sequences=suppressed,
                num_hypotheses=n_best, return_scores=scores,
                max_batch_size=batch_budget(decode), batch_type="tokens")
        except (RuntimeError, ValueError) as e:  # e.g. a position past the exported table (model.max_len rows)
            raise HubError(f"CTranslate2 could not decode these sentences: {' '.join(str(e).split())[:200]}; "
                           "shorten them (data.max_src_len, decode.max_len_a/b) or decode with seqmap") from None

    longest = max(limits)
    results = call(list(range(len(rows))), longest)
    if scores or decode.beam_size > 1:  # decode again, under its own limit, each sentence that reached it
        again: dict[int, list[int]] = {}
        for i, (result, limit) in enumerate(zip(results, limits)):
            if limit < longest and any(len(hyp) >= limit for hyp in result.hypotheses):
                again.setdefault(limit, []).append(i)
        for limit, indices in again.items():
            for i, result in zip(indices, call(indices, limit), strict=True):
                results[i] = result
    out = []
    for result, limit in zip(results, limits, strict=True):
        entries = []
        for j, hyp in enumerate(result.hypotheses):
            try:
                output = [ids_of[piece] for piece in hyp[:limit]]
            except KeyError as e:
                raise HubError(f"the export generated {e.args[0]!r}, which is not a token of the run's target "
                               "tokenizer: it is another run's export (check_export says which)") from None
            if scores:  # CTranslate2's score is the sum over (tokens, + EOS when finished) ** alpha
                length = len(hyp) + 1 if len(hyp) < limit else len(hyp)
                entries.append(_scored(output, result.scores[j] * length ** alpha, length, decode))
            else:
                entries.append(Scored(output, None, None))
        out.append(best_first(entries))
    return out


def _scored(output: list[int], score: float, length: int, decode: DecodeConfig) -> Scored:
    return Scored(output, score, score / length_norm(length, decode.length_penalty, decode.beam_ranking))


def best_first(entries: list[Scored]) -> list[Scored]:
    """An n-best list in seqmap's order: highest ``normalized`` first, as ``translate_nbest`` returns it.

    CTranslate2 orders its hypotheses by its own length norm (``length ** length_penalty``); ``normalized``
    divides by ``decode.beam_ranking``'s, so the two orders can differ. Ties keep CTranslate2's order; an
    unscored list keeps it too.
    """
    if any(e.normalized is None for e in entries):
        return entries
    return sorted(entries, key=lambda e: e.normalized, reverse=True)


def export_positions(run) -> int | None:
    """The most tokens (prompt and output) the run's export reads: ``model.max_len`` rows of its position table,
    or None (any number) for rope and ALiBi."""
    return None if run.cfg.model.positional in ("rope", "alibi") else run.cfg.model.max_len


def generate_ct2_nbest(generator, tok, prompts: Sequence[Sequence[int]], decode: DecodeConfig, *, n_best: int = 1,
                       sample: bool = False, scores: bool = False, positions: int | None = None
                       ) -> list[list[Scored]]:
    """Per prompt (ids, at least one), its ``n_best`` continuations by the LM's CTranslate2 export, as
    ``Scored`` entries of ``generate_nbest``: at most ``decode.max_new_tokens`` tokens each, ending at EOS
    (excluded); PAD, BOS and UNK never generated. Greedy outputs are seqmap's; beam search ranks by
    CTranslate2's rule (see ``translate_ct2_nbest``); ``sample`` draws with ``decode``'s temperature,
    top-k and top-p from CTranslate2's random numbers (``ctranslate2.set_random_seed`` before the
    generator opens: the same seed gives the same text, not seqmap's text).

    ``positions``: the most tokens the export reads (``export_positions``); a prompt that could pass it
    is refused in one line (CTranslate2 does not slide a window over learned positions as seqmap does).
    ``scores``: ``score`` and ``normalized`` as seqmap defines them (over the tokens that may be generated),
    read back from CTranslate2's length-normalised score, each list best first by ``normalized``; None otherwise.
    """
    if decode.no_repeat_ngram:
        raise HubError("--decode.no_repeat_ngram is not passed to CTranslate2; decode with seqmap instead")
    beams = 1 if sample else decode.beam_size
    if (why := n_best_error(n_best, beams, "beam search with decode.beam_size")) is not None:
        raise HubError(why)
    if any(len(p) == 0 for p in prompts):
        raise HubError("every prompt needs at least one token (a language model has no BOS of its own)")
    new = decode.max_new_tokens
    longest = max((len(p) for p in prompts), default=0)
    if positions is not None and longest + new > positions:
        raise HubError(f"a prompt of {longest} tokens and --decode.max_new_tokens {new} pass the export's "
                       f"{positions} positions (model.max_len; CTranslate2 does not slide a window as seqmap "
                       f"does): give at most {max(positions - longest, 0)} new tokens, or leave out --ct2")
    if not prompts:
        return []
    ids_of = ids_of_pieces(tok)
    eos = tok.pieces([EOS])[0]
    inputs = [tok.pieces(list(p)) for p in prompts]
    top_k = decode.top_k if 0 < decode.top_k < tok.vocab_size else 0  # 0: every token, as seqmap's k >= V
    options = {"sampling_topk": top_k, "sampling_topp": decode.top_p,
               "sampling_temperature": decode.temperature} if sample else {"sampling_topk": 1}
    results: list = [None] * len(inputs)
    # one call per prompt length: in a call CTranslate2 reads the shortest prompt's length at once and
    # returns the longer prompts' remaining tokens as part of their outputs
    for length in sorted({len(p) for p in inputs}):
        group = [i for i, p in enumerate(inputs) if len(p) == length]
        try:
            found = generator.generate_batch(
                [inputs[i] for i in group], beam_size=beams, length_penalty=decode.length_penalty, max_length=new,
                min_length=0, include_prompt_in_result=False, return_end_token=True, end_token=eos,
                disable_unk=True, num_hypotheses=n_best, return_scores=scores,
                suppress_sequences=_suppressed(generator, tok),
                max_batch_size=batch_budget(decode, sample), batch_type="tokens", **options)
        except (RuntimeError, ValueError) as e:
            raise HubError(f"CTranslate2 could not generate: {' '.join(str(e).split())[:200]}; "
                           "decode with seqmap (leave out --ct2)") from None
        for i, result in zip(group, found, strict=True):
            results[i] = result
    alpha = decode.length_penalty
    out = []
    for result in results:
        entries = []
        for j, hyp in enumerate(result.sequences):
            finished = bool(hyp) and hyp[-1] == eos
            try:
                output = [ids_of[piece] for piece in (hyp[:-1] if finished else hyp)]
            except KeyError as e:
                raise HubError(f"the export generated {e.args[0]!r}, which is not a token of the run's "
                               "tokenizer: it is another run's export (check_export says which)") from None
            if scores:  # CTranslate2's score: the sum over the tokens (EOS included when it finished) / length ** alpha
                entries.append(_scored(output, result.scores[j] * len(hyp) ** alpha, len(hyp), decode))
            else:
                entries.append(Scored(output, None, None))
        out.append(best_first(entries))
    return out
