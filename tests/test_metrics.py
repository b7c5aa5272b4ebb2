"""Metrics: parity with sacreBLEU called directly, signatures, perplexity from sums."""

import gzip
import math
from pathlib import Path

import pytest
import sacrebleu
import torch

from seqmap.metrics import Score, bleu, bleu_lc_tok, chrf, moses_lc_tok, perplexity, ter, tokenizer_for
from seqmap.training.loss import label_smoothed_nll

HYPS = ["The cat sat on the mat.", "A quick brown fox jumps over the dog!", "It is raining today."]
REFS = ["The cat sat on a mat.", "The quick brown fox jumped over the lazy dog!", "Today it rains."]
REFS2 = ["A cat was sitting on the mat.", "A quick brown fox jumps over the lazy dog.", "It rains today."]


def test_bleu_identical_is_100_and_signed():
    score = bleu(REFS, REFS)
    assert isinstance(score, Score) and score.value == pytest.approx(100.0)
    assert "tok:13a" in score.signature and "nrefs:1" in score.signature and "case:mixed" in score.signature
    assert str(score).startswith("BLEU = 100.00 (nrefs:1")
    zh = ["我们今天去公园散步。", "这是一个测试句子。"]
    score = bleu(zh, zh, tokenize=tokenizer_for("zh"))
    assert score.value == pytest.approx(100.0) and "tok:zh" in score.signature


def test_bleu_matches_sacrebleu():
    for tokenize in ("13a", "intl", "none"):
        score = bleu(HYPS, REFS, tokenize=tokenize)
        expected = sacrebleu.corpus_bleu(HYPS, [REFS], tokenize=tokenize)
        assert score.value == expected.score and f"tok:{tokenize}" in score.signature
        assert score.details["precisions"] == expected.precisions and score.details["bp"] == expected.bp
    assert 0 < bleu(HYPS, REFS).value < 100
    # several reference streams, and lowercasing
    multi = bleu(HYPS, [REFS, REFS2])
    assert multi.value == sacrebleu.corpus_bleu(HYPS, [REFS, REFS2]).score and "nrefs:2" in multi.signature
    lower = bleu([h.upper() for h in HYPS], REFS, lowercase=True)
    folded = bleu([h.lower() for h in HYPS], [r.lower() for r in REFS])
    assert lower.value == pytest.approx(folded.value) and "case:lc" in lower.signature
    assert bleu([h.upper() for h in HYPS], REFS).value < lower.value


def test_chrf_and_ter_match_sacrebleu():
    score = chrf(HYPS, REFS)
    assert score.value == sacrebleu.corpus_chrf(HYPS, [REFS]).score and "nc:6" in score.signature
    assert score.name == "chrF2"
    plus = chrf(HYPS, REFS, word_order=2)
    assert plus.value == sacrebleu.corpus_chrf(HYPS, [REFS], word_order=2).score and plus.name == "chrF2++"
    assert chrf(REFS, REFS).value == pytest.approx(100.0)
    t = ter(HYPS, REFS)
    assert t.value == sacrebleu.corpus_ter(HYPS, [REFS]).score and "tok:tercom" in t.signature
    assert ter(REFS, REFS).value == 0.0


def test_reference_checks():
    with pytest.raises(ValueError, match="2 sentences but there are 3 hypotheses"):
        bleu(HYPS, REFS[:2])
    with pytest.raises(ValueError, match="sacreBLEU knows"):
        bleu(HYPS, REFS, tokenize="moses")
    with pytest.raises(TypeError, match="single string"):
        chrf("a sentence", "a sentence")


def test_tokenizer_for():
    assert [tokenizer_for(x) for x in ("zh", "zh-Hans", "zh_TW", "cmn", "ZH")] == ["zh"] * 5
    assert [tokenizer_for(x) for x in ("en", "de", "fr-CA")] == ["13a"] * 3


def test_perplexity_of_uniform_predictions_is_vocab_size():
    V = 37
    logits = torch.zeros(4, 9, V)
    target = torch.randint(1, V, (4, 9), generator=torch.Generator().manual_seed(0))
    target[1, 4:] = 0
    _, nll_sum, n_tokens = label_smoothed_nll(logits, target, pad_id=0)
    assert perplexity(nll_sum, n_tokens) == pytest.approx(V, rel=1e-5)


def test_perplexity_uses_sums_not_batch_averages():
    batches = [(10.0, 5), (2.0, 20)]  # (nll_sum, n_tokens)
    total = perplexity(sum(s for s, _ in batches), sum(n for _, n in batches))
    assert total == pytest.approx(math.exp(12 / 25))
    assert total != pytest.approx(sum(perplexity(s, n) for s, n in batches) / 2)
    assert perplexity(1e6, 1) == math.inf
    with pytest.raises(ValueError, match="n_tokens > 0"):
        perplexity(1.0, 0)


SHARED_M30K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"


@pytest.mark.skipif(not SHARED_M30K.is_dir(), reason=f"shared corpora absent: {SHARED_M30K}")
@pytest.mark.parametrize("lang", ["en", "de"])
def test_moses_lc_tok_reproduces_multi30k_official_tokenized_files(lang):
    def lines(name):
        with gzip.open(SHARED_M30K / name, "rt", encoding="utf-8") as f:
            return f.read().splitlines()[:300]

    raw, official = lines(f"test_2016_flickr.{lang}.gz"), lines(f"test_2016_flickr.lc.norm.tok.{lang}.gz")
    assert moses_lc_tok(raw, lang) == official


def test_bleu_lc_tok_ignores_case_and_tokenization_of_the_hypotheses():
    refs = moses_lc_tok(REFS, "en")
    assert refs[0] == "the cat sat on a mat ."
    perfect = bleu_lc_tok([r.upper() for r in REFS], refs, "en")
    assert perfect.value == pytest.approx(100.0) and "tok:none" in perfect.signature
    assert bleu_lc_tok(HYPS, refs, "en").value < 100.0
    dont = bleu_lc_tok(["I don't know."], ["i don &apos;t know ."], "en")
    assert dont.value == pytest.approx(100.0)  # Moses escapes the apostrophe and splits "n't"


def test_edit_distance_counts_substitutions_insertions_and_deletions():
    from seqmap.metrics import edit_distance

    assert edit_distance([], []) == 0
    assert edit_distance(list("123"), list("123")) == 0
    assert edit_distance(list("1 3".split()), list("123")) == 1  # one deletion
    assert edit_distance(list("1293"), list("123")) == 1  # one insertion
    assert edit_distance(list("173"), list("123")) == 1  # one substitution
    assert edit_distance(list("kitten"), list("sitting")) == 3
    assert edit_distance([], list("abc")) == 3 and edit_distance(list("abc"), []) == 3


def test_word_error_rate_sums_errors_over_the_set():
    from seqmap.metrics import word_error_rate

    out = word_error_rate(["1 2 3", "4 5", ""], ["1 2 3", "4 6 7", "8"])
    assert (out["errors"], out["words"]) == (0 + 2 + 1, 3 + 3 + 1)
    assert out["wer"] == pytest.approx(100 * 3 / 7) and out["string_accuracy"] == pytest.approx(100 / 3)
    with pytest.raises(ValueError, match="2 outputs for 1 references"):
        word_error_rate(["a", "b"], ["a"])
def test_rouge_matches_rouge_score_on_fixed_strings():
    from rouge_score import rouge_scorer

    from seqmap.metrics import rouge

    hyps = ["Python bindings for the GTK toolkit", "library for reading PNG images", "tools"]
    refs = ["Python 3 bindings for GTK", "PNG image reading library (development files)", "command-line tools"]
    scores = rouge(hyps, refs)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    for name in ("rouge1", "rouge2", "rougeL"):
        expected = 100 * sum(scorer.score(r, h)[name].fmeasure for h, r in zip(hyps, refs)) / len(hyps)
        assert scores[name].value == pytest.approx(expected)
        assert "stem:yes" in scores[name].signature and "f1" in scores[name].signature
    # golden values by hand: "the cat sat" vs "the cat ran": 2 of 3 unigrams, 1 of 2 bigrams, LCS 2
    hand = rouge(["the cat sat"], ["the cat ran"])
    assert hand["rouge1"].value == pytest.approx(200 / 3)
    assert hand["rouge2"].value == pytest.approx(50.0)
    assert hand["rougeL"].value == pytest.approx(200 / 3)
    # stemming: "images" and "image" are one word
    assert rouge(["images"], ["image"])["rouge1"].value == pytest.approx(100.0)
    assert rouge(["images"], ["image"], stemmer=False)["rouge1"].value == 0.0


def test_rouge_reference_checks():
    from seqmap.metrics import rouge

    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        rouge(["a", "b"], ["a"])
    with pytest.raises(TypeError):
        rouge("a b", "a b")


def test_accuracy_macro_f1_and_the_confusion_matrix_of_a_classifier_match_scikit_learn():
    """Macro-F1 averages the classes present in gold or predictions (scikit-learn's default labels): class 3
    of 4 occurs nowhere and is not a zero in the mean."""
    sklearn_metrics = pytest.importorskip("sklearn.metrics", reason="scikit-learn (the baseline extra) is missing")
    from seqmap.metrics import accuracy, confusion_matrix, macro_f1

    gold = [0, 0, 0, 1, 1, 2, 2, 2, 2, 0]
    predicted = [0, 1, 0, 1, 2, 2, 2, 0, 1, 0]
    assert confusion_matrix(predicted, gold, 4) == [[3, 1, 0, 0], [0, 1, 1, 0], [1, 1, 2, 0], [0, 0, 0, 0]]
    assert accuracy(predicted, gold) == pytest.approx(60.0)
    # class 0: 2*3/(4+4), class 1: 2*1/(2+3), class 2: 2*2/(4+3)
    assert macro_f1(predicted, gold, 4) == pytest.approx(100 * (6 / 8 + 2 / 5 + 4 / 7) / 3)
    assert macro_f1(predicted, gold, 4) == pytest.approx(100 * sklearn_metrics.f1_score(gold, predicted,
                                                                                        average="macro"))
    assert macro_f1([1, 1], [0, 0], 2) == 0.0  # no class right


def test_classification_scores_of_nothing_are_an_error_naming_the_counts():
    from seqmap.metrics import accuracy, macro_f1

    needs = "needs as many predictions as gold labels, and at least one \\(0, 0\\)"
    with pytest.raises(ValueError, match="accuracy " + needs):
        accuracy([], [])
    with pytest.raises(ValueError, match="macro-F1 " + needs):
        macro_f1([], [], 3)  # was a ZeroDivisionError
    with pytest.raises(ValueError, match="2 predictions for 1 gold labels"):
        macro_f1([0, 1], [0], 2)
