"""Evaluation metrics: thin wrappers over sacreBLEU, and perplexity.

BLEU, chrF and TER come from sacreBLEU (``sacrebleu.metrics``), the reference
implementation, computed on detokenised text; each score carries sacreBLEU's
signature (e.g. ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``)
so that a reported number says how it was computed. Report it with the score.

``refs`` is either one reference per hypothesis (``list[str]``) or several
reference streams (``list[list[str]]``, each stream parallel to ``hyps``, as in
sacreBLEU).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER

Refs = Sequence[str] | Sequence[Sequence[str]]


@dataclass(frozen=True)
class Score:
    """A corpus-level score (0-100), sacreBLEU's signature string and the statistics behind it."""

    value: float
    signature: str
    details: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    def __str__(self) -> str:
        return f"{self.name} = {self.value:.2f} ({self.signature})"


def _streams(hyps: Sequence[str], refs: Refs) -> list[list[str]]:
    """Reference streams in sacreBLEU's layout, checked against the hypotheses."""
    if isinstance(hyps, str) or isinstance(refs, str):
        raise TypeError("hyps and refs must be lists of sentences, not a single string")
    if refs and all(isinstance(r, str) for r in refs):
        streams = [list(refs)]
    else:
        streams = [list(stream) for stream in refs]
    if not streams:
        raise ValueError("no references given")
    for k, stream in enumerate(streams):
        if len(stream) != len(hyps):
            raise ValueError(f"reference stream {k} has {len(stream)} sentences but there are {len(hyps)} hypotheses")
    return streams


def tokenizer_for(lang: str) -> str:
    """sacreBLEU's tokenizer for a target language code: ``"zh"`` for Chinese (zh, zh-Hans, cmn, ...), else ``"13a"``.

    Japanese and Korean also have dedicated tokenizers in sacreBLEU
    (``ja-mecab``, ``ko-mecab``) but they need extra packages; pass them to
    :func:`bleu` explicitly if installed.
    """
    base = lang.lower().replace("_", "-").split("-")[0]
    return "zh" if base in ("zh", "cmn", "zho", "chi") else "13a"


def bleu(hyps: Sequence[str], refs: Refs, tokenize: str = "13a", lowercase: bool = False) -> Score:
    """Corpus BLEU with sacreBLEU's defaults (exp smoothing, max n-gram 4).

    ``tokenize``: one of sacreBLEU's tokenizers, e.g. ``"13a"`` (default, WMT),
    ``"intl"``, ``"zh"`` (see :func:`tokenizer_for`), ``"char"`` or ``"none"``
    (text already tokenised).
    """
    if tokenize not in BLEU.TOKENIZERS:
        raise ValueError(f"unknown tokenize={tokenize!r}; sacreBLEU knows {sorted(BLEU.TOKENIZERS)}")
    # tokenize="none" means the text is tokenized on purpose: no "forgot to detokenize" warning
    metric = BLEU(tokenize=tokenize, lowercase=lowercase, force=tokenize == "none")
    result = metric.corpus_score(list(hyps), _streams(hyps, refs))
    details = {
        "precisions": list(result.precisions),
        "bp": result.bp,
        "ratio": result.ratio,
        "hyp_len": result.sys_len,
        "ref_len": result.ref_len,
        "counts": list(result.counts),
        "totals": list(result.totals),
    }
    return Score(result.score, str(metric.get_signature()), details, "BLEU")


def chrf(hyps: Sequence[str], refs: Refs, word_order: int = 0, lowercase: bool = False) -> Score:
    """Corpus chrF (character 6-grams, beta 2); ``word_order=2`` gives chrF++."""
    metric = CHRF(word_order=word_order, lowercase=lowercase)
    result = metric.corpus_score(list(hyps), _streams(hyps, refs))
    details = {"char_order": result.char_order, "word_order": result.word_order, "beta": result.beta}
    return Score(result.score, str(metric.get_signature()), details, result.name)


def ter(hyps: Sequence[str], refs: Refs, case_sensitive: bool = False, asian_support: bool = False) -> Score:
    """Corpus TER (translation edit rate; lower is better), sacreBLEU's tercom-compatible version.

    ``asian_support`` splits CJK text into characters (Chinese has no spaces between words);
    sacreBLEU applies it only with tercom's normalisation, so it turns that on too.
    """
    metric = TER(case_sensitive=case_sensitive, asian_support=asian_support, normalized=asian_support)
    result = metric.corpus_score(list(hyps), _streams(hyps, refs))
    details = {"num_edits": result.num_edits, "ref_length": result.ref_length}
    return Score(result.score, str(metric.get_signature()), details, "TER")


def edit_distance(hyp: Sequence[str], ref: Sequence[str]) -> int:
    """Levenshtein distance between two token lists (substitutions, insertions, deletions all cost 1)."""
    row = list(range(len(ref) + 1))
    for i, h in enumerate(hyp, 1):
        diagonal, row[0] = row[0], i
        for j, r in enumerate(ref, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (h != r))
    return row[-1]


def word_error_rate(hyps: Sequence[str], refs: Sequence[str]) -> dict:
    """Word error rate (percent: edit distance over whitespace words / reference words, summed over the set)
    and string accuracy (percent of outputs equal to their reference word for word). For spoken digit
    strings whose words are digits, the word error rate is the digit error rate."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} outputs for {len(refs)} references")
    errors = words = exact = 0
    for hyp, ref in zip(hyps, refs):
        h, r = hyp.split(), ref.split()
        errors += edit_distance(h, r)
        words += len(r)
        exact += h == r
    return {"wer": 100.0 * errors / max(words, 1), "string_accuracy": 100.0 * exact / max(len(refs), 1),
            "errors": errors, "words": words}


def moses_lc_tok(texts: Sequence[str], lang: str) -> list[str]:
    """Lowercase, normalise punctuation and tokenize with sacremoses, as Multi30k's ``task1-tokenize.sh`` does.

    That script runs Moses' ``lowercase.perl``, ``normalize-punctuation.perl -l L`` and
    ``tokenizer.perl -l L`` (which escapes ``'`` as ``&apos;`` and so on); sacremoses is the
    maintained Python port of those scripts. Applied to Multi30k's raw test2016 files this
    reproduces the official ``*.lc.norm.tok.*`` files line for line (tested).
    """
    try:
        from sacremoses import MosesPunctNormalizer, MosesTokenizer
    except ImportError:  # a core dependency; only a broken install lacks it
        raise ImportError("tokenized BLEU needs sacremoses: pip install sacremoses") from None
    normalizer, tokenizer = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
    return [tokenizer.tokenize(normalizer.normalize(t.lower()), return_str=True) for t in texts]


def bleu_lc_tok(hyps: Sequence[str], tok_refs: Sequence[str], lang: str) -> Score:
    """BLEU of detokenized hypotheses against Moses-tokenized lowercased references (Multi30k's papers).

    Most Multi30k results (e.g. the bentrevett/pytorch-seq2seq figures) are BLEU on
    tokenized lowercased text. The hypotheses go through :func:`moses_lc_tok`; the
    references must already be so tokenized (``*.lc.norm.tok.*``); sacreBLEU then scores
    with ``tokenize="none"``. The signature says ``tok:none``: report it as
    "tokenized lowercased BLEU", not comparable with detokenized sacreBLEU.
    """
    return bleu(moses_lc_tok(hyps, lang), list(tok_refs), tokenize="none")


def perplexity(nll_sum: float, n_tokens: int) -> float:
    """``exp(nll_sum / n_tokens)`` from the NLL summed over *all* tokens (natural log); inf on overflow.

    Accumulate ``nll_sum`` and ``n_tokens`` over the whole set (e.g. from
    ``seqmap.training.loss.label_smoothed_nll``) and call this once; an average of
    per-batch perplexities or losses weights short batches wrongly.
    """
    n_tokens = int(n_tokens)
    if n_tokens <= 0:
        raise ValueError(f"perplexity needs n_tokens > 0, got {n_tokens}")
    try:
        return math.exp(float(nll_sum) / n_tokens)
    except OverflowError:
        return math.inf


def confusion_matrix(predicted: Sequence[int], gold: Sequence[int], n_classes: int) -> list[list[int]]:
    """``m[g][p]``: how many examples of class g were predicted as class p (rows gold, columns predicted)."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predictions for {len(gold)} gold labels")
    m = [[0] * n_classes for _ in range(n_classes)]
    for p, g in zip(predicted, gold):
        m[g][p] += 1
    return m


def accuracy(predicted: Sequence[int], gold: Sequence[int]) -> float:
    """The share of examples predicted right, in percent (as BLEU is)."""
    if len(predicted) != len(gold) or not gold:
        raise ValueError(f"accuracy needs as many predictions as gold labels, and at least one ({len(predicted)}, "
                         f"{len(gold)})")
    return 100.0 * sum(p == g for p, g in zip(predicted, gold)) / len(gold)


def macro_f1(predicted: Sequence[int], gold: Sequence[int], n_classes: int) -> float:
    """The mean over the classes present in gold or predictions of each class's F1, in percent.

    The definition of scikit-learn's ``f1_score(average="macro")`` over the labels that occur: a class
    with no true positive scores 0 (precision or recall undefined counts as 0).
    """
    if not gold and not predicted:
        raise ValueError("macro-F1 needs as many predictions as gold labels, and at least one (0, 0)")
    m = confusion_matrix(predicted, gold, n_classes)
    scores = []
    for c in range(n_classes):
        tp = m[c][c]
        gold_c, predicted_c = sum(m[c]), sum(row[c] for row in m)
        if gold_c == 0 and predicted_c == 0:
            continue  # the class occurs nowhere: not part of the mean
        scores.append(0.0 if tp == 0 else 2 * tp / (gold_c + predicted_c))
    return 100.0 * sum(scores) / len(scores)


ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")  # unigram, bigram, longest common subsequence (summary-level L: no)
ROUGE_INSTALL_HINT = "ROUGE needs the rouge-score package: pip install rouge-score (a dependency of seqmap)"


def rouge(hyps: Sequence[str], refs: Sequence[str], stemmer: bool = True) -> dict[str, Score]:
    """Mean sentence ROUGE-1/2/L F1 (0-100) with Google's ``rouge-score`` (the reference implementation).

    ``rouge-score`` lowercases, keeps ``[a-z0-9]`` tokens and (``stemmer=True``) applies the Porter
    stemmer; a non-Latin text therefore scores 0. ROUGE-L is the sentence-level LCS (``rougeL``,
    not ``rougeLsum``). The signature records the options, as sacreBLEU's does.
    """
    if isinstance(hyps, str) or isinstance(refs, str):
        raise TypeError("hyps and refs must be lists of texts, not a single string")
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise ValueError("no hypotheses to score")
    try:
        from rouge_score import rouge_scorer
    except ImportError:
        raise ImportError(ROUGE_INSTALL_HINT) from None
    from importlib.metadata import version

    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=stemmer)
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    for hyp, ref in zip(hyps, refs):
        scores = scorer.score(ref, hyp)  # (target, prediction)
        for name in ROUGE_TYPES:
            totals[name] += scores[name].fmeasure
    signature = f"rouge-score:{version('rouge-score')}|f1|stem:{'yes' if stemmer else 'no'}|mean:sentences"
    return {name: Score(100.0 * total / len(hyps), signature, {"sentences": len(hyps)},
                        name.replace("rouge", "ROUGE-"))
            for name, total in totals.items()}
