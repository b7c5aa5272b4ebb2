"""``seqmap evaluate`` for the runs that are not translation: classifiers (text, images), graphs, speech."""

from __future__ import annotations

import argparse
from pathlib import Path

from seqmap.cli.errors import UserError
from seqmap.cli.trained_run import decode_config
from seqmap.tasks.registry import TASKS

OPTIONS = {"src": "--src", "ref": "--ref", "nbest": "--nbest", "tokenize": "--tokenize", "tok_ref": "--tok-ref",
           "compare": "--compare", "lead": "--lead", "baseline_run": "--baseline-run", "out": "--out",
           "data": "--data", "split": "--split", "confusion": "--confusion", "no_baseline": "--no-baseline",
           "ct2": "--ct2"}  # evaluate's options, by the names the registry's ``evaluate_reads`` uses
DEFAULTS = {"nbest": 1, "split": "test", "no_baseline": False}


def refuse_other_tasks_options(run, args: argparse.Namespace) -> None:
    """One line for the first option given that the evaluation of this run's ``data.task`` would ignore (a
    ``--confusion`` for a translation run drew nothing, a ``--src`` for a classifier read nothing)."""
    task = TASKS[run.cfg.data.task]
    given = [(name, flag) for name, flag in OPTIONS.items()
             if getattr(args, name, None) not in (None, DEFAULTS.get(name))]
    if args.overrides:
        given.append(("decode", args.overrides[0].split("=")[0]))
    for name, flag in given:
        if name not in task.evaluate_reads:
            readers = [info.many for info in TASKS.values() if name in info.evaluate_reads]
            readers = " and ".join([", ".join(readers[:-1]), readers[-1]] if len(readers) > 1 else readers)
            raise UserError(f"{flag} is for {readers}; {args.run_dir} is {task.one}: leave out {flag}")


def evaluate_task(run, args: argparse.Namespace) -> int:
    """Score a classifier, image classifier, graph or speech run as its ``data.task`` says; print the result."""
    evaluate = {"audio": _evaluate_speech, "graph": _evaluate_graph}.get(TASKS[run.cfg.data.task].input,
                                                                        _evaluate_classifier)
    return evaluate(run, args)


def _has_training_rows(d) -> bool:
    """Whether the run names its training data (an imported classifier does not: no baseline to fit then)."""
    return any(x is not None for x in (d.train, d.train_src, d.dataset))


def _evaluate_classifier(run, args: argparse.Namespace) -> int:
    from seqmap.evaluation import evaluate_classifier, evaluate_images

    images = TASKS[run.cfg.data.task].input == "image"
    if args.data is None:
        what = "PATH (an .npz, or a folder of class sub-folders)" if images else "FILE (a TSV of text<TAB>label)"
        raise UserError(f"{args.run_dir} is {'an image' if images else 'a'} classifier: evaluate it on --data {what}")
    from seqmap.evaluation import comparison_table
    from seqmap.models.tfidf import MissingBaselineDependency
    from seqmap.tasks.classification import classification_train_rows

    d = run.cfg.data
    try:
        baseline = (classification_train_rows(d) if not images and not args.no_baseline and _has_training_rows(d)
                    else None)
        result = (evaluate_images(run, args.data, batch_size=run.cfg.train.batch_size) if images else
                  evaluate_classifier(run, args.data, text_column=d.src_column, label_column=d.tgt_column,
                                      max_tokens=run.cfg.train.max_tokens, baseline=baseline))
    except MissingBaselineDependency as e:
        raise UserError(f"{e} (or pass --no-baseline)") from None
    except ValueError as e:  # a label outside the classes, a malformed row, an empty file, a missing data.train
        raise UserError(str(e)) from None
    print(f"accuracy = {result['accuracy']:.2f}   macro-F1 = {result['macro_f1']:.2f}   loss = {result['loss']:.4f}"
          f"   ({result['examples']} examples, {len(run.labels)} classes)")
    if "baseline" in result:
        print(f"the same {result['examples']} rows (baseline fitted on {d.train}):")
        print("\n".join(comparison_table(result, result["baseline"])))
    if args.confusion:
        from seqmap.visualize import plot_confusion

        plot_confusion(result["confusion"], run.labels.names, args.confusion,
                       title=f"{Path(args.data).name}: accuracy {result['accuracy']:.1f}%")
        print(f"confusion matrix written to {args.confusion}")
    return 0


def _evaluate_graph(run, args: argparse.Namespace) -> int:
    from seqmap.evaluation import evaluate_graph

    data = load_run_graph(run, args.data)
    try:
        result = evaluate_graph(run, data, args.split)
    except ValueError as e:  # another graph's sizes, an empty split
        raise UserError(str(e)) from None
    print(f"accuracy = {result['accuracy']:.2f}   macro-F1 = {result['macro_f1']:.2f}   loss = {result['loss']:.4f}"
          f"   ({result['examples']} {args.split} nodes of {data.graph.name}, {data.graph.num_classes} classes)")
    if args.confusion:
        from seqmap.visualize import plot_confusion

        plot_confusion(result["confusion"], data.class_names, args.confusion,
                       title=f"{data.graph.name} {args.split} nodes: accuracy {result['accuracy']:.1f}%")
        print(f"confusion matrix written to {args.confusion}")
    return 0


def _evaluate_speech(run, args: argparse.Namespace) -> int:
    from seqmap.speech_evaluation import evaluate_utterances, result_lines
    from seqmap.tasks.speech import test_utterances

    utterances = test_utterances(run, args.data)
    if utterances is None:
        raise UserError(f"{args.run_dir} names no test recordings; give them with --data FILE (.npz or .tsv)")
    out = Path(args.out) if args.out else run.checkpoint.parent.parent / "eval" / "test.hyp"
    check_out(out, "transcripts")  # before decoding: a folder given as --out ended it in a traceback
    result = evaluate_utterances(run, utterances, decode_config(run, args), out=out)
    print("\n".join([*result_lines(result, tuple(run.cfg.data.exclude_speakers)),
                     f"transcripts (reference, hypothesis, speaker) written to {out}"]))
    return 0


def check_out(out: Path, what: str = "hypotheses") -> None:
    """Before decoding: the output file's folder exists (or is made) and the path is not a folder."""
    if out.is_dir():
        raise UserError(f"--out {out} is a directory; give a file path, e.g. --out {out / 'test.hyp'}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot write the {what} to {out} ({e.strerror}: {e.filename}); give --out a path "
                        "in a writable folder") from None


def load_run_graph(run, path: str | None = None):
    """The graph of a graph run (``GraphData``): ``path`` (``--data``), else the run's ``data.train``."""
    import dataclasses

    from seqmap.data.graphs import GraphError
    from seqmap.tasks.graph import load_graph

    data_cfg = run.cfg.data if path is None else dataclasses.replace(run.cfg.data, train=path)
    try:
        return load_graph(data_cfg, run.checkpoint, log=lambda _: None)
    except GraphError as e:
        hint = "" if path is not None else " (or give the graph with --data GRAPH.npz)"
        raise UserError(f"{e}{hint}") from None
