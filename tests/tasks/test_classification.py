"""A classifier's training rows as a prepared corpus (``seqmap.tasks.classification``): the batches, rows, counts
and classes equal what the list-based reading gave; the store is reused by a later run on the same file and
tokenizer and made again when the file changes; the TF-IDF baseline reads its training texts back from the file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seqmap.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from seqmap.data.batching import collate_labels
from seqmap.data.corpus import DataError, filter_pairs, read_tsv
from seqmap.data.labels import LabelSet
from seqmap.data.pipeline import normalizer_for
from seqmap.data.samplers import token_budget_batches
from seqmap.tasks.base import TrainingContext
from seqmap.tasks.classification import (
    TASK,
    LabelRows,
    _baseline_rows,
    classification_train_rows,
    load_classification,
)

WORDS = "The a dog cat sat ran on in mat hat big small red blue".split()
LABELS = ["pos", "neg", "meh", "rare"]


def corpus(path, n=200, seed=0):
    """text<TAB>label lines: a few empty texts, a few long ones, labels of unequal frequency (some padded)."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS, int(rng.integers(1, 30 if i % 17 == 5 else 9))))
        label = LABELS[(0, 0, 0, 1, 1, 2, 3)[int(rng.integers(0, 7))]] if i != 150 else "solo"
        lines.append(f"{'  ' if i % 23 == 4 else text}\t{' ' + label if i % 11 == 2 else label}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def data_cfg(tmp_path, **over) -> DataConfig:
    train = tmp_path / "train.tsv"
    if not train.exists():
        corpus(train)
        corpus(tmp_path / "valid.tsv", n=30, seed=1)
    options = {"task": "classification", "train": str(train), "valid": str(tmp_path / "valid.tsv"),
               "tokenizer": "word", "vocab_size": 40, "max_len": 12, "lowercase": True,
               "prepared_dir": str(tmp_path / "prepared")}
    return DataConfig(**{**options, **over})


def loaded(cfg, run_dir):
    log = []
    data = load_classification(cfg, run_dir, log.append)
    return data, "\n".join(log)


def list_based_rows(cfg: DataConfig, tok, labels: LabelSet) -> list[tuple[list[int], int]]:
    """The training rows as the list-based reading kept them: normalized, empty ones dropped, truncated."""
    norm = normalizer_for(cfg)
    rows = [(norm(t), label.strip()) for t, label in read_tsv(cfg.train, "data.train")]
    if cfg.valid_size:
        rows = rows[:-cfg.valid_size]
    kept, _ = filter_pairs(rows)
    return [(tok.encode(t)[:cfg.max_len], labels.encode(label)) for t, label in kept]


def rows(data) -> list[tuple[list[int], int]]:
    return [(ids.tolist(), c) for ids, c in data.train]


@pytest.mark.parametrize("seed, held_out", [(0, False), (7, True)])
def test_the_batch_stream_equals_the_list_based_planning(tmp_path, seed, held_out):
    cfg = data_cfg(tmp_path, **({"valid": None, "valid_size": 25} if held_out else {}))
    data, _ = loaded(cfg, tmp_path / "run")
    train = list_based_rows(cfg, data.tok, data.labels)
    assert rows(data) == train
    run = RunConfig(model=ModelConfig(family="classifier"), data=cfg, train=TrainConfig(max_tokens=48, seed=seed))

    def epoch_batches(batches_of_epoch, make_batch):
        for epoch in range(3):
            for index, indices in enumerate(batches_of_epoch(epoch)):
                yield make_batch(indices, epoch, index)

    new = list(TASK.batches(TrainingContext(run, data, None, None, {}, None, epoch_batches)))
    old = [collate_labels([train[i] for i in indices]) for epoch in range(3) for indices in token_budget_batches(
        [len(ids) + 1 for ids, _ in train], [1] * len(train), 48, shuffle=True, seed=seed, epoch=epoch)]
    assert len(new) == len(old) > 3 * 5
    for a, b in zip(new, old, strict=True):
        assert torch.equal(a.src, b.src) and torch.equal(a.src_mask, b.src_mask) and torch.equal(a.labels, b.labels)


def test_counts_classes_and_log_lines_equal_the_text_readers(tmp_path):
    cfg = data_cfg(tmp_path, max_classes=3)
    data, log = loaded(cfg, tmp_path / "run")
    assert isinstance(data.train, LabelRows) and not data.train.label.flags.writeable  # a read-only memory map
    labels = [label.strip() for _, label in read_tsv(cfg.train)]  # the empty texts' labels are counted too
    assert data.labels == LabelSet.from_training(labels, 3) and data.labels.merged == ("meh", "rare", "solo")
    norm = normalizer_for(cfg)
    kept, report = filter_pairs([(norm(t), label.strip()) for t, label in read_tsv(cfg.train)])
    assert data.reports["train"] == report and report.empty == 9  # the same counts and the same first positions
    long = sum(len(data.tok.encode(t)) > 12 for t, _ in kept)
    assert long and f"{report.summary('train')}; {long} longer than data.max_len=12 tokens, truncated" in log
    assert data.train.lengths().tolist() == [min(len(data.tok.encode(t)), 12) for t, _ in kept]
    assert classification_train_rows(cfg) == kept  # what the TF-IDF baseline is fitted on, read from the file


def test_a_second_run_reuses_the_prepared_rows_and_a_changed_file_prepares_again(tmp_path):
    cfg = data_cfg(tmp_path)
    first, log = loaded(cfg, tmp_path / "a")
    assert "rows encoded with" in log
    second, log = loaded(cfg, tmp_path / "b")
    assert "read from memory-mapped files" in log and "encoded with" not in log
    assert second.tok.fingerprint() == first.tok.fingerprint() and second.labels == first.labels
    assert (tmp_path / "b" / "tokenizer" / "labels.json").read_text() == \
        (tmp_path / "a" / "tokenizer" / "labels.json").read_text()
    assert rows(second) == rows(first)
    resumed, log = loaded(cfg, tmp_path / "a")  # RUN_DIR/tokenizer exists: the same store, found by fingerprint
    assert "read from memory-mapped files" in log and rows(resumed) == rows(first)
    assert len(list((tmp_path / "prepared").iterdir())) == 1
    train = tmp_path / "train.tsv"
    text = train.read_text()
    train.write_text(text.replace("\tneg\n", "\tpos\n", 1))  # the same size, another label
    changed, log = loaded(cfg, tmp_path / "c")
    assert f"{train.resolve()} changed since; preparing it again" in log and "encoded with" in log
    assert [c for _, c in rows(changed)] != [c for _, c in rows(first)]
    assert rows(changed) == list_based_rows(cfg, changed.tok, changed.labels)
    train.write_text(text + "big dog\tpos\n")  # another size: another key
    _, log = loaded(cfg, tmp_path / "d")
    assert "encoded with" in log


def small(tmp_path, lines: list[str], **over) -> DataConfig:
    corpus(tmp_path / "valid.tsv", n=30, seed=1)
    (tmp_path / "train.tsv").write_text("".join(line + "\n" for line in lines))
    return data_cfg(tmp_path, **over)


def test_the_labels_of_rows_dropped_as_empty_count_toward_the_classes_as_before(tmp_path):
    cfg = small(tmp_path, ["a\tx", "b\ty", " \ty", "c\tz"], max_classes=2)  # y: twice, once beside no text
    data, log = loaded(cfg, tmp_path / "run")
    assert data.labels.names == ("y", "other")
    assert rows(data) == [(data.tok.encode(t), c) for t, c in (("a", 1), ("b", 0), ("c", 1))]
    assert "train: kept 3 of 4 pairs; dropped 1 empty (lines 3); 0 longer than data.max_len=12 tokens" in log


def test_a_training_label_outside_the_runs_classes_names_the_first_kept_one(tmp_path):
    cfg = small(tmp_path, ["a\tpos", "\trare", "b\tmeh", "c\trare"])
    (tmp_path / "run" / "tokenizer").mkdir(parents=True)
    LabelSet(("pos", "neg")).save(tmp_path / "run" / "tokenizer" / "labels.json")  # a run's classes, kept
    with pytest.raises(DataError, match=r"^data.train: label 'meh' is not one of the 2 classes seen in training"):
        loaded(cfg, tmp_path / "run")


def test_an_empty_training_label_is_refused_as_before(tmp_path):
    with pytest.raises(DataError, match=r"1 training example\(s\) have an empty label"):
        loaded(small(tmp_path, ["a dog\tpos", "", "the cat\tneg"]), tmp_path / "run")


def test_the_baseline_refuses_a_training_file_changed_since_the_run_read_it(tmp_path):
    cfg = data_cfg(tmp_path)
    data, _ = loaded(cfg, tmp_path / "run")
    assert _baseline_rows(cfg, len(data.train)) == classification_train_rows(cfg)
    with open(cfg.train, "a") as f:
        f.write("big dog\tpos\n")
    with pytest.raises(DataError, match=rf"data.train \({cfg.train}\) changed since the run read it \("
                                        rf"{len(data.train) + 1} training rows now, {len(data.train)} then\)"):
        _baseline_rows(cfg, len(data.train))
