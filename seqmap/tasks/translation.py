"""Translation (and summarization, a translation config): source text in, target text out.

Training data becomes ``PairRows`` (rows read from the prepared corpus's memory map per batch), validation
data lists of (src_ids, tgt_ids) with their text for BLEU; batches are token budgets of pairs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from seqmap import metrics as mt
from seqmap.config import DataConfig, RunConfig
from seqmap.data import datasets
from seqmap.data.batching import collate_pairs
from seqmap.data.corpus import DataError, FilterReport, cached_encode, filter_pairs, iter_parallel, iter_tsv
from seqmap.data.lexicon import lexicon_pairs
from seqmap.data.pipeline import (
    Pairs,
    file_pairs,
    filtered_lengths,
    fit_tokenizers,
    held_out_count,
    hold_out,
    holds_out,
    log_held_out,
    normalized,
    normalizer_for,
    record_fit,
    split_files,
    tokenizer_key,
    train_source,
    truncate_source,
)
from seqmap.data.prepare import PairRows, Source, encode_blank_empty, filter_store, prepare
from seqmap.data.tokenizers import PAD, Tokenizer
from seqmap.decoding.text import translate_ids
from seqmap.evaluation import evaluate_pairs
from seqmap.models.lead import median_words
from seqmap.runs import LoadedRun
from seqmap.tasks.base import DECODED, Task, own_split, token_batches
from seqmap.training.trainer import TrainingError
from seqmap.training.validate import (
    evaluating,
    greedy_note,
    log_token_scores,
    summed_nll,
    token_scores,
    translation_batches,
)


@dataclass
class TranslationData:
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    train: PairRows  # the kept training pairs, read from the prepared corpus's memory map
    valid: list[tuple[list[int], list[int]]]
    valid_text: Pairs  # the kept validation pairs, as text (for BLEU and examples)
    test_text: Pairs
    reports: dict[str, FilterReport] = field(default_factory=dict)


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


def read_translation_texts(cfg: DataConfig) -> dict[str, Pairs]:
    """The train/valid/test (source, target) texts named by the config (test may be empty), normalized."""
    out = _bundled_pairs(cfg) if cfg.dataset is not None else file_pairs(cfg)
    return normalized(cfg, out)


def read_translation_split(cfg: DataConfig, split: str) -> Pairs:
    """One split ("train", "valid" or "test") of ``read_translation_texts``, reading only that split's files (and
    ``data.train`` for a ``data.valid_size`` hold-out): ``seqmap evaluate RUN_DIR`` scores a split after
    training, when the other files may have moved."""
    if cfg.dataset is not None:
        pairs = _bundled_pairs(cfg)[split]
    elif split != "test" and holds_out(cfg):
        train, valid = hold_out(split_files(cfg, "train", "pairs"), cfg, "pairs", train_source(cfg))
        pairs = valid if split == "valid" else train
    else:
        pairs = split_files(cfg, split, "pairs")
    return normalized(cfg, {split: pairs})[split]


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
    options = {"task": "translation", "tokenizer": tokenizer_key(cfg), "columns": [cfg.src_column, cfg.tgt_column],
               "langs": [cfg.src_lang, cfg.tgt_lang], "dataset": cfg.dataset, "lexicon": cfg.lexicon,
               "valid_size": cfg.valid_size if holds_out(cfg) else 0}
    if cfg.dataset is None and cfg.lexicon is None:
        if cfg.train is None and cfg.train_src is None:
            split_files(cfg, "train", "pairs")  # raises: no training data
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
                       valid_size=valid_size, record=lambda: record_fit(cfg, run_dir),
                       check_total=lambda n: held_out_count(n, cfg, "pairs", train_source(cfg)))
    src_tok, tgt_tok = prepared.src_tok, prepared.tgt_tok
    if valid_size:
        valid_pairs = prepared.held_out
    elif not valid_pairs:
        valid_pairs = read_translation_split(cfg, "valid")
    log_held_out(cfg, prepared.store.rows, "pairs", log)
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


def split_texts(run: LoadedRun, split: str = "test") -> tuple[list[str], list[str]]:
    """The sources and references of a translation run's own ``split`` ("test", "val" or "train"), read from its
    config's data and normalized as training read them (``seqmap evaluate RUN_DIR`` without --src/--ref scores
    these, as ``seqmap train`` scored the test split). Only the files of ``split`` are read (the training file
    too for a ``data.valid_size`` hold-out). The validation and training pairs are the ones training kept:
    empty and over-long pairs dropped, as ``seqmap train`` logged. A DataError says when the config names no
    such data."""
    cfg = run.cfg.data
    name, pairs = own_split(read_translation_split, cfg, split, "data", "data.{} or data.{}_src and data.{}_tgt",
                             "give --src FILE and --ref FILE")
    if name != "test":  # as load_translation filtered them (the test split is scored whole)
        read = len(pairs)
        pairs = filter_pairs(pairs, cfg.max_len, lengths=lambda s, t: filtered_lengths(
            cfg, run.src_tok.encode(s), run.tgt_tok.encode(t)))[0]
        if not pairs:
            raise DataError(f"training kept none of the {read} {name} pairs (each empty, or longer than "
                            f"data.max_len={cfg.max_len} tokens); give --src FILE and --ref FILE")
    return [s for s, _ in pairs], [t for _, t in pairs]


def median_target_words(data: DataConfig) -> int:
    """The lead's length: the median word count of a run's training targets (``data.train``)."""
    try:
        train = read_translation_texts(data)["train"]
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read the run's training targets for the lead's length ({e}); "
                         "give the lead's length (--lead WORDS)") from None
    return median_words([t for _, t in train])


class TranslationTask(Task):
    name = "translation"

    def load(self, cfg, run_dir, log=print):
        return load_translation(cfg, run_dir, log)

    def model_fields(self, data: TranslationData) -> dict:
        return dict(src_vocab=data.src_tok.vocab_size, tgt_vocab=data.tgt_tok.vocab_size, pad_id=PAD, n_classes=0)

    def batches(self, ctx):
        train = ctx.data.train  # a PairRows: lengths are arrays, rows are read from the memory map per batch
        return token_batches(ctx, train.src_lengths(), train.tgt_lengths() + 1, collate_pairs)

    def check_trainable(self, cfg: RunConfig) -> None:
        """A best-checkpoint or patience metric of the decoded validation set that the run never measures
        (``train.valid_bleu=false``; ``rougeL`` of a Chinese target) would rank no checkpoint."""
        super().check_trainable(cfg)
        for metric in dict.fromkeys((cfg.train.early_stopping, *cfg.train.patience_metrics)):
            if metric not in DECODED:
                continue
            if not cfg.train.valid_bleu:
                raise TrainingError(f"train.early_stopping / patience_metrics {metric} is measured on the decoded "
                                    "validation set, which train.valid_bleu=false turns off; set "
                                    "train.valid_bleu=true, or use loss or ppl")
            if metric == "rougeL" and mt.tokenizer_for(cfg.data.tgt_lang) == "zh":
                raise TrainingError(f"train.early_stopping / patience_metrics rougeL is not measured for a Chinese "
                                    f"target (data.tgt_lang={cfg.data.tgt_lang}: rouge-score reads Latin-script "
                                    "words); use bleu, chrf, loss or ppl")

    def validate(self, model, data: TranslationData, cfg, device, log):
        """loss, ppl and tokens by teacher forcing; with ``train.valid_bleu``, BLEU, chrF (and ROUGE unless the
        target is Chinese) of greedy translations, a few of them logged beside their references."""
        with evaluating(model):
            out = token_scores(*summed_nll(model, translation_batches(data.valid, cfg.train.max_tokens), device))
            if cfg.train.valid_bleu and data.valid:
                out.update(_decode_and_score(model, data, cfg, device, log))
        log_token_scores(out, log, greedy_note(cfg, "BLEU", "translate") if "bleu" in out else "")
        return out

    def test(self, trainer):
        """Decoded with the run's decode config and scored as by ``evaluate_pairs`` (hypotheses in
        ``RUN_DIR/test.hyp``)."""
        cfg, data, log = trainer.cfg, trainer.data, trainer.log
        test = data.test_text
        if not test:
            return None
        best = trainer.load_best()
        step = trainer.state["step"]
        out = trainer.run_dir / "test.hyp"
        run = LoadedRun(cfg, trainer.model.eval(), data.src_tok, data.tgt_tok, best, trainer.device)
        result = evaluate_pairs(run, [s for s, _ in test], [t for _, t in test], out=out)
        log.metrics("test", step, **result)
        rouge = (f" ROUGE-1/2/L {result['rouge1']:.2f} / {result['rouge2']:.2f} / {result['rougeL']:.2f}"
                 if "rougeL" in result else "")
        log.info(f"test ({len(test)} sentences, {best.name}): BLEU {result['bleu']:.2f} chrF "
                 f"{result['chrf']:.2f} TER {result['ter']:.2f} ppl {result['ppl']:.2f}{rouge}")
        log.info(f"  {result['bleu_signature']}")
        log.info(f"  hypotheses in {out}")
        return result


def _decode_and_score(model, data: TranslationData, cfg: RunConfig, device, log) -> dict:
    d = cfg.decode
    hyp_ids = translate_ids(model, [s for s, _ in data.valid], max_tokens=d.max_tokens, max_len_a=d.max_len_a,
                            max_len_b=d.max_len_b, device=device)
    hyps = [data.tgt_tok.decode(h) for h in hyp_ids]
    refs = [t for _, t in data.valid_text]
    tok = mt.tokenizer_for(cfg.data.tgt_lang)
    bleu, chrf = mt.bleu(hyps, refs, tokenize=tok), mt.chrf(hyps, refs)
    for (src, ref), hyp in list(zip(data.valid_text, hyps))[: cfg.train.valid_examples]:
        log(f"  source     {src}\n           reference  {ref}\n           hypothesis {hyp}")
    out = {"bleu": bleu.value, "chrf": chrf.value, "bleu_signature": bleu.signature,
           "chrf_signature": chrf.signature}
    if tok != "zh":  # rouge-score reads [a-z0-9] words only: Chinese would score 0
        out.update({name: score.value for name, score in mt.rouge(hyps, refs).items()})
    return out


TASK = TranslationTask()
