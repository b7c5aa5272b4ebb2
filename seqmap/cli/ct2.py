"""``--ct2 DIR`` of translate, evaluate and generate: decode with the run's CTranslate2 export (``seqmap.hub.ct2``)."""

from __future__ import annotations

import argparse

from seqmap.cli.errors import UserError


def ct2_decoder(run, args: argparse.Namespace, decode):
    """``--ct2 DIR`` of translate and evaluate: (source ids, n_best) -> per source its n-best ``Scored`` id lists
    (scored when n_best > 1), decoded by the run's CTranslate2 export (``seqmap.hub.ct2``) with torch's thread
    count; ``--quantize int8`` runs the export in int8; an empty source is not decoded (its output is empty).
    A directory that holds another run's export is refused."""
    import torch

    from seqmap.decoding.text import skip_empty
    from seqmap.hub import HubError
    from seqmap.hub.ct2 import open_export, translate_ct2_nbest

    if run.cfg.model.family != "transformer":
        raise UserError(f"--ct2 decodes Transformer runs; {args.run_dir} is model.family={run.cfg.model.family}")
    try:
        translator = open_export(args.ct2, run, threads=torch.get_num_threads(), int8=args.quantize == "int8")
    except HubError as e:
        raise UserError(str(e)) from None

    def decode_nbest(sources: list[list[int]], n_best: int = 1):
        try:
            return skip_empty(sources, lambda rows: translate_ct2_nbest(
                translator, run.src_tok, run.tgt_tok, rows, decode, n_best=n_best, scores=n_best > 1), n_best > 1)
        except HubError as e:
            raise UserError(str(e)) from None

    return decode_nbest


def ct2_generate(run, args: argparse.Namespace, decode, prompts: list[list[int]], sample: bool):
    """``seqmap generate --ct2 DIR``: per prompt (ids) its continuation (ids) by the LM's CTranslate2 export,
    greedy (seqmap's outputs), beam or sampled (CTranslate2's random numbers, seeded by ``--seed``)."""
    import torch

    from seqmap.hub import HubError
    from seqmap.hub.ct2 import export_positions, generate_ct2_nbest, open_export

    if run.cfg.model.family != "lm":
        raise UserError(f"--ct2 generates with decoder-only Transformer LMs; {args.run_dir} is "
                        f"model.family={run.cfg.model.family}: leave out --ct2")
    try:
        generator = open_export(args.ct2, run, threads=torch.get_num_threads(), int8=args.quantize == "int8",
                                seed=args.seed)
        nbest = generate_ct2_nbest(generator, run.tgt_tok, prompts, decode, sample=sample,
                                   positions=export_positions(run))
    except HubError as e:
        raise UserError(str(e)) from None
    return [entries[0].output for entries in nbest]


def refuse_with_ct2(args: argparse.Namespace, options: dict[str, bool]) -> None:
    """With ``--ct2``: one line for the first option given (name -> given) that decoding with it does not offer."""
    if args.ct2 is None:
        return
    for option, given in options.items():
        if given:
            raise UserError(f"{option} is not available with --ct2; leave out --ct2 to decode with seqmap")
