"""``seqmap import hf SOURCE --out RUN_DIR``, ``seqmap export hf|ct2 RUN_DIR --out DIR``: the Hugging Face format
and CTranslate2."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from seqmap.cli.errors import UserError


def add_parser(commands) -> None:
    p = commands.add_parser(
        "import", allow_abbrev=False, help="import a pretrained model (Hugging Face format) as a run directory",
        description="hf SOURCE: a directory written by transformers' save_pretrained (config.json,\n"
                    "model.safetensors, tokenizer.json), or a Hub name where the Hub can be reached.\n"
                    "Imports MarianMTModel (OPUS-MT), T5ForConditionalGeneration (T5, Flan-T5, mT5),\n"
                    "GPT2LMHeadModel, BertForSequenceClassification / BertModel and\n"
                    "ViTForImageClassification. The result opens with every verb, like a trained run;\n"
                    "beam search ranks as transformers' generate (decode.beam_ranking: hf).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  seqmap import hf ~/models/gpt2 --out runs/gpt2\n"
               "  seqmap generate runs/gpt2 --prompt \"Hello, I'm a language model,\" --greedy\n"
               "  seqmap import hf ~/models/t5-small --out runs/t5-small\n"
               "  seqmap translate runs/t5-small \"summarize: $(cat article.txt)\"\n"
               "  seqmap import hf ~/models/bert-sst2 --out runs/bert-sst2\n"
               "  seqmap classify runs/bert-sst2 \"a gripping, funny film\"")
    p.add_argument("format", choices=["hf"], help="the format of SOURCE (hf: Hugging Face transformers)")
    p.add_argument("source", metavar="SOURCE", help="a save_pretrained directory, or a Hub name")
    p.add_argument("--out", required=True, help="the run directory to write")
    p.set_defaults(handler=cmd_import)
    e = commands.add_parser(
        "export", allow_abbrev=False, help="export a run in the Hugging Face format or for CTranslate2",
        description="hf RUN_DIR --out DIR: a decoder-only language model (family lm with learned positions,\n"
                    "pre-LN, unscaled embeddings) as a GPT-2 directory (GPT2LMHeadModel.from_pretrained),\n"
                    "an encoder-decoder Transformer (post-LN, split sinusoidal positions, one shared\n"
                    "vocabulary) as a MarianMT directory (MarianMTModel.from_pretrained), one with T5's\n"
                    "relative positions (an imported T5) as a T5 directory; the tokenizer as it was\n"
                    "imported, or as tokenizer.json where it converts.\n"
                    "ct2 RUN_DIR --out DIR: a seqmap-trained Transformer or LM (or an imported MarianMT / GPT-2)\n"
                    "as a CTranslate2 model. --out must be a new or empty directory. Other families (rnn,\n"
                    "classifier, vit, gat, speech) have no exported form.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  seqmap export hf runs/gpt2-finetuned --out exported/gpt2-finetuned\n"
               "  seqmap export hf runs/opus-en-zh --out exported/opus-en-zh\n"
               "  seqmap export ct2 runs/opus-en-zh --out ct2/opus-en-zh --quantization int8")
    e.add_argument("format", choices=["hf", "ct2"], help="hf: Hugging Face transformers; ct2: CTranslate2 (a "
                                                          "seqmap-trained Transformer or LM directly, an imported "
                                                          "model through the hf export)")
    e.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (its best checkpoint) or a checkpoint")
    e.add_argument("--out", required=True, help="the directory to write")
    e.add_argument("--checkpoint", default="best", help="best (default), last, or a checkpoint directory")
    e.add_argument("--quantization", default=None, help="ct2: CTranslate2's weight quantization (int8, float16, ...)")
    e.set_defaults(handler=cmd_export)


def cmd_import(args: argparse.Namespace) -> int:
    from seqmap.data.tokenizer_base import TokenizerError
    from seqmap.hub import HubError, import_hf

    try:
        checkpoint = import_hf(args.source, args.out)
    except (HubError, TokenizerError) as e:
        raise UserError(str(e)) from None
    state = json.loads((checkpoint / "trainer.json").read_text(encoding="utf-8"))["trainer_state"]
    note = "; its classification head is untrained: fine-tune it with seqmap train CONFIG --init " \
           f"{Path(args.out)}" if state.get("untrained_head") else ""
    print(f"imported {args.source} into {Path(args.out)} ({checkpoint.name}{note})")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from seqmap.hub import HubError, export_hf
    from seqmap.hub.ct2 import export_ct2, writes_spec
    from seqmap.hub.export import exported_class
    from seqmap.runs import load_run

    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UserError(f"seqmap export {args.format} needs transformers: pip install -e \".[hf]\"") from None
    if args.quantization is not None and args.format != "ct2":
        raise UserError("--quantization is for seqmap export ct2")
    run = load_run(args.run_dir, args.checkpoint)
    try:
        out = export_hf(run, args.out) if args.format == "hf" else export_ct2(run, args.out, args.quantization)
    except HubError as e:
        raise UserError(str(e)) from None
    what = exported_class(run.cfg.model)
    if args.format == "ct2":
        if writes_spec(run):
            what = "Transformer" if run.cfg.model.family == "transformer" else "decoder-only Transformer"
        what += " for CTranslate2"
    print(f"exported {run.checkpoint} to {out} ({what})")
    return 0
