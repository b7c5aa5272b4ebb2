"""A command on a trained run: its options (RUN_DIR, --checkpoint, --device, --threads, --quantize, --precision),
opening the run they name, refusing a run of another task, saying when it was trained elsewhere, and the run's
decode config with ``--decode.KEY VALUE`` overrides."""

from __future__ import annotations

import argparse

from seqmap.cli.errors import UserError
from seqmap.cli.options import threads


def run_parser(commands, name: str, help_: str, description: str, epilog: str) -> argparse.ArgumentParser:
    """A subcommand on a trained run: RUN_DIR, --checkpoint, --device, --threads."""
    p = commands.add_parser(name, allow_abbrev=False, help=help_, description=description, epilog=epilog,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (or one checkpoint directory)")
    p.add_argument("--checkpoint", default="best", help="best (default), last, or a checkpoint directory")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    p.add_argument("--quantize", default="none", help="none (default) or int8: Linear layers in int8 (CPU only)")
    p.add_argument("--precision", default="fp32", help="fp32 (default), bf16 or fp16: decode with 16-bit weights "
                   "(with --device cuda; translation and language-model runs)")
    return p


def load(args: argparse.Namespace, task: str | tuple[str, ...] | None = None):
    """The trained run that ``run_parser``'s options name; ``task``: the ``data.task`` (or tasks) the command takes."""
    from seqmap.runs import load_run
    from seqmap.tasks.registry import TASKS

    threads(getattr(args, "threads", None))
    if getattr(args, "ct2", None) is not None:  # before loading, which would refuse 16 bits on the CPU otherwise
        from seqmap.hub import HubError
        from seqmap.hub.ct2 import refuse_gpu_options

        try:
            refuse_gpu_options(args.device, getattr(args, "precision", None))
        except HubError as e:
            raise UserError(str(e)) from None
    run = load_run(args.run_dir, args.checkpoint, args.device, quantize=getattr(args, "quantize", None),
                   precision=getattr(args, "precision", None))
    tasks = (task,) if isinstance(task, str) else task
    if tasks is not None and run.cfg.data.task not in tasks:
        raise UserError(f"{args.run_dir} was trained for data.task={run.cfg.data.task}, not {' or '.join(tasks)}; "
                        f"use `{TASKS[run.cfg.data.task].use}` on it")
    return run


def refuse_unless(args: argparse.Namespace, run, verb: str) -> None:
    """A ``UserError`` ("RUN_DIR is a classifier; use `seqmap classify` instead") when ``seqmap VERB`` does not
    take the run's task (the registry's ``verbs`` and ``refusal``)."""
    from seqmap.tasks.registry import TASKS

    info = TASKS[run.cfg.data.task]
    if verb not in info.verbs:
        raise UserError(f"{args.run_dir} is {info.refusal}")


def note_where_trained(run) -> None:
    """One line on stderr when ``run`` was trained on another CPU kind, kernels, torch or device than this machine
    (its scores may differ in the last digits), or when its provenance file is damaged (``seqmap.provenance``)."""
    import sys

    from seqmap.provenance import evaluation_note

    note = evaluation_note(run.checkpoint, run.device)
    if note is not None:
        print(f"seqmap: {note}", file=sys.stderr)


def decode_config(run, args: argparse.Namespace):
    """The run's decode config with ``--decode.KEY VALUE`` overrides; other sections cannot change here."""
    from seqmap.config import DecodeConfig, apply_overrides, from_dict, to_dict

    overrides = apply_overrides({}, args.overrides)
    other = [key for key in overrides if key != "decode"]
    if other:
        raise UserError(f"only --decode.* options can be overridden here, got --{other[0]}.*")
    values = {**to_dict(run.cfg.decode), **overrides.get("decode", {})}
    decode = from_dict(DecodeConfig, values, "decode")
    vocab = run.cfg.model.tgt_vocab
    if vocab and decode.beam_size > vocab:  # the first step has only V candidates to fill the beam with
        raise UserError(f"decode.beam_size={decode.beam_size} is larger than the target vocabulary ({vocab} "
                        f"tokens); give --decode.beam_size {vocab} or less")
    return decode
