"""The lead baseline of summarization (seqmap.models.lead) on fixed strings, and the issue's test-split number."""

import csv
import gzip
from pathlib import Path

import pytest

from seqmap.evaluation import check_documents, lead_scores
from seqmap.metrics import rouge
from seqmap.models.lead import first_sentence, lead, median_words

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "debian_descriptions" / "descriptions.tsv.gz"


def test_first_sentence_stops_at_the_first_sentence_end_or_paragraph():
    assert first_sentence("GTK is a toolkit. It draws widgets.") == "GTK is a toolkit."
    assert first_sentence("Is it fast? Yes!") == "Is it fast?"
    assert first_sentence("no sentence end here <p> second paragraph. more") == "no sentence end here"
    assert first_sentence("version 1.2.3 of libfoo. Next.") == "version 1.2.3 of libfoo."  # "." inside a word


def test_lead_cuts_to_the_word_count():
    doc = "This package provides the Python 3 bindings for the GTK toolkit. It is small."
    assert lead(doc, 7) == "This package provides the Python 3 bindings"
    assert lead("Short one. Second.", 7) == "Short one."
    with pytest.raises(ValueError, match="words > 0"):
        lead(doc, 0)


def test_median_words_of_training_summaries():
    assert median_words(["a b c", "a b c d e f g", "a", ""]) == 3
    with pytest.raises(ValueError, match="no non-empty summaries"):
        median_words(["", " "])


def test_lead_scores_like_a_run_and_an_empty_document_is_one_line():
    docs = ["GTK bindings for Python. More text.", "A PNG library. <p> Details."]
    refs = ["Python bindings for GTK", "PNG library"]
    result = lead_scores(docs, refs, 7)
    assert result["hyps"] == ["GTK bindings for Python.", "A PNG library."]
    assert result["rougeL"] == pytest.approx(rouge(result["hyps"], refs)["rougeL"].value)
    with pytest.raises(ValueError, match="--src line 2 is empty: there is no document to summarize") as error:
        check_documents(["a document", "   ", "another"])
    assert "\n" not in str(error.value)


@pytest.mark.skipif(not SHARED.is_file(), reason="the shared Debian descriptions are not next to the checkout")
def test_lead_reproduces_the_issue_number_on_the_debian_test_split():
    """Issue 17: the lead (first sentence, 7 words) scores ROUGE-1/2/L 25.5 / 9.3 / 23.2 on the test split."""
    with gzip.open(SHARED, "rt", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    words = median_words([r["synopsis"] for r in rows if r["split"] == "train"])
    test = [r for r in rows if r["split"] == "test"]
    scores = rouge([lead(r["description"], words) for r in test], [r["synopsis"] for r in test])
    assert words == 7 and len(test) == 1405
    assert [round(scores[k].value, 1) for k in ("rouge1", "rouge2", "rougeL")] == [25.5, 9.3, 23.2]
