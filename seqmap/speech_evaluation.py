"""Evaluate a speech recognition run: transcribe utterances, score word (digit) error rate and string accuracy.

Scores come per speaker as well as overall, so a run trained with ``data.exclude_speakers`` reports the
speaker it never heard on its own row. Transcripts go to a file, one line per utterance:
``reference<TAB>hypothesis<TAB>speaker``.
"""

from __future__ import annotations

from pathlib import Path

from seqmap import metrics as mt
from seqmap.config import DecodeConfig
from seqmap.data.audio import Utterances
from seqmap.decoding.speech import transcribe
from seqmap.runs import LoadedRun


def evaluate_utterances(run: LoadedRun, utterances: Utterances, decode: DecodeConfig | None = None, *,
                        out: str | Path | None = None) -> dict:
    """WER, string accuracy and their counts overall and per speaker (``"speakers"``), decoding as ``decode``
    (default: the run's decode config) says."""
    if utterances.sample_rate != run.model.frontend.sample_rate:
        raise ValueError(f"the utterances are at {utterances.sample_rate} Hz but the model reads "
                         f"{run.model.frontend.sample_rate} Hz; resample them (seqmap.data.audio.read_recordings)")
    decode = decode or run.cfg.decode
    n = len(utterances)
    hyps = transcribe(run.model, run.tgt_tok, [utterances.wave(i) for i in range(n)], decode, device=run.device)
    refs = [utterances.text(i) for i in range(n)]
    speakers = [utterances.speaker(i) for i in range(n)]
    result = mt.word_error_rate(hyps, refs) | {"utterances": n, "beam_size": decode.beam_size}
    result["speakers"] = {
        who: mt.word_error_rate([h for h, s in zip(hyps, speakers) if s == who],
                                [r for r, s in zip(refs, speakers) if s == who])
        for who in sorted(set(speakers))}
    if out is not None:
        Path(out).write_text("".join(f"{r}\t{h}\t{s}\n" for r, h, s in zip(refs, hyps, speakers)), encoding="utf-8")
    return result


def result_lines(result: dict, unseen: tuple[str, ...] = ()) -> list[str]:
    """``evaluate_utterances``' result as text: WER, string accuracy, then the per-speaker table."""
    return [f"WER = {result['wer']:.2f}   ({result['errors']} errors in {result['words']} words; beam "
            f"{result['beam_size']})",
            f"string accuracy = {result['string_accuracy']:.2f}   ({result['utterances']} utterances)",
            *speaker_table(result, unseen)]


def speaker_table(result: dict, unseen: tuple[str, ...] = ()) -> list[str]:
    """The per-speaker rows of ``evaluate_utterances``' result as aligned text lines (unseen speakers marked)."""
    lines = [f"  {'speaker':<12} {'WER':>6} {'strings':>8} {'words':>6}"]
    for who, s in result["speakers"].items():
        mark = "  (not in training)" if who in unseen else ""
        lines.append(f"  {who:<12} {s['wer']:6.2f} {s['string_accuracy']:7.2f}% {s['words']:6d}{mark}")
    lines.append(f"  {'all':<12} {result['wer']:6.2f} {result['string_accuracy']:7.2f}% {result['words']:6d}")
    return lines

