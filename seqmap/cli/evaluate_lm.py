"""``seqmap evaluate`` on a language model: loss and perplexity of a text file or of the run's own split."""

from __future__ import annotations

import argparse

from seqmap.cli.errors import UserError


def evaluate_lm(run, args: argparse.Namespace) -> int:
    """A language model: loss and perplexity of --data TEXT_FILE, or of its own --split (default: test)."""
    from seqmap.data.corpus import DataError
    from seqmap.evaluation import lm_scores
    from seqmap.tasks.lm import lm_stream, lm_text
    from seqmap.training.validate import eval_context

    if args.data is not None and args.split != "test":
        raise UserError(f"--split {args.split} scores the run's own text; leave it out with --data")
    try:
        text, where = lm_text(run, args.data, args.split)
        result = lm_scores(run.model, lm_stream(text, run.tgt_tok), run.cfg, run.device)
    except DataError as e:
        raise UserError(str(e)) from None
    print(f"loss = {result['loss']:.4f}   perplexity = {result['ppl']:.2f}   ({result['tokens']} tokens of {where}, "
          f"windows of {eval_context(run.cfg.data)})")
    return 0
