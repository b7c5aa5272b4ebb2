"""Evaluate a trained run on a test set: decode, score with sacreBLEU, measure reference perplexity, compare systems.

Decoding follows the run's decode config (greedy, or beam search with its
length penalty) unless another is given. BLEU, chrF and TER come from sacreBLEU
with their signatures; BLEU's tokenizer is chosen by the target language
(``zh`` for Chinese, ``13a`` otherwise) unless one is named (``intl``, ``char``,
...), so a score can be reproduced by anyone. Perplexity is exp(summed NLL of
the references / their tokens), from teacher forcing. ``compare`` runs
sacreBLEU's paired bootstrap resampling test (Koehn 2004) between this run's
hypotheses and another system's. ``evaluate_test_split`` is the last step of
``seqmap train``: the best checkpoint scored on the config's test split (for a classifier, beside a
TF-IDF + logistic regression baseline fitted on the same training rows, ``baseline_scores``).

n-best files hold one line per hypothesis, ``index ||| hypothesis ||| score``:
the 0-based sentence index, the detokenized text and the normalized score
(log-probability / GNMT length penalty) beam search ranked it by, best first
within a sentence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest

from seqmap import metrics as mt
from seqmap.config import DecodeConfig, RunConfig
from seqmap.data.corpus import DataError, read_lines, read_parallel, read_tsv
from seqmap.data.graphs import GraphData
from seqmap.data.images import read_split
from seqmap.data.labels import LabelSet
from seqmap.data.pipeline import Pairs, classification_ids, truncate_source
from seqmap.decoding.text import Scored, source_ids, translate_texts
from seqmap.models.lead import BASELINE_NAME as LEAD_NAME
from seqmap.models.lead import lead
from seqmap.models.tfidf import BASELINE_NAME, TfidfLogReg
from seqmap.runs import LoadedRun
from seqmap.training.validate import (
    classification_scores,
    classify_batches,
    classify_rows,
    eval_context,
    graph_metrics,
    image_batches,
    lm_batches,
    summed_nll,
    translation_batches,
)


def bleu_tokenizer(tgt_lang: str, tokenize: str | None = None) -> str:
    """The sacreBLEU tokenizer to use: ``tokenize`` if given, else the one for the target language."""
    if tokenize is None:
        return mt.tokenizer_for(tgt_lang)
    if tokenize not in BLEU.TOKENIZERS:
        raise ValueError(f"unknown BLEU tokenizer {tokenize!r}; sacreBLEU knows {sorted(BLEU.TOKENIZERS)}")
    return tokenize


def score(hyps: list[str], refs: list[str], tgt_lang: str, tokenize: str | None = None) -> dict:
    """BLEU, chrF and TER of hypotheses against references, with sacreBLEU signatures; ROUGE-1/2/L F1
    (``rouge1``, ``rouge2``, ``rougeL``, ``rouge_signature``) unless the target is Chinese (rouge-score
    reads Latin words only)."""
    bleu = mt.bleu(hyps, refs, tokenize=bleu_tokenizer(tgt_lang, tokenize))
    chrf, ter = mt.chrf(hyps, refs), mt.ter(hyps, refs, asian_support=mt.tokenizer_for(tgt_lang) == "zh")
    out = {"bleu": bleu.value, "chrf": chrf.value, "ter": ter.value, "bleu_signature": bleu.signature,
           "chrf_signature": chrf.signature, "ter_signature": ter.signature}
    if mt.tokenizer_for(tgt_lang) != "zh" and hyps:
        rouge = mt.rouge(hyps, refs)
        out.update({name: s.value for name, s in rouge.items()}, rouge_signature=rouge["rougeL"].signature)
    return out


def check_documents(sources: Sequence[str], where: str = "--src") -> None:
    """A summary needs a document: the first empty source is one ValueError naming its line."""
    for number, text in enumerate(sources, start=1):
        if not text.strip():
            raise ValueError(f"{where} line {number} is empty: there is no document to summarize; remove the line "
                             "(and its reference) or give the document's text")


def lead_scores(sources: Sequence[str], refs: Sequence[str], words: int, tgt_lang: str = "en") -> dict:
    """The lead baseline (``seqmap.models.lead``: first sentence, first ``words`` words) scored like a run."""
    check_documents(sources)
    hyps = [lead(s, words) for s in sources]
    return {"model": f"{LEAD_NAME} ({words} words)", **score(hyps, list(refs), tgt_lang), "hyps": hyps}


def _system_name(run: LoadedRun) -> str:
    return f"{run.checkpoint.parent.parent.name} ({'copy' if run.cfg.model.copy else 'no copy'})"


def check_summary_options(run: LoadedRun, lead_words: int | None) -> None:
    """Before decoding: the summary baselines (``--lead``, ``--baseline-run``) need ROUGE, which reads Latin-script
    targets, and the lead a length >= 0 (0: the training targets' median); a ValueError says which is amiss."""
    if mt.tokenizer_for(run.cfg.data.tgt_lang) == "zh":
        raise ValueError(f"ROUGE is not measured for target language {run.cfg.data.tgt_lang!r}; the summary "
                         "baselines (--lead, --baseline-run) need a Latin-script target")
    if lead_words is not None and lead_words < 0:
        raise ValueError(f"--lead WORDS must be > 0 (or left out: the training targets' median), got {lead_words}")


def hypotheses_path(run: LoadedRun, src: str | Path) -> Path:
    """Where a run's hypotheses for ``src`` go when no other path is given: RUN_DIR/eval/SRC_NAME.hyp."""
    return run.checkpoint.parent.parent / "eval" / (Path(src).name + ".hyp")


def summary_baselines(run: LoadedRun, src: str | Path, ref: str | Path, result: dict, *,
                      lead_words: int | None = None, other: LoadedRun | None = None,
                      other_decode: DecodeConfig | None = None,
                      other_out: str | Path | None = None) -> list[tuple[str, dict]]:
    """(name, scores) of ``run`` (its ``evaluate_files`` ``result``), the lead baseline and ``other`` (another
    run, e.g. without copying), all on the same documents.

    ``lead_words``: the lead's length in words (``seqmap.tasks.translation.median_target_words`` of the run's
    training targets is the usual one), None = no lead.
    ``other_out``: where the other run's hypotheses are written (default: its own ``hypotheses_path``).
    """
    check_summary_options(run, lead_words)
    rows = [(_system_name(run), result)]
    pairs = read_parallel(src, ref, "--src", "--ref")
    if lead_words is not None:
        scores = lead_scores([s for s, _ in pairs], [r for _, r in pairs], lead_words, run.cfg.data.tgt_lang)
        rows.append((scores["model"], scores))
    if other is not None:
        out = Path(other_out) if other_out is not None else hypotheses_path(other, src)
        rows.append((_system_name(other), evaluate_files(other, src, ref, other_decode, out)))
    return rows


def rouge_line(result: dict) -> str:
    """One line of a result's ROUGE-1/2/L and their signature."""
    return (f"ROUGE-1 = {result['rouge1']:.2f}   ROUGE-2 = {result['rouge2']:.2f}   ROUGE-L = {result['rougeL']:.2f}"
            f"   {result['rouge_signature']}")


def summary_table(rows: Sequence[tuple[str, dict]]) -> list[str]:
    """Lines of a small table: ROUGE-1/2/L and BLEU of systems scored on the same documents."""
    lines = [f"  {'':28s} {'ROUGE-1':>8s} {'ROUGE-2':>8s} {'ROUGE-L':>8s} {'BLEU':>7s}"]
    for name, r in rows:
        lines.append(f"  {name:28s} {r['rouge1']:8.2f} {r['rouge2']:8.2f} {r['rougeL']:8.2f} {r['bleu']:7.2f}")
    return lines


def compare(hyps: Sequence[str], other: Sequence[str], refs: Sequence[str], *, tokenize: str = "13a",
            samples: int = 1000) -> dict:
    """Paired bootstrap resampling test of BLEU, sacreBLEU's implementation, between ``hyps`` and ``other``.

    Returns the BLEU of both systems, the p-value of the difference (the share
    of resamples, out of ``samples``, whose difference is at least as large
    by chance: small means significant), and the signature (it records the
    seed, ``SACREBLEU_SEED``, 12345 unless set).
    """
    if not len(hyps) == len(other) == len(refs):
        raise ValueError(f"compare needs as many hypotheses ({len(hyps)}), other hypotheses ({len(other)}) and "
                         f"references ({len(refs)})")
    test = PairedTest([("this", list(hyps)), ("other", list(other))], {"BLEU": BLEU(tokenize=tokenize)},
                      [list(refs)], test_type="bs", n_samples=samples)
    signatures, results = test()
    this, that = results["BLEU"]
    return {"bleu": this.score, "other_bleu": that.score, "p_value": that.p_value,
            "signature": str(signatures["BLEU"])}


def write_nbest(path: Path, nbest: Sequence[Sequence[Scored]]) -> Path:
    """Write n-best lists as ``index ||| hypothesis ||| score`` lines (see the module docstring)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{i} ||| {entry.output} ||| {entry.normalized:.6f}\n" for i, entries in enumerate(nbest)
             for entry in entries]
    path.write_text("".join(lines), encoding="utf-8")
    return path


def reference_perplexity(run: LoadedRun, sources: list[str], refs: list[str], max_tokens: int) -> float:
    max_src = run.cfg.data.max_src_len
    pairs = [(truncate_source(run.src_tok.encode(s), max_src), run.tgt_tok.encode(r)) for s, r in zip(sources, refs)]
    nll, n = summed_nll(run.model, translation_batches(pairs, max_tokens), run.device)
    return mt.perplexity(nll, n)


def evaluate_pairs(run: LoadedRun, sources: list[str], refs: list[str], decode: DecodeConfig | None = None,
                   out: Path | None = None, *, n_best: int = 1, tokenize: str | None = None,
                   compare_with: str | Path | None = None, tok_refs: Sequence[str] | None = None,
                   translate: Callable[[list[list[int]], int], list[list[Scored]]] | None = None) -> dict:
    """Translate ``sources``, write the hypotheses to ``out`` (one per line), and score them.

    Args:
        decode: how to decode (default: the run's decode config).
        out: hypothesis file; with ``n_best > 1`` the n-best lists go beside it,
            to ``out`` + ``.nbest`` (the result's ``nbest_file``).
        n_best: hypotheses kept per sentence (needs ``decode.beam_size >= n_best``).
        tokenize: sacreBLEU's BLEU tokenizer (default: by the run's target language).
        compare_with: a file of another system's hypotheses, one per line: adds
            ``compare`` (both BLEU scores and the paired bootstrap p-value).
        tok_refs: the references Moses-tokenized and lowercased (Multi30k's ``*.lc.norm.tok.*``):
            adds ``bleu_lc_tok`` and its signature (see ``seqmap.metrics.bleu_lc_tok``).
        translate: another decoder of the run's model, (source ids, n_best) -> per source its n-best
            ``Scored`` id lists (its CTranslate2 export: ``seqmap evaluate --ct2``), in the place of
            ``translate_texts``.
    """
    decode = decode or run.cfg.decode
    refs = [run.tgt_tok.normalizer(r) for r in refs]  # as the training targets were (e.g. OpenCC t2s)
    if tok_refs is not None and len(tok_refs) != len(refs):
        raise ValueError(f"the tokenized references have {len(tok_refs)} lines but the references {len(refs)}; "
                         "give --tok-ref the same sentences, one per line")
    tokenize = bleu_tokenizer(run.cfg.data.tgt_lang, tokenize)
    other = None if compare_with is None else read_lines(compare_with, "--compare")
    if other is not None and len(other) != len(sources):  # found before decoding, not after
        raise ValueError(f"--compare {compare_with} has {len(other)} lines but there are {len(sources)} sources; "
                         "give the other system's hypotheses of the same sentences, one per line")
    if translate is not None:
        nbest = translate(source_ids(run.src_tok, sources, run.cfg.data.max_src_len), n_best)
        texts = [[e._replace(output=run.tgt_tok.decode(e.output)) for e in entries] for entries in nbest]
        translated = [entries[0].output for entries in texts] if n_best == 1 else texts
    else:
        translated = translate_texts(run.model, run.src_tok, run.tgt_tok, sources, decode, n_best=n_best,
                                     device=run.device, max_src_len=run.cfg.data.max_src_len, progress=True)
    hyps = translated if n_best == 1 else [entries[0].output for entries in translated]
    result = {}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        if n_best > 1:
            result["nbest_file"] = str(write_nbest(out.with_name(out.name + ".nbest"), translated))
    result.update(score(hyps, refs, run.cfg.data.tgt_lang, tokenize))
    if tok_refs is not None:
        lc_tok = mt.bleu_lc_tok(hyps, tok_refs, run.cfg.data.tgt_lang)
        result.update(bleu_lc_tok=lc_tok.value, bleu_lc_tok_signature=lc_tok.signature)
    result["ppl"] = reference_perplexity(run, sources, refs, decode.max_tokens)
    result["sentences"] = len(hyps)
    if other is not None:
        result["compare"] = compare(hyps, other, refs, tokenize=tokenize)
    return result


def evaluate_files(run: LoadedRun, src: str | Path, ref: str | Path, decode: DecodeConfig | None = None,
                   out: Path | None = None, *, n_best: int = 1, tokenize: str | None = None,
                   compare_with: str | Path | None = None, tok_ref: str | Path | None = None,
                   translate: Callable[[list[list[int]], int], list[list[Scored]]] | None = None) -> dict:
    pairs = read_parallel(src, ref, "--src", "--ref")
    tok_refs = None if tok_ref is None else read_lines(tok_ref, "--tok-ref")
    return evaluate_pairs(run, [s for s, _ in pairs], [r for _, r in pairs], decode, out, n_best=n_best,
                          tokenize=tokenize, compare_with=compare_with, tok_refs=tok_refs, translate=translate)


def lm_scores(model, stream: list[int], cfg: RunConfig, device) -> dict:
    """Loss (mean NLL per token) and perplexity of a language model over a token stream (``lm_stream``), in
    windows of ``data.eval_context`` (else ``data.context``) tokens, as validation and the test score them."""
    windows = lm_batches(stream, eval_context(cfg.data), cfg.train.batch_size)
    nll, n = summed_nll(model.eval(), windows, device)
    if n == 0:
        raise DataError("the text has no tokens to score; give a non-empty text file")
    return {"loss": nll / n, "ppl": mt.perplexity(nll, n), "tokens": n}


def evaluate_test_split(trainer) -> dict | None:
    """Score the best checkpoint of a finished training run on its test split, and log the result (its task's
    ``test``: ``seqmap.tasks``). None when the config names no test data. ``seqmap train`` passes this to
    ``seqmap.training.run_trainer.train``."""
    return trainer.task.test(trainer)


def baseline_scores(train: Pairs, test: Pairs, labels: LabelSet) -> dict:
    """Accuracy and macro-F1 (percent) of TF-IDF + logistic regression fitted on ``train`` and scored on ``test``.

    (text, label) rows, labels mapped to the classifier's classes by ``labels`` (rarer ones join
    ``other`` alike), scored with the functions that score the classifier. The baseline reads each
    text whole (the classifier its first ``data.max_len`` tokens). Raises ``MissingBaselineDependency``
    without scikit-learn.
    """
    baseline = TfidfLogReg().fit([t for t, _ in train], [labels.encode(label, "data.train") for _, label in train])
    predicted = baseline.predict([t for t, _ in test])
    gold = [labels.encode(label, "data.test") for _, label in test]
    return {"model": BASELINE_NAME, "accuracy": mt.accuracy(predicted, gold),
            "macro_f1": mt.macro_f1(predicted, gold, len(labels)), "examples": len(gold)}


def comparison_table(model: dict, baseline: dict | None, model_name: str = "classifier") -> list[str]:
    """Lines of a small table: accuracy and macro-F1 of the model and of the baseline on the same rows."""
    lines = [f"  {'':24s} {'accuracy':>9s} {'macro-F1':>9s}",
             f"  {model_name:24s} {model['accuracy']:9.2f} {model['macro_f1']:9.2f}"]
    if baseline is not None:
        lines.append(f"  {baseline['model']:24s} {baseline['accuracy']:9.2f} {baseline['macro_f1']:9.2f}")
    return lines


def evaluate_images(run: LoadedRun, path: str | Path, *, batch_size: int = 256) -> dict:
    """Accuracy, macro-F1, loss and the confusion matrix of an image classifier on an .npz or a folder of images.

    A folder's images are converted to the run's channels and resized to its image size; an .npz's arrays
    must have that shape already. A label outside the run's classes is an error naming it.
    """
    m = run.cfg.model
    images = read_split(path, "test", "--data", mode="L" if m.image_channels == 1 else "RGB",
                        size=(m.image_height, m.image_width))
    want = (m.image_channels, m.image_height, m.image_width)
    if images.shape != want:
        raise ValueError(f"{path}: images are {'x'.join(map(str, images.shape))} but the run reads "
                         f"{'x'.join(map(str, want))} (channels x height x width)")
    gold = [run.labels.encode(v, where=str(path)) for v in images.labels]
    predicted, nll_sum = classify_batches(run.model, image_batches(images.images, gold, batch_size), len(gold),
                                          run.device)
    result = classification_scores(predicted, gold, nll_sum, len(run.labels))
    result["confusion"] = mt.confusion_matrix(predicted, gold, len(run.labels))
    return result


def evaluate_graph(run: LoadedRun, data: GraphData, split: str = "test") -> dict:
    """Accuracy, macro-F1, loss and the confusion matrix of a graph run on one split's nodes (train, val, test).

    ``data`` is the graph the run was trained on (``seqmap.tasks.graph.load_graph`` of its config), or another
    graph with the same features and classes.
    """
    nodes = {"train": data.graph.train_idx, "val": data.graph.val_idx, "test": data.graph.test_idx}.get(split)
    if nodes is None:
        raise ValueError(f"split {split!r} is not one of train, val, test")
    if nodes.numel() == 0:
        raise ValueError(f"{data.graph.name}: {split}_idx is empty; there are no {split} nodes to evaluate")
    cfg = run.cfg.model
    if (data.graph.num_features, data.graph.num_classes) != (cfg.n_features, cfg.n_classes):
        raise ValueError(f"{data.graph.name} has {data.graph.num_features} features and {data.graph.num_classes} "
                         f"classes, but the run was trained on {cfg.n_features} and {cfg.n_classes}; give the "
                         "run's graph")
    result = graph_metrics(run.model.eval(), data, nodes, cfg.graph_attention, run.device)
    predicted = result.pop("logits")[nodes].argmax(-1).tolist()
    result["confusion"] = mt.confusion_matrix(predicted, data.graph.labels[nodes].tolist(), cfg.n_classes)
    return result


def evaluate_classifier(run: LoadedRun, path: str | Path, *, text_column: int = 0, label_column: int = 1,
                        max_tokens: int = 4096, baseline: Pairs | None = None) -> dict:
    """Accuracy, macro-F1, loss and the confusion matrix of a classifier on a TSV of (text, label) rows.

    Texts are read as training read them (the tokenizer's normalization, the first ``data.max_len``
    tokens); a label outside the run's classes is an error naming it (unless the run has an ``other``
    class, which takes it). With ``baseline``, (text, label) training rows (the run's own:
    ``seqmap.tasks.classification.classification_train_rows``), ``result["baseline"]`` holds the TF-IDF
    baseline's scores on the same rows, fitted on them.
    """
    pairs = read_tsv(path, "--data", text_column, label_column)
    rows = [(classification_ids(run.src_tok, text, run.cfg.data.max_len),
             run.labels.encode(label.strip(), where=f"{path} line {n}")) for n, (text, label) in enumerate(pairs, 1)]
    if not rows:
        raise ValueError(f"{path}: no rows to evaluate")
    predicted, nll_sum = classify_rows(run.model, rows, max_tokens, run.device)
    gold = [label for _, label in rows]
    result = classification_scores(predicted, gold, nll_sum, len(run.labels))
    result["confusion"] = mt.confusion_matrix(predicted, gold, len(run.labels))
    if baseline is not None:
        norm = run.src_tok.normalizer
        test = [(norm(text), label.strip()) for text, label in pairs]
        result["baseline"] = baseline_scores(baseline, test, run.labels)
    return result
