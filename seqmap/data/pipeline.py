"""What every task's data shares: the validation hold-out, normalization, tokenizer and class fitting.

Each task reads and prepares its own data (``seqmap.tasks``: ``load_translation``, ``load_lm``, ...); the
parts they share are here:

    hold-out     without ``data.valid``, ``data.valid_size: N`` makes the last N training examples (pairs,
                 lines, rows, images, recordings) the validation set, cut off as the data is read
                 (``hold_out``), before anything is fitted on the training data; the same config always cuts
                 the same examples, so a resumed run and ``seqmap evaluate`` see the split training saw
    files        a split's (source, target) or (text, label) rows from a TSV or two aligned files
    fitting      tokenizer(s) trained on the training text and saved in RUN_DIR/tokenizer (the data options
                 they were fitted with beside it, in RUN_DIR/tokenizer_data.yaml); a classifier's classes
                 beside them (RUN_DIR/tokenizer/labels.json)
    inputs       how a model reads one input (a source cut to ``data.max_src_len``, a text to ``data.max_len``),
                 alike in training, evaluation, serving and plots
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from seqmap.config import DataConfig, save_config
from seqmap.data.corpus import DataError, read_parallel, read_tsv
from seqmap.data.labels import LabelSet
from seqmap.data.normalize import TextNormalizer
from seqmap.data.prepare import has_tokenizer
from seqmap.data.tokenizers import Tokenizer, load_pair, save_pair, train_pair

Pairs = list[tuple[str, str]]
T = TypeVar("T")


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


def log_held_out(cfg: DataConfig, train_count: int, noun: str, log: Callable[[str], None]) -> None:
    if holds_out(cfg):
        n = cfg.valid_size
        log(f"valid: the last {n} of the {train_count + n} training {noun} of data.train, held out by "
            f"data.valid_size before anything was fitted on the training data (never trained on)")


# -- reading a split from files ----------------------------------------------------------


def normalizer_for(cfg: DataConfig) -> TextNormalizer:
    """The normalization the config asks for (lowercasing, OpenCC), applied to every split and kept by the tokenizer."""
    return TextNormalizer(lowercase=cfg.lowercase, opencc=cfg.opencc)


def normalized(cfg: DataConfig, splits: dict[str, Pairs]) -> dict[str, Pairs]:
    norm = normalizer_for(cfg)
    if norm.identity:
        return splits
    return {k: [(norm(s), norm(t)) for s, t in v] for k, v in splits.items()}


def train_source(cfg: DataConfig) -> str:
    return f"data.train ({cfg.train})" if cfg.train else f"data.train_src ({cfg.train_src})"


def split_files(cfg: DataConfig, split: str, noun: str) -> Pairs:
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


def file_pairs(cfg: DataConfig, noun: str = "pairs") -> dict[str, Pairs]:
    out = {"train": split_files(cfg, "train", noun)}
    if holds_out(cfg):
        out["train"], out["valid"] = hold_out(out["train"], cfg, noun, train_source(cfg))
    else:
        out["valid"] = split_files(cfg, "valid", noun)
    out["test"] = split_files(cfg, "test", noun)
    return out


# -- tokenizers and classes, fitted on the training data ------------------------------------


TOKENIZER_DATA = "tokenizer_data.yaml"  # in RUN_DIR, beside tokenizer/: the data options it was fitted with


READ_AFTER_FIT = ("max_len", "max_src_len", "context", "eval_context", "augment_shift", "test", "test_src",
                  "test_tgt", "prepared_dir")  # data options that the tokenizer and the classes do not depend on


def record_fit(cfg: DataConfig, run_dir: Path) -> None:
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
    record_fit(cfg, run_dir)  # first: a tokenizer saved without its record would be reused unchecked
    save_pair(src, tgt, directory)
    log(f"tokenizer: {cfg.tokenizer}, {'joint' if src is tgt else 'separate'} vocabulary "
        f"{src.vocab_size}{'' if src is tgt else ' / ' + str(tgt.vocab_size)}, saved in {directory}")
    return src, tgt


def tokenizer_key(cfg: DataConfig) -> dict:
    """The options a fitted tokenizer depends on (with the text it is fitted on)."""
    return {"kind": cfg.tokenizer, "vocab_size": cfg.vocab_size, "joint": cfg.joint_vocab,
            "sample": cfg.tokenizer_sample, "lowercase": cfg.lowercase, "opencc": cfg.opencc,
            **_tokenizer_options(cfg)}


LABELS_FILE = "labels.json"  # in RUN_DIR/tokenizer/, so every checkpoint's copy of the tokenizer carries it


def run_labels(train_labels: Iterable[str] | Mapping[str, int], cfg: DataConfig, run_dir: Path,
               log: Callable[[str], None]) -> LabelSet:
    """The run's classes: RUN_DIR/tokenizer/labels.json if it exists (resume, evaluation), else the training labels'
    (the labels, or each label's count)."""
    labels_path = run_dir / "tokenizer" / LABELS_FILE
    if labels_path.exists():
        labels = LabelSet.load(labels_path)
    else:
        labels = LabelSet.from_training(train_labels, cfg.max_classes)
        record_fit(cfg, run_dir)
        labels_path.parent.mkdir(parents=True, exist_ok=True)
        labels.save(labels_path)
    merged = f"; {len(labels.merged)} rarer labels joined '{labels.other}': {', '.join(labels.merged)}" \
        if labels.merged else ""
    log(f"classes: {len(labels)} ({', '.join(labels.names)}){merged}")
    return labels


# -- how a model reads one input: training, evaluation, serving and plots cut it alike ---------


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


def classification_ids(tok: Tokenizer, text: str, max_len: int) -> list[int]:
    """The token ids a classifier reads for ``text``: its first ``max_len`` tokens (``data.max_len``).

    Every split, ``seqmap evaluate`` and ``seqmap classify`` encode through here, so a long text is
    truncated alike everywhere and never dropped: a test score counts every test row.
    """
    return tok.encode(text)[:max_len]
