"""Language modelling: one token stream per split, read in windows of ``data.context`` tokens.

With a character tokenizer the stream is the raw text (newlines are characters, as nanoGPT trains);
otherwise each line ends with EOS (as the PTB recipes do). The training stream is memory-mapped;
batches are nanoGPT-style random windows, or consecutive rows with a carried recurrent state
(``train.stateful``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from seqmap.config import DataConfig, RunConfig
from seqmap.data import datasets
from seqmap.data.batching import Batch
from seqmap.data.corpus import DataError, cached_encode, iter_lines, read_lines
from seqmap.data.pipeline import (
    fit_tokenizers,
    held_out_count,
    hold_out,
    holds_out,
    log_held_out,
    normalizer_for,
    record_fit,
    tokenizer_key,
)
from seqmap.data.prepare import Source, prepare
from seqmap.data.samplers import lm_random_chunks, lm_stream_rows, lm_stream_window
from seqmap.data.tokenizers import EOS, PAD, Tokenizer
from seqmap.evaluation import lm_scores
from seqmap.runs import LoadedRun
from seqmap.tasks.base import DECODED, STATEFUL, Task, TrainingContext, own_split
from seqmap.training.trainer import TrainingError
from seqmap.training.validate import eval_context, evaluating, lm_batches, log_token_scores, summed_nll, token_scores


@dataclass
class LMData:
    tok: Tokenizer
    train: np.ndarray  # the training token stream, memory-mapped (uint16 or int32)
    valid: list[int]
    test: list[int]


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
    options = {"task": "lm", "tokenizer": tokenizer_key(cfg), "dataset": cfg.dataset,
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
                       noun="lines", record=lambda: record_fit(cfg, run_dir),
                       check_total=lambda n: held_out_count(n, cfg, "lines", f"data.train ({cfg.train})"))
    tok = prepared.tgt_tok
    log_held_out(cfg, prepared.store.rows, "lines", log)
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


def lm_text(run: LoadedRun, data: str | None, split: str = "test") -> tuple[str, str]:
    """(text, where it came from) for ``seqmap evaluate`` on a language model: the ``data`` file, else the run's
    own ``split`` read from its config (as training read it)."""
    cfg = run.cfg.data
    if data is not None:
        return lm_file_text(cfg, data, "--data"), data
    name, text = own_split(read_lm_split, cfg, split, "text", "data.{}", "give --data TEXT_FILE")
    return text, f"its {name} split"


class LMTask(Task):
    name = "lm"

    def load(self, cfg, run_dir, log=print):
        return load_lm(cfg, run_dir, log)

    def model_fields(self, data: LMData) -> dict:
        return dict(src_vocab=0, tgt_vocab=data.tok.vocab_size, pad_id=PAD, n_classes=0)

    def check_trainable(self, cfg: RunConfig) -> None:
        """``train.stateful`` with a recurrent model; no decoded metric (a language model validates loss and ppl)."""
        if cfg.train.stateful and cfg.model.family != "rnn_lm":
            raise TrainingError(STATEFUL)
        for metric in dict.fromkeys((cfg.train.early_stopping, *cfg.train.patience_metrics)):
            if metric in DECODED:
                raise TrainingError(f"train.early_stopping / patience_metrics {metric} is not measured for a "
                                    "language model (data.task=lm validates loss and ppl); use loss or ppl")

    def validate(self, model, data: LMData, cfg, device, log):
        """loss, ppl and tokens of the validation text, in windows of ``data.eval_context`` (else ``data.context``)."""
        with evaluating(model):
            batches = lm_batches(data.valid, eval_context(cfg.data), cfg.train.batch_size)
            out = token_scores(*summed_nll(model, batches, device))
        log_token_scores(out, log)
        return out

    def test(self, trainer):
        """Loss and perplexity of the test text, in the windows validation scores."""
        test = trainer.data.test
        if not test:
            return None
        best = trainer.load_best()
        result = lm_scores(trainer.model, test, trainer.cfg, trainer.device)
        trainer.log.metrics("test", trainer.state["step"], **result)
        trainer.log.info(f"test ({result['tokens']} tokens, {best.name}): loss {result['loss']:.4f} "
                         f"ppl {result['ppl']:.2f}")
        return result

    def batches(self, ctx: TrainingContext):
        """nanoGPT-style random windows; the generator is seeded by the batch position, so resuming is exact."""
        if ctx.cfg.train.stateful:
            yield from _stream_batches(ctx)
            return
        t, stream, dist = ctx.cfg.train, ctx.data.train, ctx.dist  # memory-mapped: windows read where drawn
        batches_per_epoch = max(1, len(stream) // (t.batch_size * ctx.cfg.data.context * dist.world_size))
        micro = _position(ctx)
        while True:
            g = torch.Generator().manual_seed(t.seed * 1_000_003 + micro * dist.world_size + dist.rank)
            inputs, targets = lm_random_chunks(stream, ctx.cfg.data.context, t.batch_size, g)
            ctx.state["epoch"] = micro // batches_per_epoch
            if t.max_epochs > 0 and ctx.state["epoch"] >= t.max_epochs:
                return
            micro += 1
            ctx.state["lm_read"] = micro  # batches read, skipped steps' included: where a resumed run reads on
            yield Batch.from_lm_windows(inputs, targets, pad_id=PAD)


def _position(ctx: TrainingContext) -> int:
    """Micro-batches read so far: stored in the checkpoint (a checkpoint from before that: from the step)."""
    return ctx.state.get("lm_read", ctx.state["step"] * ctx.cfg.train.accum_steps)


def _stream_batches(ctx: TrainingContext):
    """Consecutive windows of B text rows per process (``train.stateful``); the carried state resets each epoch.

    The window follows from the batch position, so a resumed run reads on where it stopped;
    its carried state restarts from zero there (the state is not checkpointed).
    """
    t, context, b = ctx.cfg.train, ctx.cfg.data.context, ctx.cfg.train.batch_size
    rank, world = ctx.dist.rank, ctx.dist.world_size
    rows = lm_stream_rows(ctx.data.train, b * world)[rank * b: (rank + 1) * b]
    per_epoch = (rows.shape[1] - 1) // context
    if per_epoch < 1:
        raise TrainingError(f"the training stream is too short for {b * world} rows of data.context={context} "
                            "tokens; lower train.batch_size or data.context")
    micro = _position(ctx)
    while True:
        epoch, index = divmod(micro, per_epoch)
        ctx.state["epoch"] = epoch
        if t.max_epochs > 0 and epoch >= t.max_epochs:
            return
        if index == 0:
            ctx.carry.reset()
        micro += 1
        ctx.state["lm_read"] = micro
        yield Batch.from_lm_windows(*lm_stream_window(rows, context, index), pad_id=PAD)


TASK = LMTask()
