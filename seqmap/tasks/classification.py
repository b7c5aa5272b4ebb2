"""Text classification: one label per text, read from TSV rows (``data.src_column`` text, ``data.tgt_column``
label); a text is read as its first ``data.max_len`` tokens, after a CLS vector."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from seqmap.config import DataConfig
from seqmap.data.batching import collate_labels
from seqmap.data.corpus import DataError, FilterReport, cached_encode, filter_pairs
from seqmap.data.labels import LabelSet
from seqmap.data.pipeline import (
    Pairs,
    classification_ids,
    file_pairs,
    log_held_out,
    normalizer_for,
    run_labels,
    tokenizers_for,
    valid_name,
)
from seqmap.data.tokenizers import PAD, Tokenizer
from seqmap.evaluation import baseline_scores, comparison_table
from seqmap.models.tfidf import MissingBaselineDependency
from seqmap.tasks.base import Task, token_batches
from seqmap.training.validate import classification_metrics, evaluating, log_label_scores


@dataclass
class ClassificationData:
    tok: Tokenizer  # the input tokenizer (``tokenizer/``), with the classes beside it (``tokenizer/labels.json``)
    labels: LabelSet
    train: list[tuple[list[int], int]]  # (token ids, class id)
    valid: list[tuple[list[int], int]]
    valid_text: Pairs  # the kept validation (text, label) pairs
    test_text: Pairs  # every test (text, label) row: none is dropped, long ones are truncated when encoded
    reports: dict[str, FilterReport] = field(default_factory=dict)
    train_text: Pairs = field(default_factory=list)  # the kept training (text, label) pairs, aligned with ``train``


def read_classification_texts(cfg: DataConfig) -> dict[str, Pairs]:
    """The train/valid/test (text, label) rows of the config's TSV files (test may be empty), texts normalized."""
    norm = normalizer_for(cfg)
    return {k: [(norm(t), label.strip()) for t, label in v] for k, v in file_pairs(cfg, "rows").items()}


def classification_train_rows(cfg: DataConfig) -> Pairs:
    """The training (text, label) rows a classifier run learns from: the TSV's rows, empty ones dropped.

    ``load_classification`` keeps exactly these, and ``seqmap evaluate`` refits the TF-IDF baseline on them.
    """
    return filter_pairs(read_classification_texts(cfg)["train"])[0]


def load_classification(cfg: DataConfig, run_dir: Path, log: Callable[[str], None] = print) -> ClassificationData:
    """(text, label) rows from TSV files (``data.src_column`` text, ``data.tgt_column`` label) as ids and class ids.

    Texts are normalized like translation sources (labels are not). Rows with an empty text or label
    are dropped and counted; texts longer than ``data.max_len`` tokens are truncated to their first
    ``data.max_len`` tokens (``classification_ids``) and counted, not dropped, in every split.
    """
    texts = read_classification_texts(cfg)
    log_held_out(cfg, len(texts["train"]), "rows", log)
    tok, _ = tokenizers_for(cfg, [t for t, _ in texts["train"]], [t for t, _ in texts["train"]], run_dir, log)
    labels = run_labels([label for _, label in texts["train"]], cfg, run_dir, log)
    cache, out, reports = run_dir / "cache", {}, {}
    for split in ("train", "valid"):
        ids_of = dict(zip((t for t, _ in texts[split]), cached_encode([t for t, _ in texts[split]], tok, cache,
                                                                       name=f"{split}-text")))
        kept, reports[split] = filter_pairs(texts[split])
        where = valid_name(cfg) if split == "valid" else "data.train"
        out[split] = [(ids_of[t][:cfg.max_len], labels.encode(label, where=where)) for t, label in kept]
        out[f"{split}_text"] = kept
        long = sum(len(ids_of[t]) > cfg.max_len for t, _ in kept)
        log(reports[split].summary(split) + f"; {long} longer than data.max_len={cfg.max_len} tokens, truncated")
    if not out["train"]:
        raise DataError("no training rows left after dropping empty ones; check the data files")
    if not out["valid"]:
        raise DataError(f"no validation rows left after dropping empty ones; check {valid_name(cfg)}")
    return ClassificationData(tok, labels, out["train"], out["valid"], out["valid_text"], texts["test"], reports,
                              out["train_text"])


class ClassificationTask(Task):
    name = "classification"

    def load(self, cfg, run_dir, log=print):
        return load_classification(cfg, run_dir, log)

    def model_fields(self, data: ClassificationData) -> dict:
        return dict(src_vocab=data.tok.vocab_size, tgt_vocab=data.tok.vocab_size, pad_id=PAD,
                    n_classes=len(data.labels))

    def batches(self, ctx):
        """(token ids, class id) rows; a row's length counts the CLS vector."""
        train = ctx.data.train
        return token_batches(ctx, [len(ids) + 1 for ids, _ in train], [1] * len(train), collate_labels)

    def validate(self, model, data: ClassificationData, cfg, device, log):
        """loss, accuracy and macro-F1 of the validation rows."""
        with evaluating(model):
            out = classification_metrics(model, data.valid, len(data.labels), cfg.train.max_tokens, device)
            log_label_scores(out, log)
        return out

    def test(self, trainer):
        """Loss, accuracy and macro-F1 of the best checkpoint on every test row, beside the TF-IDF baseline's.

        The baseline (``result["baseline"]``, and a ``test_baseline`` event in metrics.jsonl) is fitted on
        the training rows the model learnt from and scored on the same test rows; without scikit-learn the
        log says how to install it and the model's scores stand alone.
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
        log.info(f"fitting the TF-IDF baseline on the same {len(data.train_text)} training texts, for comparison "
                 f"(minutes on tens of thousands of texts; the model's scores above are final)")
        started = time.perf_counter()
        try:
            baseline = baseline_scores(data.train_text, data.test_text, data.labels)
        except MissingBaselineDependency as e:
            log.info(f"no baseline: {e}")
            return result
        log.info(f"baseline fitted and scored in {time.perf_counter() - started:.0f} s")
        log.metrics("test_baseline", step, **baseline)
        log.info(f"test, the same {len(rows)} texts:\n" + "\n".join(comparison_table(result, baseline)))
        return {**result, "baseline": baseline}


TASK = ClassificationTask()
