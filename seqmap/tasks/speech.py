"""Speech recognition: utterances (recordings, or several of one speaker joined) in, transcripts out; batches
are budgets of encoder frames, the waveforms built when their batch is made."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from seqmap import metrics as mt
from seqmap.config import DataConfig, RunConfig
from seqmap.data.audio import SPLITS, Utterances, join, read_recordings, single
from seqmap.data.batching import collate_speech
from seqmap.data.corpus import DataError
from seqmap.data.pipeline import hold_out, holds_out, log_held_out, tokenizers_for
from seqmap.data.samplers import token_budget_batches
from seqmap.data.tokenizers import PAD, Tokenizer
from seqmap.decoding.speech import transcribe
from seqmap.runs import LoadedRun
from seqmap.speech_evaluation import evaluate_utterances, speaker_table
from seqmap.tasks.base import Task, TrainingContext
from seqmap.training.validate import evaluating, greedy_note, log_token_scores, speech_batches, summed_nll, token_scores


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
    log_held_out(cfg, len(train.recordings), "recordings", log)
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


def test_utterances(run: LoadedRun, path: str | Path | None = None) -> Utterances | None:
    """The test utterances of a speech run: the recordings of ``path`` (an .npz or a TSV manifest; its test
    recordings when it marks splits), else of the run's own test split, joined as the run's ``data.join`` says."""
    data = dataclasses.replace(run.cfg.data, test=str(path)) if path else run.cfg.data
    return speech_split(data, "test", run.model.frontend.sample_rate)


class SpeechTask(Task):
    name = "speech"

    def load(self, cfg, run_dir, log=print):
        return load_speech(cfg, run_dir, log)

    def model_fields(self, data: SpeechData) -> dict:
        return dict(src_vocab=0, tgt_vocab=data.tok.vocab_size, pad_id=PAD, sample_rate=data.train.sample_rate)

    def batches(self, ctx: TrainingContext):
        """Utterances in ``train.max_tokens`` budgets of encoder frames (or target tokens), length-bucketed and
        shuffled per epoch; the waveforms are built (joined) when their batch is made."""
        train, ids, t = ctx.data.train, ctx.data.train_ids, ctx.cfg.train
        frames = ctx.model.frontend.utterance_frames(train)
        return ctx.epoch_batches(
            lambda epoch: token_budget_batches(frames, [len(x) + 1 for x in ids], t.max_tokens, shuffle=True,
                                               seed=t.seed, epoch=epoch),
            lambda indices, *_: collate_speech([train.wave(i) for i in indices], [ids[i] for i in indices]))

    def validate(self, model, data: SpeechData, cfg, device, log):
        """loss, ppl and tokens by teacher forcing, then word (digit) error rate and string accuracy of greedy
        transcripts, a few of them logged beside their references."""
        with evaluating(model):
            batches = speech_batches(model, data.valid, data.valid_ids, cfg.train.max_tokens)
            out = token_scores(*summed_nll(model, batches, device))
            out.update(_transcribe_and_score(model, data, cfg, device, log))
        log_token_scores(out, log, greedy_note(cfg, "WER", "transcribe"))
        return out

    def test(self, trainer):
        """The best checkpoint on the run's test utterances (transcripts in RUN_DIR/test.hyp), logged per speaker."""
        cfg, data, log = trainer.cfg, trainer.data, trainer.log
        if data.test is None:
            return None
        best = trainer.load_best()
        run = LoadedRun(cfg, trainer.model.eval(), None, data.tok, best, trainer.device)
        out = trainer.run_dir / "test.hyp"
        result = evaluate_utterances(run, data.test, out=out)
        log.metrics("test", trainer.state["step"], **{k: v for k, v in result.items() if k != "speakers"})
        log.info(f"test ({result['utterances']} utterances, {result['words']} words, {best.name}, beam "
                 f"{result['beam_size']}): WER {result['wer']:.2f}, string accuracy {result['string_accuracy']:.2f}\n"
                 + "\n".join(speaker_table(result, tuple(cfg.data.exclude_speakers))))
        log.info(f"  transcripts in {out}")
        return result


def _transcribe_and_score(model, data: SpeechData, cfg: RunConfig, device, log) -> dict:
    """Greedy transcripts of the validation utterances: word (digit) error rate and string accuracy."""
    d, valid = cfg.decode, data.valid
    hyps = transcribe(model, data.tok, [valid.wave(i) for i in range(len(valid))], max_tokens=d.max_tokens,
                      max_len_a=d.max_len_a, max_len_b=d.max_len_b, beam_size=1, device=device)
    refs = [valid.text(i) for i in range(len(valid))]
    for i in range(min(cfg.train.valid_examples, len(refs))):
        log(f"  reference  {refs[i]}\n           hypothesis {hyps[i]}")
    scores = mt.word_error_rate(hyps, refs)
    return {"wer": scores["wer"], "string_accuracy": scores["string_accuracy"]}


TASK = SpeechTask()
