"""From a ``DataConfig`` to tokenizers and token ids, ready for batching.

    texts (bundled corpus, TSV, aligned files or plain text)
      -> tokenizer(s), trained on the training text and saved in RUN_DIR/tokenizer (the data options
         they were fitted with beside it, in RUN_DIR/tokenizer_data.yaml)
      -> token ids: the training split as a prepared corpus of memory-mapped arrays (``prepare.py``;
         RUN_DIR/prepared or data.prepared_dir, reused by later runs), the other splits cached in RUN_DIR/cache
      -> empty and over-long pairs filtered, and counted in the log

Translation training data becomes ``PairRows`` (rows read from the memory map per batch), validation
data lists of (src_ids, tgt_ids); language-model data one long stream of ids per split (memory-mapped
for training). With a character tokenizer the LM stream is the
raw text (newlines are characters, as nanoGPT trains); otherwise each line ends
with EOS (as the PTB recipes do).

Without ``data.valid``, ``data.valid_size: N`` makes the last N training examples (pairs, lines,
rows, images, recordings) the validation set, cut off as the data is read (``hold_out``), before
anything is fitted on the training data; the same config always cuts the same examples, so a
resumed run and ``seqmap evaluate`` see the split training saw.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from seqmap.config import DataConfig, save_config
from seqmap.data import datasets
from seqmap.data.audio import SPLITS, Utterances, join, read_recordings, single
from seqmap.data.corpus import (
    DataError,
    FilterReport,
    cached_encode,
    filter_pairs,
    iter_lines,
    iter_parallel,
    iter_tsv,
    read_lines,
    read_parallel,
    read_tsv,
)
from seqmap.data.graphs import GraphData, load_planetoid
from seqmap.data.images import ImageSet, pixel_stats, read_split
from seqmap.data.labels import LabelSet
from seqmap.data.lexicon import lexicon_pairs
from seqmap.data.normalize import TextNormalizer
from seqmap.data.prepare import PairRows, Source, encode_blank_empty, filter_store, has_tokenizer, prepare
from seqmap.data.tokenizers import EOS, Tokenizer, load_pair, save_pair, train_pair

Pairs = list[tuple[str, str]]
T = TypeVar("T")


@dataclass
class TranslationData:
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    train: PairRows  # the kept training pairs, read from the prepared corpus's memory map
    valid: list[tuple[list[int], list[int]]]
    valid_text: Pairs  # the kept validation pairs, as text (for BLEU and examples)
    test_text: Pairs
    reports: dict[str, FilterReport] = field(default_factory=dict)


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


@dataclass
class ImageData:
    labels: LabelSet  # saved as RUN_DIR/tokenizer/labels.json (the run's only "tokenizer")
    train: ImageSet
    valid: ImageSet
    test: ImageSet | None
    train_ids: list[int]  # class ids of the training and validation images
    valid_ids: list[int]
    mean: list[float]  # per-channel pixel mean / std of the training images (0..255)
    std: list[float]


@dataclass
class LMData:
    tok: Tokenizer
    train: np.ndarray  # the training token stream, memory-mapped (uint16 or int32)
    valid: list[int]
    test: list[int]


# -- validation held out of the training data (data.valid_size) ------------------------

def held_out_count(total: int, cfg: DataConfig, noun: str, source: str) -> int:
    """``data.valid_size``, checked against the ``total`` training examples it is taken from (one must remain)."""
    n = cfg.valid_size
    if not 0 < n < total:
        fix = f"set data.valid_size between 1 and {total - 1}" if total > 1 else f"{source} is too small to split"
        raise DataError(f"data.valid_size={n}: cannot hold out {n} of {total} {noun} from {source} for validation "
                        f"and train on the rest; {fix}, or give data.valid")
    return n


def hold_out(examples: Sequence[T], cfg: DataConfig, noun: str, source: str) -> tuple[list[T], list[T]]:
    """(all but the last ``data.valid_size`` examples, the last ones): a run's training and validation sets when
    it has no ``data.valid``. Every task splits here, in file order, before anything is fitted on training data."""
    n = held_out_count(len(examples), cfg, noun, source)
    return list(examples[:-n]), list(examples[-n:])


def holds_out(cfg: DataConfig) -> bool:
    """Whether the validation set is the end of ``data.train`` (``data.valid_size``) rather than ``data.valid``."""
    return cfg.valid_size > 0 and cfg.valid is None and cfg.valid_src is None


def valid_name(cfg: DataConfig) -> str:
    """Where the validation examples come from, as errors name it."""
    n = cfg.valid_size
    return f"data.valid_size={n} (the last {n} of data.train)" if holds_out(cfg) else "data.valid"


def _log_held_out(cfg: DataConfig, train_count: int, noun: str, log: Callable[[str], None]) -> None:
    if holds_out(cfg):
        n = cfg.valid_size
        log(f"valid: the last {n} of the {train_count + n} training {noun} of data.train, held out by "
            f"data.valid_size before anything was fitted on the training data (never trained on)")


# -- reading texts ------------------------------------------------------------------

def _bundled_pairs(cfg: DataConfig) -> dict[str, Pairs]:
    if cfg.dataset != "tatoeba-en-zh":
        raise DataError(f"data.dataset={cfg.dataset!r} is not a translation corpus that ships with seqmap; "
                        "use tatoeba-en-zh, or give data.train / data.train_src + data.train_tgt")
    splits = datasets.tatoeba_en_zh_splits()
    langs = {cfg.src_lang, cfg.tgt_lang}
    if langs not in ({"en", "zh"}, {"src", "tgt"}):
        raise DataError(f"data.dataset=tatoeba-en-zh has languages en and zh; set data.src_lang/tgt_lang to en/zh "
                        f"(got {cfg.src_lang}/{cfg.tgt_lang})")
    swap = cfg.src_lang == "zh"
    return {name: [(b, a) if swap else (a, b) for a, b in getattr(splits, name)] for name in ("train", "valid", "test")}


def normalizer_for(cfg: DataConfig) -> TextNormalizer:
    """The normalization the config asks for (lowercasing, OpenCC), applied to every split and kept by the tokenizer."""
    return TextNormalizer(lowercase=cfg.lowercase, opencc=cfg.opencc)


def read_translation_texts(cfg: DataConfig) -> dict[str, Pairs]:
    """The train/valid/test (source, target) texts named by the config (test may be empty), normalized."""
    out = _bundled_pairs(cfg) if cfg.dataset is not None else _file_pairs(cfg)
    return _normalized(cfg, out)


def read_translation_split(cfg: DataConfig, split: str) -> Pairs:
    """One split ("train", "valid" or "test") of ``read_translation_texts``, reading only that split's files (and
    ``data.train`` for a ``data.valid_size`` hold-out): ``seqmap evaluate RUN_DIR`` scores a split after
    training, when the other files may have moved."""
    if cfg.dataset is not None:
        pairs = _bundled_pairs(cfg)[split]
    elif split != "test" and holds_out(cfg):
        train, valid = hold_out(_split_files(cfg, "train", "pairs"), cfg, "pairs", _train_source(cfg))
        pairs = valid if split == "valid" else train
    else:
        pairs = _split_files(cfg, split, "pairs")
    return _normalized(cfg, {split: pairs})[split]


def _normalized(cfg: DataConfig, splits: dict[str, Pairs]) -> dict[str, Pairs]:
    norm = normalizer_for(cfg)
    if norm.identity:
        return splits
    return {k: [(norm(s), norm(t)) for s, t in v] for k, v in splits.items()}


def _train_source(cfg: DataConfig) -> str:
    return f"data.train ({cfg.train})" if cfg.train else f"data.train_src ({cfg.train_src})"


def _split_files(cfg: DataConfig, split: str, noun: str) -> Pairs:
    """The pairs of ``split``'s own files (a TSV, or two aligned files); none for an absent test split."""
    tsv, src, tgt = getattr(cfg, split), getattr(cfg, f"{split}_src"), getattr(cfg, f"{split}_tgt")
    if tsv is not None:
        return read_tsv(tsv, f"data.{split}", cfg.src_column, cfg.tgt_column)
    if src is not None:
        return read_parallel(src, tgt, f"data.{split}_src", f"data.{split}_tgt")
    if split == "test":
        return []
    hold = f", or data.valid_size to hold out the last N training {noun}" if split == "valid" else ""
    raise DataError(f"no {split} data: set data.{split} (a TSV file) or data.{split}_src and "
                    f"data.{split}_tgt (two aligned files){hold}, or data.dataset")


def _file_pairs(cfg: DataConfig, noun: str = "pairs") -> dict[str, Pairs]:
    out = {"train": _split_files(cfg, "train", noun)}
    if holds_out(cfg):
        out["train"], out["valid"] = hold_out(out["train"], cfg, noun, _train_source(cfg))
    else:
        out["valid"] = _split_files(cfg, "valid", noun)
    out["test"] = _split_files(cfg, "test", noun)
    return out


def read_lm_texts(cfg: DataConfig) -> dict[str, str]:
    """The train/valid/test text of a language-modelling corpus (test may be empty)."""
    if cfg.dataset is not None:
        return _bundled_lm_texts(cfg)
    lines = {"train": _lm_lines(cfg, "train")}
    if holds_out(cfg):
        lines["train"], lines["valid"] = hold_out(lines["train"], cfg, "lines", f"data.train ({cfg.train})")
    else:
        lines["valid"] = _lm_lines(cfg, "valid")
    lines["test"] = _lm_lines(cfg, "test")
    return {k: _lm_text(cfg, v) for k, v in lines.items()}


def read_lm_split(cfg: DataConfig, split: str) -> str:
    """One split ("train", "valid" or "test") of ``read_lm_texts``, reading only that split's file (and
    ``data.train`` for a ``data.valid_size`` hold-out): ``seqmap evaluate`` scores a split after training."""
    if cfg.dataset is not None:
        return _bundled_lm_texts(cfg)[split]
    if split != "test" and holds_out(cfg):
        train, valid = hold_out(_lm_lines(cfg, "train"), cfg, "lines", f"data.train ({cfg.train})")
        return _lm_text(cfg, valid if split == "valid" else train)
    return _lm_text(cfg, _lm_lines(cfg, split))


def lm_file_text(cfg: DataConfig, path: str | Path, where: str) -> str:
    """A text file read as a language model's split is (lines joined by newlines, normalized as training)."""
    return _lm_text(cfg, read_lines(path, where))


def _bundled_lm_texts(cfg: DataConfig) -> dict[str, str]:
    if cfg.dataset != "tinyshakespeare":
        raise DataError(f"data.dataset={cfg.dataset!r} is not a language-modelling corpus that ships with "
                        "seqmap; use tinyshakespeare, or give data.train / data.valid text files")
    splits = datasets.tinyshakespeare_splits()
    return {"train": splits.train, "valid": splits.valid, "test": ""}


def _lm_lines(cfg: DataConfig, split: str) -> list[str]:
    path = getattr(cfg, split)
    if path is None and split != "test":
        hold = ", or data.valid_size to hold out the last N training lines" if split == "valid" else ""
        raise DataError(f"no {split} text for the language model: set data.{split} to a text file{hold}")
    return [] if path is None else read_lines(path, f"data.{split}")


def _lm_text(cfg: DataConfig, lines: list[str]) -> str:
    text = "\n".join(lines) + "\n" if lines else ""
    norm = normalizer_for(cfg)
    return text if norm.identity else norm(text)


# -- tokenizers -----------------------------------------------------------------------

TOKENIZER_DATA = "tokenizer_data.yaml"  # in RUN_DIR, beside tokenizer/: the data options it was fitted with
READ_AFTER_FIT = ("max_len", "max_src_len", "context", "eval_context", "augment_shift", "test", "test_src",
                  "test_tgt", "prepared_dir")  # data options that the tokenizer and the classes do not depend on


def _record_fit(cfg: DataConfig, run_dir: Path) -> None:
    """Write the data options RUN_DIR/tokenizer/ is about to be fitted with beside it (``TOKENIZER_DATA``), so a
    new run in RUN_DIR can tell whether that tokenizer fits its own data (``seqmap.training.run_trainer``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / TOKENIZER_DATA)


def _tokenizer_options(cfg: DataConfig) -> dict:
    if cfg.tokenizer in ("bpe", "unigram"):
        return {"character_coverage": cfg.character_coverage, "byte_fallback": cfg.byte_fallback,
                "split_digits": cfg.split_digits, "remove_extra_whitespaces": cfg.remove_extra_whitespaces}
    return {}


def tokenizers_for(cfg: DataConfig, src_texts: list[str], tgt_texts: list[str],
                   run_dir: Path, log: Callable[[str], None] = print) -> tuple[Tokenizer, Tokenizer]:
    """Load RUN_DIR/tokenizer if it exists (resume, evaluation), else train and save it there."""
    directory = run_dir / "tokenizer"
    if has_tokenizer(directory):
        return load_pair(directory)
    return fit_tokenizers(cfg, src_texts, tgt_texts, run_dir, log)


def fit_tokenizers(cfg: DataConfig, src_texts: list[str], tgt_texts: list[str], run_dir: Path,
                   log: Callable[[str], None] = print) -> tuple[Tokenizer, Tokenizer]:
    """Train the run's tokenizer(s) on these texts and save them in RUN_DIR/tokenizer."""
    directory = run_dir / "tokenizer"
    # bpe/unigram learn about vocab_size pieces; char/word keep the vocab_size - 4 most frequent (the rest is UNK)
    src, tgt = train_pair(cfg.tokenizer, src_texts, tgt_texts, cfg.vocab_size, joint=cfg.joint_vocab,
                          normalizer=normalizer_for(cfg), **_tokenizer_options(cfg))
    _record_fit(cfg, run_dir)  # first: a tokenizer saved without its record would be reused unchecked
    save_pair(src, tgt, directory)
    log(f"tokenizer: {cfg.tokenizer}, {'joint' if src is tgt else 'separate'} vocabulary "
        f"{src.vocab_size}{'' if src is tgt else ' / ' + str(tgt.vocab_size)}, saved in {directory}")
    return src, tgt


def _tokenizer_key(cfg: DataConfig) -> dict:
    """The options a fitted tokenizer depends on (with the text it is fitted on)."""
    return {"kind": cfg.tokenizer, "vocab_size": cfg.vocab_size, "joint": cfg.joint_vocab,
            "sample": cfg.tokenizer_sample, "lowercase": cfg.lowercase, "opencc": cfg.opencc,
            **_tokenizer_options(cfg)}


# -- putting it together ----------------------------------------------------------------

def truncate_source(ids: list[int], max_src_len: int) -> list[int]:
    """A source's token ids as a translation run reads them: its first ``data.max_src_len`` (0: all of them).

    Training, validation, ``evaluate`` and ``translate`` all truncate through here, so a long source is
    read alike everywhere and never dropped.
    """
    return ids[:max_src_len] if max_src_len > 0 else ids


def filtered_lengths(cfg: DataConfig, src_ids: Sequence[int], tgt_ids: Sequence[int]) -> tuple[int, int]:
    """The (source, target) lengths a pair is kept or dropped by (``data.max_len``; empty is dropped too): with
    ``data.max_src_len`` > 0 only the target counts (longer sources are truncated, not dropped)."""
    return (0 if cfg.max_src_len > 0 else len(src_ids)), len(tgt_ids)


def _encode_and_filter(name: str, pairs: Pairs, src_tok, tgt_tok, cfg: DataConfig, cache: Path,
                       log: Callable[[str], None] = print):
    """Token ids of the pairs (cached), then drop empty and over-long pairs, counting them.

    With ``data.max_src_len`` > 0 only the target counts against ``data.max_len``, and sources longer
    than ``max_src_len`` are truncated and counted in the log instead of dropped.
    """
    ids_of = dict(zip(pairs, cached_encode(pairs, (src_tok, tgt_tok), cache, name=name)))  # same text, same ids
    kept, report = filter_pairs(pairs, cfg.max_len, lengths=lambda s, t: filtered_lengths(cfg, *ids_of[(s, t)]))
    if cfg.max_src_len <= 0:
        return [ids_of[p] for p in kept], kept, report
    long = [len(ids_of[p][0]) for p in kept if len(ids_of[p][0]) > cfg.max_src_len]
    log(f"{name}: {len(long)} of {len(kept)} sources longer than data.max_src_len={cfg.max_src_len} tokens "
        f"(longest {max(long, default=0)}), truncated to their first {cfg.max_src_len}")
    return [(truncate_source(ids_of[p][0], cfg.max_src_len), ids_of[p][1]) for p in kept], kept, report


def _with_lexicon(cfg: DataConfig, train: Pairs, log: Callable[[str], None]) -> Pairs:
    """The training pairs plus ``data.lexicon``'s entries (normalized like the rest), counted in the log."""
    if cfg.lexicon is None:
        return train
    chinese = [t for _, t in train] if cfg.tgt_lang == "zh" else [s for s, _ in train]
    norm = normalizer_for(cfg)
    extra = [(norm(s), norm(t)) for s, t in lexicon_pairs(cfg.lexicon, cfg.src_lang, cfg.tgt_lang, chinese)]
    log(f"lexicon {cfg.lexicon}: {len(extra)} entries added to the {len(train)} training pairs")
    return train + extra


def _translation_source(cfg: DataConfig, log: Callable[[str], None]) -> tuple[Source, int, Pairs]:
    """The training pairs as a stream (files) or a list (a bundled corpus, or with ``data.lexicon``), with the
    number of last pairs ``prepare_pairs`` holds out for validation and the validation pairs already cut off."""
    options = {"task": "translation", "tokenizer": _tokenizer_key(cfg), "columns": [cfg.src_column, cfg.tgt_column],
               "langs": [cfg.src_lang, cfg.tgt_lang], "dataset": cfg.dataset, "lexicon": cfg.lexicon,
               "valid_size": cfg.valid_size if holds_out(cfg) else 0}
    if cfg.dataset is None and cfg.lexicon is None:
        if cfg.train is None and cfg.train_src is None:
            _split_files(cfg, "train", "pairs")  # raises: no training data
        norm = normalizer_for(cfg)
        files = [Path(cfg.train)] if cfg.train else [Path(cfg.train_src), Path(cfg.train_tgt)]

        def pairs():
            stream = (iter_tsv(cfg.train, "data.train", cfg.src_column, cfg.tgt_column) if cfg.train else
                      iter_parallel(cfg.train_src, cfg.train_tgt, "data.train_src", "data.train_tgt"))
            return stream if norm.identity else ((norm(a), norm(b)) for a, b in stream)

        return Source(pairs, files, options), cfg.valid_size if holds_out(cfg) else 0, []
    texts = read_translation_texts(cfg)  # small: a bundled corpus, or one a lexicon is added to
    texts["train"] = _with_lexicon(cfg, texts["train"], log)
    train = texts["train"]
    digest = hashlib.sha256(json.dumps(train, ensure_ascii=False).encode()).hexdigest()
    return Source(lambda: iter(train), [], options, digest), 0, texts["valid"]


def load_translation(cfg: DataConfig, run_dir: Path, log: Callable[[str], None] = print) -> TranslationData:
    """The training pairs as a memory-mapped prepared corpus (``seqmap.data.prepare``: found or made), filtered on
    its lengths; the validation pairs encoded and filtered as text; the test pairs as text."""
    source, valid_size, valid_pairs = _translation_source(cfg, log)
    columns = {"src": (0, 0, encode_blank_empty), "tgt": (1, 1, encode_blank_empty)}
    prepared = prepare(cfg, source, run_dir, "translation", columns,
                       lambda src, tgt: fit_tokenizers(cfg, src, tgt, run_dir, log), log,
                       valid_size=valid_size, record=lambda: _record_fit(cfg, run_dir),
                       check_total=lambda n: held_out_count(n, cfg, "pairs", _train_source(cfg)))
    src_tok, tgt_tok = prepared.src_tok, prepared.tgt_tok
    if valid_size:
        valid_pairs = prepared.held_out
    elif not valid_pairs:
        valid_pairs = read_translation_split(cfg, "valid")
    _log_held_out(cfg, prepared.store.rows, "pairs", log)
    kept, train_report = filter_store(prepared.store, cfg)
    train = PairRows(prepared.store, kept, cfg.max_src_len)
    if cfg.max_src_len > 0:
        lengths = prepared.store.columns["src"].lengths()[kept]
        long = lengths[lengths > cfg.max_src_len]
        log(f"train: {len(long)} of {len(kept)} sources longer than data.max_src_len={cfg.max_src_len} tokens "
            f"(longest {int(long.max(initial=0))}), truncated to their first {cfg.max_src_len}")
    valid, valid_text, valid_report = _encode_and_filter("valid", valid_pairs, src_tok, tgt_tok, cfg,
                                                         run_dir / "cache", log)
    for name, report in (("train", train_report), ("valid", valid_report)):
        log(report.summary(name))
    if not len(train):
        raise DataError("no training pairs left after filtering; check the data files and data.max_len")
    return TranslationData(src_tok, tgt_tok, train, valid, valid_text, read_translation_split(cfg, "test"),
                           {"train": train_report, "valid": valid_report})


LABELS_FILE = "labels.json"  # in RUN_DIR/tokenizer/, so every checkpoint's copy of the tokenizer carries it


def classification_ids(tok: Tokenizer, text: str, max_len: int) -> list[int]:
    """The token ids a classifier reads for ``text``: its first ``max_len`` tokens (``data.max_len``).

    Every split, ``seqmap evaluate`` and ``seqmap classify`` encode through here, so a long text is
    truncated alike everywhere and never dropped: a test score counts every test row.
    """
    return tok.encode(text)[:max_len]


def read_classification_texts(cfg: DataConfig) -> dict[str, Pairs]:
    """The train/valid/test (text, label) rows of the config's TSV files (test may be empty), texts normalized."""
    norm = normalizer_for(cfg)
    return {k: [(norm(t), label.strip()) for t, label in v] for k, v in _file_pairs(cfg, "rows").items()}


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
    _log_held_out(cfg, len(texts["train"]), "rows", log)
    tok, _ = tokenizers_for(cfg, [t for t, _ in texts["train"]], [t for t, _ in texts["train"]], run_dir, log)
    labels = _run_labels([label for _, label in texts["train"]], cfg, run_dir, log)
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


def _run_labels(train_labels: list[str], cfg: DataConfig, run_dir: Path, log: Callable[[str], None]) -> LabelSet:
    """The run's classes: RUN_DIR/tokenizer/labels.json if it exists (resume, evaluation), else the training labels'."""
    labels_path = run_dir / "tokenizer" / LABELS_FILE
    if labels_path.exists():
        labels = LabelSet.load(labels_path)
    else:
        labels = LabelSet.from_training(train_labels, cfg.max_classes)
        _record_fit(cfg, run_dir)
        labels_path.parent.mkdir(parents=True, exist_ok=True)
        labels.save(labels_path)
    merged = f"; {len(labels.merged)} rarer labels joined '{labels.other}': {', '.join(labels.merged)}" \
        if labels.merged else ""
    log(f"classes: {len(labels)} ({', '.join(labels.names)}){merged}")
    return labels


def read_image_split(cfg: DataConfig, split: str) -> ImageSet | None:
    """``data.<split>`` read as images (an .npz or a folder), or None when it is not set."""
    path = getattr(cfg, split)
    if path is None:
        return None
    size = tuple(cfg.image_size) if cfg.image_size else None
    return read_split(path, split, f"data.{split}", mode=cfg.image_mode, size=size)


def load_images(cfg: DataConfig, run_dir: Path, log: Callable[[str], None] = print) -> ImageData:
    """Labelled images for the ``image`` task: train, valid (``data.valid``, or the last ``data.valid_size``
    training images) and test (may be absent); all must have the training images' shape."""
    if cfg.train is None:
        raise DataError("no training images: set data.train to an .npz file or a folder of class sub-folders")
    train = read_image_split(cfg, "train")
    valid = read_image_split(cfg, "valid")
    if valid is None:
        if cfg.valid_size <= 0:
            raise DataError("no validation images: set data.valid, or data.valid_size to hold out that many of "
                            "the training images")
        train, valid = train.split_off(held_out_count(len(train), cfg, "images", f"data.train ({cfg.train})"))
    test = read_image_split(cfg, "test")
    for name, part in (("valid", valid), ("test", test)):
        if part is not None and part.shape != train.shape:
            raise DataError(f"data.{name} images are {'x'.join(map(str, part.shape))} but the training images are "
                            f"{'x'.join(map(str, train.shape))} (channels x height x width); use one size, or "
                            "set data.image_size")
    _log_held_out(cfg, len(train), "images", log)
    labels = _run_labels(train.labels, cfg, run_dir, log)
    train_ids = [labels.encode(v, where="data.train") for v in train.labels]
    valid_ids = [labels.encode(v, where=valid_name(cfg)) for v in valid.labels]
    mean, std = pixel_stats(train.images)
    log(f"images: {len(train)} train / {len(valid)} valid / {0 if test is None else len(test)} test, "
        f"{'x'.join(map(str, train.shape))} (channels x height x width), pixel mean {mean} std {std}")
    return ImageData(labels, train, valid, test, train_ids, valid_ids, mean, std)
def load_graph(cfg: DataConfig, run_dir: Path, log: Callable[[str], None] = print) -> GraphData:
    """``data.train``: a graph .npz (or cora, citeseer: data/planetoid/NAME.npz), row-normalised, self-loops added."""
    g = load_planetoid(cfg.train)
    log(f"graph {g.name}: {g.num_nodes} nodes, {g.num_edges} edges (self-loops included), {g.num_features} "
        f"features, {g.num_classes} classes; train / val / test nodes {g.train_idx.numel()} / "
        f"{g.val_idx.numel()} / {g.test_idx.numel()}")
    if g.val_idx.numel() == 0:
        raise DataError(f"{cfg.train}: val_idx is empty; list the validation nodes (validation picks the checkpoint)")
    return GraphData(g)


def lm_stream(text: str, tok: Tokenizer, name: str = "text", cache: Path | None = None) -> list[int]:
    """A language model's token stream of ``text``: a character LM reads newlines as characters, the others
    encode each line and end it with EOS. Cached in ``cache`` (a run's ``cache/``) when given."""
    if not text:
        return []
    encode = ((lambda texts: [tok.encode(t) for t in texts]) if cache is None
              else (lambda texts: cached_encode(texts, tok, cache, name=name)))
    if tok.kind == "char":
        (ids,) = encode([text])
        return list(ids)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [i for line in encode(lines) for i in (*line, EOS)]


def _lm_source(cfg: DataConfig) -> tuple[Source, int]:
    """A language model's training text as rows to encode (a line, or for a character LM a line with its newline;
    a bundled text whole), with the number of last lines held out for validation."""
    options = {"task": "lm", "tokenizer": _tokenizer_key(cfg), "dataset": cfg.dataset,
               "valid_size": cfg.valid_size if holds_out(cfg) else 0}
    char = cfg.tokenizer == "char"
    if cfg.dataset is not None:
        text = _bundled_lm_texts(cfg)["train"]
        rows = [text] if char else _lines_of(text)
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        return Source(lambda: ((row,) for row in rows), [], options, digest), 0
    if cfg.train is None:
        _lm_lines(cfg, "train")  # raises: no training text
    norm = normalizer_for(cfg)

    def rows():
        for line in iter_lines(cfg.train, "data.train"):
            line = line if norm.identity else norm(line)
            yield (line + "\n",) if char else (line,)

    return Source(rows, [Path(cfg.train)], options), cfg.valid_size if holds_out(cfg) else 0


def _lines_of(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def lm_rows(tok: Tokenizer, texts: list[str], threads: int) -> list[list[int]]:
    """A language model's rows of its token stream: a character LM's text as is (newlines are characters), any
    other's line followed by EOS."""
    ids = tok.encode_batch(texts, threads)
    return ids if tok.kind == "char" else [[*row, EOS] for row in ids]


def load_lm(cfg: DataConfig, run_dir: Path, log: Callable[[str], None] = print) -> LMData:
    """The training text as one memory-mapped token stream of a prepared corpus (``seqmap.data.prepare``: found or
    made); the validation and test texts as token lists."""
    if not cfg.joint_vocab:
        raise DataError("data.joint_vocab=false has no meaning for a language model; remove it")
    source, valid_size = _lm_source(cfg)
    prepared = prepare(cfg, source, run_dir, "lm", {"text": (0, 1, lm_rows)},
                       lambda lines: fit_tokenizers(cfg, lines, lines, run_dir, log), log, valid_size=valid_size,
                       noun="lines", record=lambda: _record_fit(cfg, run_dir),
                       check_total=lambda n: held_out_count(n, cfg, "lines", f"data.train ({cfg.train})"))
    tok = prepared.tgt_tok
    _log_held_out(cfg, prepared.store.rows, "lines", log)
    if valid_size:
        held = [row for (row,) in prepared.held_out]
        valid = "".join(held) if cfg.tokenizer == "char" else _lm_text(cfg, held)
    else:
        valid = read_lm_split(cfg, "valid")
    cache = run_dir / "cache"
    data = LMData(tok, prepared.store.columns["text"].stream(), lm_stream(valid, tok, "valid", cache),
                  lm_stream(read_lm_split(cfg, "test"), tok, "test", cache))
    log(f"lm data: {len(data.train)} train / {len(data.valid)} valid / {len(data.test)} test tokens")
    if len(data.valid) < 2:
        raise DataError("the validation text is empty; set data.valid to a non-empty text file")
    return data


@dataclass
class SpeechData:
    tok: Tokenizer  # the transcripts' tokenizer (``tokenizer/``)
    train: Utterances
    valid: Utterances
    test: Utterances | None
    train_ids: list[list[int]]  # token ids of each training / validation transcript
    valid_ids: list[list[int]]


JOIN_SEEDS = {"train": 1, "valid": 2, "test": 3}  # + data.join_seed: each split draws its own utterances


def speech_split(cfg: DataConfig, split: str, sample_rate: int | None = None) -> Utterances | None:
    """A split's utterances: ``data.<split>``, or the recordings of ``data.train`` marked with that split, or
    for train and valid with ``data.valid_size`` the last N recordings of ``data.train`` held out from the rest;
    ``data.exclude_speakers`` left out of train and valid; joined when ``data.join`` is set."""
    path = getattr(cfg, split) or cfg.train
    if path is None:
        return None
    source = read_recordings(path, sample_rate)
    held_out = split != "test" and holds_out(cfg)
    if held_out and source.splits is not None:
        raise DataError(f"{path} already marks each recording's split (train / valid / test); remove "
                        f"data.valid_size={cfg.valid_size}, which holds out recordings of a data.train without one")
    if source.splits is None and path != getattr(cfg, split) and not held_out:
        return None  # nothing in data.train says which recordings are valid / test
    keep = [k for k in range(len(source)) if (source.splits is None or source.splits[k] == split)
            and not (split != "test" and source.speakers[k] in cfg.exclude_speakers)]
    if held_out:
        where = f"data.train ({path})" + (" after data.exclude_speakers" if cfg.exclude_speakers else "")
        keep = dict(zip(("train", "valid"), hold_out(keep, cfg, "recordings", where)))[split]
    if not keep:
        raise DataError(f"no {split} recordings in {path}" + (" after data.exclude_speakers" if
                                                               cfg.exclude_speakers else ""))
    recordings = source.select(keep)
    if not cfg.join:
        return single(recordings)
    count = cfg.join_count[SPLITS.index(split)]
    return join(recordings, count, cfg.join[0], cfg.join[1], tuple(cfg.join_silence), JOIN_SEEDS[split] +
                cfg.join_seed * 1000)


def load_speech(cfg: DataConfig, run_dir: Path, log: Callable[[str], None] = print) -> SpeechData:
    """Utterances and their transcripts (see ``seqmap.data.audio``); the tokenizer is trained on the training
    transcripts. No utterance is dropped: every transcript is kept whole (``data.max_len`` does not apply)."""
    if cfg.train is None:
        raise DataError("no training data: set data.train to an .npz of recordings or a .tsv manifest of WAV files")
    train = speech_split(cfg, "train")
    valid = speech_split(cfg, "valid", train.sample_rate)
    if valid is None:
        raise DataError(f"no validation data: set data.valid, or data.valid_size to hold out the last N training "
                        f"recordings, or give {cfg.train} a split per recording")
    _log_held_out(cfg, len(train.recordings), "recordings", log)
    test = speech_split(cfg, "test", train.sample_rate)
    texts = [train.text(i) for i in range(len(train))]
    tok, _ = tokenizers_for(cfg, texts, texts, run_dir, log)
    train_ids = [tok.encode(t) for t in texts]
    valid_ids = [tok.encode(valid.text(i)) for i in range(len(valid))]
    hours = sum(train.length(i) for i in range(len(train))) / train.sample_rate / 3600
    log(f"speech: {len(train)} train ({hours:.2f} h) / {len(valid)} valid / {0 if test is None else len(test)} test "
        f"utterances at {train.sample_rate} Hz" + (f", each {cfg.join[0]}-{cfg.join[1]} recordings joined"
                                                    if cfg.join else "")
        + (f"; speakers {', '.join(cfg.exclude_speakers)} left out of train and valid" if cfg.exclude_speakers
           else ""))
    return SpeechData(tok, train, valid, test, train_ids, valid_ids)
