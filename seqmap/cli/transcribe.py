"""``seqmap transcribe RUN_DIR AUDIO ... [--input LIST]``: the transcript of each audio file, by a speech run."""

from __future__ import annotations

import argparse

from seqmap.cli.errors import UserError
from seqmap.cli.trained_run import decode_config, load, run_parser


def add_parser(commands) -> None:
    transcribe = run_parser(
        commands, "transcribe", "the transcript of each audio file, by a trained speech model",
        "Print one line per file: the file name, a tab, and its transcript.\n"
        "Files are WAV (or FLAC, OGG: anything libsndfile reads). Stereo is mixed down to mono and\n"
        "another sample rate is resampled to the model's (soxr). Decoding follows the run's decode\n"
        "config; change it with --decode.KEY VALUE (e.g. --decode.beam_size 1).",
        "examples:\n  seqmap transcribe runs/fsdd_digits digits.wav\n"
        "  seqmap transcribe runs/fsdd_digits --input files.txt --decode.beam_size 1")
    transcribe.add_argument("audio", nargs="*", metavar="AUDIO", help="audio files to transcribe")
    transcribe.add_argument("--input", help="a file listing audio files, one path per line")
    transcribe.set_defaults(handler=cmd_transcribe)


def cmd_transcribe(args: argparse.Namespace) -> int:
    import torch

    from seqmap.data.audio import read_wav
    from seqmap.data.corpus import read_lines
    from seqmap.decoding.speech import transcribe

    if args.audio and args.input:
        raise UserError("give audio files as arguments or --input LIST, not both")
    paths = read_lines(args.input, "--input") if args.input else args.audio
    if not paths:
        raise UserError("nothing to transcribe: give AUDIO files, or --input LIST (one path per line)")
    for number, path in enumerate(paths, start=1):
        if not path.strip():  # Path("") is ".", which would read as "a directory"
            raise UserError(f"--input {args.input}: line {number} is empty; give one audio path per line"
                            if args.input else "an AUDIO argument is empty; give the path of an audio file")
        try:
            path.encode("utf-8")  # soundfile opens paths as UTF-8
        except UnicodeEncodeError:
            raise UserError(f"audio path {path!r} is not valid UTF-8, which the audio reader needs; "
                            "rename the file") from None
    run = load(args, task="speech")
    decode = decode_config(run, args)
    rate = run.model.frontend.sample_rate
    waves = [read_wav(p, rate)[0] for p in paths]
    for path, wave in zip(paths, waves):
        if run.model.frontend.frame_lengths(torch.tensor(len(wave))) < 1:
            raise UserError(f"{path} is too short ({len(wave) / rate:.3f} s) for one encoder frame; give at least "
                            f"{run.model.frontend.min_samples / rate:.3f} s of audio")
    for path, text in zip(paths, transcribe(run.model, run.tgt_tok, waves, decode, device=run.device)):
        print(f"{path}\t{text}")
    return 0
