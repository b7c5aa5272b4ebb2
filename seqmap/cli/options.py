"""Options several commands share: ``--threads``, which commands take ``--decode.KEY VALUE`` overrides, and the
one-line error that names the option a stray argument misspells."""

from __future__ import annotations

import argparse

from seqmap.cli.errors import UserError


def threads(n: int | None) -> int:
    """Set torch's CPU threads to ``n`` (``--threads``; None: torch's choice); return the number in use."""
    import torch

    if n is not None:
        if n <= 0:
            raise UserError(f"--threads must be > 0, got {n}")
        torch.set_num_threads(n)
    return torch.get_num_threads()


DECODE_OVERRIDES = ("translate", "evaluate", "generate", "transcribe")  # verbs --decode.key reaches (train: all)


def unrecognized(verb: argparse.ArgumentParser, command: str, stray: list[str]) -> None:
    """Exit 2 with the usage of ``command``'s parser ``verb`` (not the top level's), naming the stray arguments and,
    when one is close, the option the first unknown one misspells (``--beam``: ``--decode.beam_size``)."""
    import difflib
    from dataclasses import fields
    from typing import get_type_hints

    from seqmap.config import RunConfig

    names = {opt.lstrip("-").replace("-", "_"): opt for action in verb._actions for opt in action.option_strings
             if opt.startswith("--")}
    section_types = get_type_hints(RunConfig)  # model -> ModelConfig, ...
    sections = list(section_types) if command == "train" else ["decode"] if command in DECODE_OVERRIDES else []
    for section in sections:
        for option in fields(section_types[section]):
            names.setdefault(option.name, f"--{section}.{option.name}")
    unknown = next((tok.split("=", 1)[0] for tok in stray if tok.startswith("--")), None)
    near = difflib.get_close_matches(unknown.lstrip("-").replace("-", "_"), names, n=1) if unknown else []
    verb.error(f"unrecognized arguments: {' '.join(stray)}" + (f"; did you mean {names[near[0]]}?" if near else ""))
