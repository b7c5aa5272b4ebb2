"""TF-IDF + logistic regression: the linear baseline a text classifier is measured against.

    baseline = TfidfLogReg().fit(train_texts, train_class_ids)
    predicted = baseline.predict(test_texts)  # class ids

Word unigrams and bigrams (lowercased, scikit-learn's default word pattern), those in at least
``min_df`` training texts, sublinear term frequency, L2-normalised rows; a multinomial logistic
regression (L-BFGS, L2 penalty ``C``) on top. Deterministic: the same rows give the same model.

scikit-learn is an optional dependency, imported only when a baseline is fitted; without it
:class:`MissingBaselineDependency` says in one line how to install it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

BASELINE_NAME = "tfidf+logreg"
INSTALL_HINT = "the TF-IDF + logistic regression baseline needs scikit-learn: pip install 'seqmap[baseline]'"


class MissingBaselineDependency(ImportError):
    """scikit-learn is not installed; the message says how to install it."""


def _sklearn():
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        raise MissingBaselineDependency(INSTALL_HINT) from None
    return TfidfVectorizer, LogisticRegression


@dataclass
class TfidfLogReg:
    """A TF-IDF vectoriser and a logistic regression over it (see the module docstring for the features).

    Attributes:
        ngram_max: longest word n-gram used as a feature (1: words only).
        min_df: a feature must occur in at least this many training texts.
        C: inverse L2 regularisation strength of the logistic regression.
        max_iter: L-BFGS iterations at most.
    """

    ngram_max: int = 2
    min_df: int = 2
    C: float = 10.0
    max_iter: int = 1000
    _vectorizer: Any = field(default=None, init=False, repr=False)
    _model: Any = field(default=None, init=False, repr=False)

    def fit(self, texts: Sequence[str], labels: Sequence[int]) -> TfidfLogReg:
        """Learn the vocabulary, IDF weights and the regression from the training texts and their class ids."""
        if len(texts) != len(labels) or not texts:
            raise ValueError(f"the baseline needs as many labels as texts, and at least one ({len(texts)} texts, "
                             f"{len(labels)} labels)")
        if len(set(labels)) < 2:
            raise ValueError("the baseline needs training texts of at least 2 classes")
        vectorizer_cls, regression_cls = _sklearn()
        min_df = self.min_df if len(texts) >= self.min_df else 1
        self._vectorizer = vectorizer_cls(lowercase=True, ngram_range=(1, self.ngram_max), min_df=min_df,
                                          sublinear_tf=True)
        features = self._vectorizer.fit_transform(texts)  # (N, V) sparse
        self._model = regression_cls(C=self.C, max_iter=self.max_iter).fit(features, list(labels))
        return self

    def predict(self, texts: Sequence[str]) -> list[int]:
        """The class id of each text."""
        if self._model is None:
            raise RuntimeError("TfidfLogReg.predict before fit")
        if not texts:
            return []
        return [int(c) for c in self._model.predict(self._vectorizer.transform(texts))]
