"""How beam search ranks: the two ranking schemes behind ``decode.beam_ranking``, one interface.

A scheme says how a finished hypothesis is scored (its score over a length norm), which beams finish
when a sentence reaches its maximum length, when a sentence stops searching, and how banned ids are
masked; ``seqmap.decoding.beam.beam_search`` asks it and never which scheme it is.

``gnmt`` (seqmap's): the normalized score is ``score / lp(length)`` with ``lp = ((5 + length) / 6) ** alpha``
(Wu et al. 2016), ``length`` counting the generated tokens, EOS included; alpha = 0 ranks by score. Banned
ids get -inf before the softmax. A sentence stops as soon as one holds:

1. it has ``beam_size`` finished hypotheses (the usual rule of NMT toolkits);
2. it has ``n_best`` finished hypotheses and no live beam can still beat the ``n_best``-th of them: scores
   only fall as tokens are added, so a live beam's best possible normalized score is bounded by its score
   over the largest length penalty it can still reach. This changes nothing in the result of rule 1; it
   only saves steps;
3. it reached its maximum length: its live beams are finished as they are, without EOS.

``hf`` reproduces ``transformers``' ``generate(num_beams=k)`` (``decode.beam_ranking: hf``):

* the normalized score is ``score / length ** alpha``;
* banned ids are masked after the softmax (the model's own tokens keep their probability mass), and only
  the ``absent`` ids (seqmap's reserved ids the original model has no token for) are left out of it;
* at the maximum length, the candidates among the k best of the step finish (EOS or not), not the k live
  beams chosen from all 2k;
* the stopping rule is its ``early_stopping``: ``True`` is rule 1; ``False`` stops a sentence with k
  finished hypotheses once the best live beam's score over its current length ** alpha cannot beat the
  k-th of them; ``"never"`` does the same with the maximum length when alpha > 0 (rule 3 as above).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from seqmap.decoding.steps import check_banned, next_log_probs


def gnmt_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + length) / 6) ** alpha; 1 when alpha = 0."""
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class Hypothesis:
    """One finished hypothesis of one sentence.

    Attributes:
        tokens: generated ids (no BOS, no prompt), ending in EOS unless the
            sentence reached its maximum length.
        score: sum of the log-probabilities of ``tokens`` (None from greedy decoding asked for no
            scores, ``seqmap.decoding.text.decode_batch``).
        normalized: ``score`` over the ranking's length norm (``Ranking.norm``), what the search ranks by
            (None with score).
        attention: (L, H, T, S) attention of the query that produced each token, when asked for.
    """

    tokens: list[int]
    score: float | None
    normalized: float | None
    attention: Tensor | None = None


class Ranking(ABC):
    """A ranking scheme of beam search for one search: ``alpha`` the length penalty, k = ``beam_size``."""

    def __init__(self, alpha: float, beam_size: int) -> None:
        self.alpha, self.beam_size = alpha, beam_size

    @classmethod
    @abstractmethod
    def for_search(cls, alpha: float, beam_size: int, n_best: int, early_stopping: bool | str,
                   absent: Sequence[int]) -> Ranking:
        """The scheme for a search of ``beam_search``'s options (each scheme reads those it has)."""

    @staticmethod
    @abstractmethod
    def length_norm(length: int, alpha: float) -> float:
        """What the score of a hypothesis of ``length`` tokens is divided by."""

    def norm(self, length: int) -> float:
        return self.length_norm(length, self.alpha)

    def hypothesis(self, tokens: list[int], score: float, attention: Tensor | None) -> Hypothesis:
        """A finished hypothesis, its normalized score given."""
        return Hypothesis(tokens, score, score / self.norm(len(tokens)), attention)

    @abstractmethod
    def check(self, vocab: int) -> None:
        """Once per search, when the first logits give the vocabulary size: the scheme's own ids are valid."""

    @abstractmethod
    def log_probs(self, logits: Tensor, banned: Sequence[int]) -> Tensor:
        """(B, t, V) logits of a decode step -> (B, V) next-token log-probabilities, -inf at ``banned``."""

    @abstractmethod
    def candidates_end(self, at_limit: Tensor) -> Tensor | None:
        """Of the sentences ``at_limit`` (G,) that reach their maximum length with this step's token, those whose
        k best candidates finish whatever their last token (None: none)."""

    @abstractmethod
    def live_end(self, at_limit: Tensor) -> Tensor:
        """(G,) the sentences whose live beams finish as they are, without EOS, once this step has advanced them."""

    @abstractmethod
    def stops(self, finished: Sequence[Hypothesis], best_live: float, length: int, limit: int) -> bool:
        """Whether a sentence stops searching: ``finished`` its finished hypotheses, ``best_live`` its best live
        beam's score (-inf: none left), ``length`` the tokens its live beams hold, ``limit`` its maximum length."""


class GnmtRanking(Ranking):
    """seqmap's ranking: the GNMT length penalty and stopping rules 1 to 3 (module docstring)."""

    def __init__(self, alpha: float, beam_size: int, n_best: int) -> None:
        super().__init__(alpha, beam_size)
        self.n_best = n_best

    @classmethod
    def for_search(cls, alpha, beam_size, n_best, early_stopping, absent) -> GnmtRanking:
        return cls(alpha, beam_size, n_best)

    @staticmethod
    def length_norm(length: int, alpha: float) -> float:
        return gnmt_penalty(length, alpha)

    def check(self, vocab: int) -> None:
        pass  # no ids of its own

    def log_probs(self, logits: Tensor, banned: Sequence[int]) -> Tensor:
        return next_log_probs(logits, banned)

    def candidates_end(self, at_limit: Tensor) -> Tensor | None:
        return None

    def live_end(self, at_limit: Tensor) -> Tensor:
        return at_limit

    def stops(self, finished: Sequence[Hypothesis], best_live: float, length: int, limit: int) -> bool:
        if len(finished) >= self.beam_size or best_live == float("-inf"):
            return True
        if len(finished) >= self.n_best:
            reachable = limit if self.alpha >= 0 else length + 1
            nth = sorted((h.normalized for h in finished), reverse=True)[self.n_best - 1]
            return best_live / self.norm(reachable) <= nth
        return False


class HfRanking(Ranking):
    """``transformers``' ranking: ``length ** alpha``, its ``early_stopping`` and its masking (module docstring)."""

    def __init__(self, alpha: float, beam_size: int, early_stopping: bool | str, absent: Sequence[int]) -> None:
        super().__init__(alpha, beam_size)
        self.early_stopping, self.absent = early_stopping, absent

    @classmethod
    def for_search(cls, alpha, beam_size, n_best, early_stopping, absent) -> HfRanking:
        return cls(alpha, beam_size, early_stopping, absent)

    @staticmethod
    def length_norm(length: int, alpha: float) -> float:
        return float(max(length, 1)) ** alpha

    def check(self, vocab: int) -> None:
        check_banned(self.absent, vocab, "absent")

    def log_probs(self, logits: Tensor, banned: Sequence[int]) -> Tensor:
        return next_log_probs(logits, banned, self.absent)

    def candidates_end(self, at_limit: Tensor) -> Tensor | None:
        return at_limit

    def live_end(self, at_limit: Tensor) -> Tensor:
        return torch.zeros_like(at_limit)

    def stops(self, finished: Sequence[Hypothesis], best_live: float, length: int, limit: int) -> bool:
        if best_live == float("-inf"):
            return True
        if len(finished) < self.beam_size:
            return False
        if self.early_stopping is True:
            return True
        reachable = limit if self.early_stopping == "never" and self.alpha > 0 else length
        worst = sorted((h.normalized for h in finished), reverse=True)[self.beam_size - 1]
        return best_live / self.norm(reachable) <= worst


RANKINGS: dict[str, type[Ranking]] = {"gnmt": GnmtRanking, "hf": HfRanking}


def length_norm(length: int, alpha: float, ranking: str = "gnmt") -> float:
    """What a hypothesis's score is divided by under ``ranking`` (``decode.beam_ranking``)."""
    return RANKINGS[ranking].length_norm(length, alpha)


def make_ranking(ranking: str, alpha: float, beam_size: int, n_best: int, early_stopping: bool | str,
                 absent: Sequence[int]) -> Ranking:
    """The scheme named ``ranking`` (gnmt or hf) for one search; a ValueError naming a bad option."""
    if ranking not in RANKINGS:
        raise ValueError(f"ranking must be gnmt or hf, got {ranking!r}")
    if early_stopping not in (True, False, "never"):
        raise ValueError(f"early_stopping must be True, False or 'never' (transformers'), got {early_stopping!r}")
    return RANKINGS[ranking].for_search(alpha, beam_size, n_best, early_stopping, absent)
