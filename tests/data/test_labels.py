"""LabelSet: classes from the training labels, a catch-all class, clear errors, saved and loaded."""

import pytest

from seqmap.data.corpus import DataError
from seqmap.data.labels import LabelSet

TRAIN = ["net", "libs", "libs", "doc", "net", "libs", "games", "doc", "libs"]  # libs 4, doc 2, net 2, games 1


def test_every_training_label_is_a_class_in_sorted_order():
    labels = LabelSet.from_training(TRAIN)
    assert labels.names == ("doc", "games", "libs", "net") and labels.other is None and len(labels) == 4
    assert [labels.encode(x) for x in ("doc", "net")] == [0, 3] and labels.decode(2) == "libs"


def test_an_unseen_label_is_an_error_naming_it_and_where():
    with pytest.raises(DataError, match=r"data\.test line 7: label 'web' is not one of the 4 classes seen in "
                                         r"training \(doc, games, libs, net\)"):
        LabelSet.from_training(TRAIN).encode("web", where="data.test line 7")


def test_max_classes_keeps_the_most_frequent_and_merges_the_rest_into_other():
    labels = LabelSet.from_training(TRAIN, max_classes=3)
    assert labels.names == ("libs", "doc", "other")  # libs 4, then doc and net tie at 2: by name, doc
    assert labels.merged == ("games", "net")
    assert [labels.encode(x) for x in ("libs", "doc", "net", "games", "never-seen")] == [0, 1, 2, 2, 2]


def test_counts_choose_the_same_classes_as_the_labels_they_count():
    counts = {"net": 2, "libs": 4, "doc": 2, "games": 1}  # a prepared corpus keeps each label's count
    for k in (None, 2, 3):
        assert LabelSet.from_training(counts, k) == LabelSet.from_training(TRAIN, k)
    with pytest.raises(DataError, match=r"^2 training example\(s\) have an empty label"):
        LabelSet.from_training({**counts, "": 2})


def test_max_classes_larger_than_the_labels_changes_nothing():
    assert LabelSet.from_training(TRAIN, max_classes=10) == LabelSet.from_training(TRAIN)


@pytest.mark.parametrize("labels, kwargs, message", [
    (["a", "a"], {}, "at least 2 classes; the training labels give 1 .a."),
    (["a", "", "b"], {}, "1 training example.s. have an empty label"),
    (TRAIN, {"max_classes": 1}, "data.max_classes must be at least 2"),
    (["other"] * 3 + ["a", "b"], {"max_classes": 2}, "already hold a frequent class named 'other'"),
])
def test_bad_training_labels_say_what_to_change(labels, kwargs, message):
    with pytest.raises(DataError, match=message):
        LabelSet.from_training(labels, **kwargs)


def test_saved_and_loaded_unchanged(tmp_path):
    labels = LabelSet.from_training(TRAIN, max_classes=3)
    labels.save(tmp_path / "labels.json")
    assert LabelSet.load(tmp_path / "labels.json") == labels


def test_a_missing_or_broken_class_list_says_so(tmp_path):
    with pytest.raises(DataError, match="the run's class list is missing"):
        LabelSet.load(tmp_path / "labels.json")
    (tmp_path / "labels.json").write_text("{not json")
    with pytest.raises(DataError, match="not a seqmap class list"):
        LabelSet.load(tmp_path / "labels.json")
