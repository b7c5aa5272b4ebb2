"""The TF-IDF + logistic regression baseline: it separates what is separable, reads the text, says how to install."""

import sys

import pytest

from seqmap.data.labels import LabelSet
from seqmap.evaluation import baseline_scores
from seqmap.models.tfidf import INSTALL_HINT, MissingBaselineDependency, TfidfLogReg

WORDS = {0: "socket server proxy".split(), 1: "player quest score".split(), 2: "header linker symbol".split()}
FILLER = "the a of for with and".split()


def texts(n: int, shift: int = 0) -> tuple[list[str], list[int]]:
    """n texts of 3 classes: filler plus two words of the class (combinations chosen by index)."""
    out, labels = [], []
    for i in range(n):
        c, k = i % 3, i // 3
        words, filler = WORDS[c], (FILLER[(k + shift) % 6], FILLER[(k + shift + 1) % 6])
        out.append(f"{filler[0]} {words[k % 3]} {filler[1]} {words[(k + 1 + shift) % 3]}")
        labels.append(c)
    return out, labels


def test_it_separates_a_separable_set():
    train, train_labels = texts(30)
    test, test_labels = texts(12, shift=2)  # other word pairs and filler than training
    predicted = TfidfLogReg().fit(train, train_labels).predict(test)
    assert predicted == test_labels  # a constant or shuffled prediction scores a third of this


def test_the_prediction_follows_the_words():
    model = TfidfLogReg().fit(*texts(30))
    assert model.predict(["the socket", "a quest", "the linker", "the player"]) == [0, 1, 2, 1]


def test_baseline_scores_map_labels_like_the_classifier_and_score_the_given_rows():
    train_texts, train_ids = texts(30)
    names = ["net", "games", "libs"]
    train = [(t, names[c]) for t, c in zip(train_texts, train_ids)]
    test_texts, test_ids = texts(12, shift=2)
    test = [(t, names[c]) for t, c in zip(test_texts, test_ids)]
    labels = LabelSet(("games", "libs", "net"))
    result = baseline_scores(train, test, labels)
    assert result == {"model": "tfidf+logreg", "accuracy": 100.0, "macro_f1": 100.0, "examples": 12}
    # the gold labels are the test rows' own: relabelled test rows score 0
    wrong = [(t, names[(c + 1) % 3]) for t, c in zip(test_texts, test_ids)]
    assert baseline_scores(train, wrong, labels)["accuracy"] == 0.0
    # with an `other` class, a label outside the kept ones is scored as `other`, as for the classifier
    merged = LabelSet(("games", "net", "other"), "other", ("libs",))
    assert baseline_scores(train, test, merged)["accuracy"] == 100.0


def test_bad_training_input():
    with pytest.raises(ValueError, match="as many labels as texts"):
        TfidfLogReg().fit(["a", "b"], [0])
    with pytest.raises(ValueError, match="at least 2 classes"):
        TfidfLogReg().fit(["a b", "c d"], [1, 1])
    with pytest.raises(RuntimeError, match="before fit"):
        TfidfLogReg().predict(["a"])


def test_without_scikit_learn_one_line_says_how_to_install(monkeypatch):
    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn -> ImportError
    with pytest.raises(MissingBaselineDependency) as err:
        TfidfLogReg().fit(*texts(6))
    assert str(err.value) == INSTALL_HINT and "pip install 'seqmap[baseline]'" in INSTALL_HINT
    assert "\n" not in INSTALL_HINT
