"""The lead baseline of summarization: a document's first sentence, cut to a fixed number of words.

    words = median_words(train_summaries)          # 7 for the Debian synopses
    summary = lead(document, words)

The first sentence ends at the first ``.``, ``!`` or ``?`` followed by whitespace, within the first
paragraph (paragraphs are separated by ``PARAGRAPH``, the Debian descriptions' `` <p> `` marker).
Its ROUGE on the Debian test split is in docs/benchmarks.md (``bench/lead_baseline.py``).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

BASELINE_NAME = "lead"
PARAGRAPH = " <p> "  # the paragraph marker of seqmap.data.debian
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def first_sentence(document: str) -> str:
    """The first sentence of the first paragraph (the whole paragraph if it has no sentence end)."""
    paragraph = document.split(PARAGRAPH, 1)[0]
    return _SENTENCE_END.split(paragraph.strip(), maxsplit=1)[0]


def lead(document: str, words: int) -> str:
    """The first sentence of ``document``, cut to its first ``words`` whitespace words."""
    if words <= 0:
        raise ValueError(f"the lead baseline keeps words > 0 words, got {words}")
    return " ".join(first_sentence(document).split()[:words])


def median_words(summaries: Sequence[str]) -> int:
    """The median whitespace word count of the (training) summaries, rounded: the lead's length."""
    counts = [len(s.split()) for s in summaries if s.strip()]
    if not counts:
        raise ValueError("no non-empty summaries to take the median length of")
    return max(1, round(statistics.median(counts)))
