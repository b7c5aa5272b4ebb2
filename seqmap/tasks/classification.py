"""Text classification: one label per text, read from TSV rows (``data.src_column`` text, ``data.tgt_column``
label); a text is read as its first ``data.max_len`` tokens, after a CLS vector.

The training rows are a prepared corpus (``seqmap.data.prepare``): each text's token ids and each row's label in
memory-mapped columns, read a batch at a time, batches planned from the lengths array; the validation and test
rows are few and stay in memory as text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from seqmap.config import DataConfig
from seqmap.data.batching import collate_labels
from seqmap.data.corpus import DataError, FilterReport, cached_encode, filter_pairs, iter_parallel, iter_tsv
from seqmap.data.labels import LabelSet
from seqmap.data.pipeline import (
    Pairs,
    classification_ids,
    file_pairs,
    fit_tokenizers,
    held_out_count,
    holds_out,
    log_held_out,
    normalizer_for,
    record_fit,
    run_labels,
    split_files,
    tokenizer_key,
    train_source,
    valid_name,
)
from seqmap.data.prepare import HeldOut, Source, encode_blank_empty, prepare
from seqmap.data.token_store import TokenStore
from seqmap.data.tokenizers import PAD, Tokenizer
from seqmap.evaluation import baseline_scores, comparison_table
from seqmap.models.tfidf import MissingBaselineDependency
from seqmap.tasks.base import Task, token_batches
from seqmap.training.validate import classification_metrics, evaluating, log_label_scores

CHUNK = 1 << 20  # label indices looked at per numpy call when the classes are checked


class LabelRows:
    """The kept training rows of a prepared store, by position: ``rows[k]`` is (token ids, an int64 array cut to
    ``data.max_len``; class id), the ids read from the memory map when asked for."""

    def __init__(self, store: TokenStore, kept: np.ndarray, classes: np.ndarray, max_len: int):
        self.text, self.kept, self.max_len = store.columns["text"], kept, max_len
        self.label = store.columns["label"].stream()  # a kept row's label index, in row order (memory-mapped)
        self.classes = classes  # label index -> class id
        assert len(self.label) == len(kept), "a kept row has exactly one label index"

    def __len__(self) -> int:
        return len(self.kept)

    def __getitem__(self, k: int) -> tuple[np.ndarray, int]:
        return self.text.row(int(self.kept[k]))[:self.max_len], int(self.classes[self.label[k]])

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def lengths(self) -> np.ndarray:
        """(rows,) int32: each kept text's token count as read, at most ``data.max_len``."""
        return np.minimum(self.text.lengths()[self.kept].astype(np.int32), self.max_len)


@dataclass
class ClassificationData:
    tok: Tokenizer  # the input tokenizer (``tokenizer/``), with the classes beside it (``tokenizer/labels.json``)
    labels: LabelSet
    train: LabelRows  # the kept training rows, read from the prepared corpus's memory map
    valid: list[tuple[list[int], int]]
    valid_text: Pairs  # the kept validation (text, label) pairs
    test_text: Pairs  # every test (text, label) row: none is dropped, long ones are truncated when encoded
    reports: dict[str, FilterReport] = field(default_factory=dict)


def _normalized(cfg: DataConfig, rows: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """(text, label) rows as a classifier reads them: texts normalized like translation sources, labels stripped."""
    norm = normalizer_for(cfg)
    return ((norm(t), label.strip()) for t, label in rows)


def read_classification_texts(cfg: DataConfig) -> dict[str, Pairs]:
    """The train/valid/test (text, label) rows of the config's TSV files (test may be empty), texts normalized."""
    return {k: list(_normalized(cfg, v)) for k, v in file_pairs(cfg, "rows").items()}


def _split_rows(cfg: DataConfig, split: str) -> Pairs:
    """One split's (text, label) rows from its own files, as ``read_classification_texts`` reads them."""
    return list(_normalized(cfg, split_files(cfg, split, "rows")))


def _train_stream(cfg: DataConfig) -> Iterator[tuple[str, str]]:
    """The training files' (text, label) rows one at a time, read as ``read_classification_texts`` reads them
    (nothing held out)."""
    if cfg.train is None and cfg.train_src is None:
        split_files(cfg, "train", "rows")  # raises: no training data
    rows = (iter_tsv(cfg.train, "data.train", cfg.src_column, cfg.tgt_column) if cfg.train else
            iter_parallel(cfg.train_src, cfg.train_tgt, "data.train_src", "data.train_tgt"))
    return _normalized(cfg, rows)


def _check_total(cfg: DataConfig) -> Callable[[int], int]:
    return lambda total: held_out_count(total, cfg, "rows", train_source(cfg))


def classification_train_rows(cfg: DataConfig) -> Pairs:
    """The training (text, label) rows a classifier run learns from: the TSV's rows, empty ones dropped.

    ``load_classification`` keeps exactly these; the TF-IDF baseline is fitted on them at the end of training
    and by ``seqmap evaluate``, read from the file then (a run does not hold its training texts).
    """
    rows = _train_stream(cfg)
    if holds_out(cfg):
        rows = HeldOut(rows, cfg.valid_size, _check_total(cfg))
    return filter_pairs(rows)[0]


def _baseline_rows(cfg: DataConfig, kept: int) -> Pairs:
    """The training rows again, for the TF-IDF baseline; a DataError when the files no longer give the ``kept``
    rows the run trained on."""
    rows = classification_train_rows(cfg)
    if len(rows) != kept:
        raise DataError(f"{train_source(cfg)} changed since the run read it ({len(rows)} training rows now, {kept} "
                        f"then); restore it and score the run with seqmap evaluate RUN_DIR --data TEST_FILE")
    return rows


class _LabelIndex:
    """The ``label`` column of a classifier's store, written as the rows stream by: a row's label as an index into
    the labels in the order first seen; no index (an empty row) for a row dropped as empty (a blank text or
    label). Every row's label is counted (the classes are chosen from the counts), the dropped rows' too."""

    def __init__(self):
        self.index: dict[str, int] = {}
        self.counts: list[int] = []

    def rows(self, _tok, examples: list[tuple[str, str]], _threads: int) -> list[list[int]]:
        out = []
        for text, label in examples:
            i = self.index.setdefault(label, len(self.index))
            if i == len(self.counts):
                self.counts.append(0)
            self.counts[i] += 1
            out.append([i] if text.strip() and label.strip() else [])  # as filter_pairs drops empty rows
        return out

    def meta(self) -> dict:
        return {"labels": [[name, count] for name, count in zip(self.index, self.counts, strict=True)]}


def _class_table(label: np.ndarray, names: list[str], labels: LabelSet) -> np.ndarray:
    """label index -> class id, for the labels of the kept rows, encoded in the order they first occur there (a
    label outside the classes is an error naming the first such row's label, as when rows are encoded in turn)."""
    first: dict[int, int] = {}
    for start in range(0, len(label), CHUNK):
        found, at = np.unique(np.asarray(label[start:start + CHUNK]), return_index=True)
        for i, a in zip(found.tolist(), at.tolist(), strict=True):
            first.setdefault(i, start + a)
    table = np.zeros(len(names), dtype=np.int64)
    for i in sorted(first, key=first.__getitem__):
        table[i] = labels.encode(names[i], where="data.train")
    return table


def load_classification(cfg: DataConfig, run_dir: Path, log: Callable[[str], None] = print) -> ClassificationData:
    """(text, label) rows from TSV files (``data.src_column`` text, ``data.tgt_column`` label) as ids and class ids.

    The training rows are a prepared corpus (``seqmap.data.prepare``: found or made), filtered on its lengths;
    the validation rows are encoded and filtered as text; the test rows are kept as text. Texts are normalized
    like translation sources (labels are not). Rows with an empty text or label are dropped and counted; texts
    longer than ``data.max_len`` tokens are truncated to their first ``data.max_len`` tokens
    (``classification_ids``) and counted, not dropped, in every split.
    """
    valid_size = cfg.valid_size if holds_out(cfg) else 0
    options = {"task": "classification", "tokenizer": tokenizer_key(cfg), "columns": [cfg.src_column, cfg.tgt_column],
               "valid_size": valid_size}
    source = Source(lambda: _train_stream(cfg), [Path(p) for p in (cfg.train, cfg.train_src, cfg.train_tgt) if p],
                    options)
    index = _LabelIndex()
    prepared = prepare(cfg, source, run_dir, "classification",
                       {"text": (0, 0, encode_blank_empty), "label": (None, None, index.rows)},
                       lambda texts, _labels: fit_tokenizers(cfg, texts, texts, run_dir, log), log,
                       valid_size=valid_size, noun="rows", check_total=_check_total(cfg),
                       record=lambda: record_fit(cfg, run_dir), extra=index.meta)
    tok, store = prepared.src_tok, prepared.store
    log_held_out(cfg, store.rows, "rows", log)
    counts = dict(store.meta["labels"])
    labels = run_labels(counts, cfg, run_dir, log)

    empty = store.columns["label"].lengths() == 0
    kept = np.flatnonzero(~empty).astype(np.int32 if len(empty) < 2**31 else np.int64)
    report = FilterReport(total=len(empty), kept=len(kept), empty=int(empty.sum()),
                          empty_lines=(np.flatnonzero(empty)[:FilterReport.SHOWN] + 1).tolist())
    label = store.columns["label"].stream()
    train = LabelRows(store, kept, _class_table(label, list(counts), labels), cfg.max_len)
    long = int((store.columns["text"].lengths()[kept] > cfg.max_len).sum())
    log(report.summary("train") + f"; {long} longer than data.max_len={cfg.max_len} tokens, truncated")
    reports = {"train": report}

    texts = prepared.held_out if valid_size else _split_rows(cfg, "valid")
    ids_of = dict(zip((t for t, _ in texts), cached_encode([t for t, _ in texts], tok, run_dir / "cache",
                                                           name="valid-text")))
    valid_text, reports["valid"] = filter_pairs(texts)
    valid = [(ids_of[t][:cfg.max_len], labels.encode(label, where=valid_name(cfg))) for t, label in valid_text]
    long = sum(len(ids_of[t]) > cfg.max_len for t, _ in valid_text)
    log(reports["valid"].summary("valid") + f"; {long} longer than data.max_len={cfg.max_len} tokens, truncated")
    if not len(train):
        raise DataError("no training rows left after dropping empty ones; check the data files")
    if not valid:
        raise DataError(f"no validation rows left after dropping empty ones; check {valid_name(cfg)}")
    return ClassificationData(tok, labels, train, valid, valid_text, _split_rows(cfg, "test"), reports)


class ClassificationTask(Task):
    name = "classification"

    def load(self, cfg, run_dir, log=print):
        return load_classification(cfg, run_dir, log)

    def model_fields(self, data: ClassificationData) -> dict:
        return dict(src_vocab=data.tok.vocab_size, tgt_vocab=data.tok.vocab_size, pad_id=PAD,
                    n_classes=len(data.labels))

    def batches(self, ctx):
        """(token ids, class id) rows, planned from the lengths array (a row's length counts the CLS vector) and
        read from the memory map per batch."""
        train = ctx.data.train
        return token_batches(ctx, train.lengths() + 1, np.ones(len(train), dtype=np.int32), collate_labels)

    def validate(self, model, data: ClassificationData, cfg, device, log):
        """loss, accuracy and macro-F1 of the validation rows."""
        with evaluating(model):
            out = classification_metrics(model, data.valid, len(data.labels), cfg.train.max_tokens, device)
            log_label_scores(out, log)
        return out

    def test(self, trainer):
        """Loss, accuracy and macro-F1 of the best checkpoint on every test row, beside the TF-IDF baseline's.

        The baseline (``result["baseline"]``, and a ``test_baseline`` event in metrics.jsonl) is fitted on
        the training rows the model learnt from, read again from the training file, and scored on the same test
        rows; without scikit-learn (or when the training file changed since), the log says so and the model's
        scores stand alone.
        """
        cfg, data, log = trainer.cfg, trainer.data, trainer.log
        if not data.test_text:
            return None
        best = trainer.load_best()
        rows = [(classification_ids(data.tok, text, cfg.data.max_len), data.labels.encode(label, where="data.test"))
                for text, label in data.test_text]
        result = classification_metrics(trainer.model.eval(), rows, len(data.labels), cfg.train.max_tokens,
                                        trainer.device)
        step = trainer.state["step"]
        log.metrics("test", step, **result)
        log.info(f"test ({len(rows)} texts, {best.name}): accuracy {result['accuracy']:.2f} macro-F1 "
                 f"{result['macro_f1']:.2f} loss {result['loss']:.4f}")
        try:
            train = _baseline_rows(cfg.data, len(data.train))
        except DataError as e:
            log.info(f"no baseline: {e}")
            return result
        log.info(f"fitting the TF-IDF baseline on the same {len(train)} training texts, for comparison "
                 f"(minutes on tens of thousands of texts; the model's scores above are final)")
        started = time.perf_counter()
        try:
            baseline = baseline_scores(train, data.test_text, data.labels)
        except MissingBaselineDependency as e:
            log.info(f"no baseline: {e}")
            return result
        log.info(f"baseline fitted and scored in {time.perf_counter() - started:.0f} s")
        log.metrics("test_baseline", step, **baseline)
        log.info(f"test, the same {len(rows)} texts:\n" + "\n".join(comparison_table(result, baseline)))
        return {**result, "baseline": baseline}


TASK = ClassificationTask()
