"""``seqmap evaluate RUN_DIR [--src FILE --ref FILE]``: BLEU, chrF, TER, ROUGE (+ summary baselines), perplexity.
Without --src and --ref a translation run is scored on its own test split (``--split``), as training scored it."""

from __future__ import annotations

import argparse
from pathlib import Path

from seqmap.cli.ct2 import ct2_decoder, refuse_with_ct2
from seqmap.cli.errors import UserError
from seqmap.cli.evaluate_lm import evaluate_lm
from seqmap.cli.evaluate_tasks import check_out, evaluate_task, refuse_other_tasks_options
from seqmap.cli.trained_run import decode_config, load, note_where_trained, run_parser
from seqmap.tasks.registry import TASKS


def add_parser(commands) -> None:
    evaluate = run_parser(
        commands, "evaluate", "score a trained run on a test set (sacreBLEU BLEU, chrF, TER, perplexity)",
        "Translate --src, score against --ref with sacreBLEU (BLEU tokenizer chosen by the target\n"
        "language: zh for Chinese, 13a otherwise) and report the reference perplexity. Without\n"
        "--src and --ref: the run's own test split (--split), as training scored it.",
        "examples:\n  seqmap evaluate runs/de-en --src data/multi30k/test2016.de --ref data/multi30k/test2016.en\n"
        "  seqmap evaluate runs/en-zh   (a translation run: its own test split; e.g. --quantize int8 beside it)\n"
        "  seqmap evaluate runs/sections --data test.tsv --confusion confusion.png\n"
        "  seqmap evaluate runs/cora-gat --confusion confusion.png   (a graph run: its test nodes)\n"
        "  seqmap evaluate runs/fsdd_digits   (a speech run: its test utterances, WER per speaker)")
    evaluate.add_argument("--src", help="source sentences, one per line (a translation run without --src and --ref: "
                                        "its own --split, as training scored its test split)")
    evaluate.add_argument("--ref", help="reference translations, aligned with --src")
    evaluate.add_argument("--data", help="a classifier: a TSV of text<TAB>label rows (the columns of data.src_column "
                                         "and data.tgt_column); an image classifier: an .npz or a folder of class "
                                         "sub-folders; a graph run: the graph .npz (default: its data.train); a speech "
                                         "run: an .npz of recordings or a TSV of WAV paths and transcripts (its test "
                                         "recordings, joined as the run's data.join says; default: its test split)")
    evaluate.add_argument("--split", choices=("train", "val", "test"), default="test",
                          help="a graph run: the nodes to score; a translation run without --src/--ref: the "
                               "pairs of its config's data to score (default: test)")
    evaluate.add_argument("--confusion", help="a classifier: also draw the confusion matrix here (.png or .svg)")
    evaluate.add_argument("--no-baseline", action="store_true",
                          help="a classifier: skip the TF-IDF + logistic regression baseline (fitted on the run's "
                               "training rows, scored on the same --data rows)")
    evaluate.add_argument("--lead", nargs="?", type=int, const=0, metavar="WORDS", help="summaries: also score the "
                          "lead baseline (each document's first sentence, cut to WORDS words; default: the median "
                          "word count of the run's training targets) on the same documents")
    evaluate.add_argument("--baseline-run", metavar="RUN_DIR", help="summaries: also decode and score another run "
                          "(e.g. without copying) on the same --src/--ref, in one table")
    evaluate.add_argument("--out", help="where to write the hypotheses (default: RUN_DIR/eval/SRC.hyp)")
    evaluate.add_argument("--nbest", type=int, default=1, help="also write N-best lists to OUT.nbest")
    evaluate.add_argument("--tokenize", help="sacreBLEU tokenizer (default: zh for Chinese targets, else 13a)")
    evaluate.add_argument("--tok-ref", metavar="TOK_REF",
                          help="also report BLEU on Moses-tokenized lowercased text against this reference "
                               "(e.g. Multi30k's test2016.lc.norm.tok.en), as most Multi30k papers do")
    evaluate.add_argument("--compare", metavar="OTHER_HYPS",
                          help="paired bootstrap significance test against another system's hypotheses")
    evaluate.add_argument("--ct2", metavar="DIR",
                          help="a translation run: decode with this CTranslate2 export of it (seqmap export ct2); "
                               "--quantize int8 runs it in int8")
    evaluate.set_defaults(handler=cmd_evaluate)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from seqmap.data.corpus import read_lines
    from seqmap.evaluation import evaluate_files, evaluate_pairs, hypotheses_path, rouge_line
    from seqmap.tasks.translation import split_texts

    run = load(args)
    note_where_trained(run)
    refuse_other_tasks_options(run, args)
    if (task := TASKS[run.cfg.data.task]).name != "translation":  # an LM: loss and perplexity of a text
        return evaluate_lm(run, args) if task.windows else evaluate_task(run, args)
    if (args.src is None) != (args.ref is None):
        raise UserError("give --src FILE and --ref FILE together, or neither to score the run's own --split "
                        "(default: test)")
    if args.src is not None and args.split != "test":
        raise UserError(f"--split {args.split} scores the run's own data; leave it out with --src and --ref")
    if args.src is None and (args.lead is not None or args.baseline_run is not None):
        raise UserError(f"{'--lead' if args.lead is not None else '--baseline-run'} scores the documents of "
                        "--src FILE against --ref FILE; give both")
    out = Path(args.out) if args.out else hypotheses_path(run, args.src or args.split)
    check_out(out)
    decode = decode_config(run, args)
    refuse_with_ct2(args, {"--baseline-run": args.baseline_run is not None})
    summarize = args.lead is not None or args.baseline_run is not None
    baselines = _baselines(run, args, out) if summarize else None  # their mistakes found before decoding
    translate = None if args.ct2 is None else ct2_decoder(run, args, decode)
    options = dict(n_best=args.nbest, tokenize=args.tokenize, compare_with=args.compare, translate=translate)
    try:
        if args.src is not None:
            result = evaluate_files(run, args.src, args.ref, decode, out, tok_ref=args.tok_ref, **options)
        else:  # the run's own split; a DataError (a ValueError) when its config names none or its files are gone
            sources, refs = split_texts(run, args.split)
            tok_refs = None if args.tok_ref is None else read_lines(args.tok_ref, "--tok-ref")
            result = evaluate_pairs(run, sources, refs, decode, out, tok_refs=tok_refs, **options)
    except ValueError as e:  # a bad --tokenize, --nbest beyond the beam, hypotheses of another length
        raise UserError(str(e)) from None
    print(f"BLEU = {result['bleu']:.2f}   {result['bleu_signature']}")
    print(f"chrF = {result['chrf']:.2f}   {result['chrf_signature']}")
    print(f"TER  = {result['ter']:.2f}   {result['ter_signature']}")
    if "rougeL" in result:
        print(rouge_line(result))
    if "bleu_lc_tok" in result:
        print(f"BLEU (tokenized, lowercased) = {result['bleu_lc_tok']:.2f}   {result['bleu_lc_tok_signature']}")
    print(f"reference perplexity = {result['ppl']:.2f}")
    print(f"{result['sentences']} hypotheses written to {out}")
    if "nbest_file" in result:
        print(f"{args.nbest}-best lists written to {result['nbest_file']}")
    if "compare" in result:
        c = result["compare"]
        print(f"paired bootstrap against {args.compare}: BLEU {c['bleu']:.2f} vs {c['other_bleu']:.2f}, "
              f"p = {c['p_value']:.4f}   {c['signature']}")
    if baselines is not None:
        _print_baselines(run, args, result, *baselines)
    return 0


def _baselines(run, args: argparse.Namespace, out: Path) -> tuple:
    """Before decoding, for --lead / --baseline-run: every document is there, ROUGE reads the target language,
    the lead's length (WORDS, or the training targets' median), the other run with its decode config, and where
    its hypotheses go: beside --out's (OUT_STEM.baseline.hyp) when --out is given, else in its own eval folder."""
    from seqmap.data.corpus import read_lines
    from seqmap.evaluation import check_documents, check_summary_options, hypotheses_path
    from seqmap.tasks.translation import median_target_words

    try:
        check_summary_options(run, args.lead)
        check_documents(read_lines(args.src, "--src"))
        words = None if args.lead is None else args.lead or median_target_words(run.cfg.data)
    except (OSError, ValueError) as e:  # no ROUGE for the language, --lead below 0, unreadable data.train
        raise UserError(str(e)) from None
    if args.baseline_run is None:
        return words, None, None, None
    other = load(argparse.Namespace(**{**vars(args), "run_dir": args.baseline_run}), task="translation")
    other_out = out.with_name(f"{out.stem}.baseline{out.suffix}") if args.out else hypotheses_path(other, args.src)
    check_out(other_out, "baseline run's hypotheses")
    return words, other, decode_config(other, args), other_out


def _print_baselines(run, args: argparse.Namespace, result: dict, words, other, other_decode, other_out) -> None:
    """The lead baseline and/or another run on the same documents, in one table with this run."""
    from seqmap.evaluation import summary_baselines, summary_table

    try:
        rows = summary_baselines(run, args.src, args.ref, result, lead_words=words, other=other,
                                 other_decode=other_decode, other_out=other_out)
    except (OSError, ValueError) as e:  # the other run's decoding options
        raise UserError(str(e)) from None
    print(f"the same {result['sentences']} documents ({result['rouge_signature']}):", *summary_table(rows), sep="\n")
    if other_out is not None:
        print(f"the baseline run's hypotheses written to {other_out}")
