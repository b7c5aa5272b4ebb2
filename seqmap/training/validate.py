"""Validation helpers that no task owns: summed NLL, evaluation batches, classification scores, the log line.

Each task's ``validate`` (``seqmap.tasks``) puts them together; these are shared with test scoring.

Perplexity is exp(sum of NLL / number of target tokens) over the whole set, never
an average of batch averages. ``loss`` here is that per-token NLL (no label
smoothing), so it is comparable across runs with different smoothing. Validation
BLEU decodes greedily whatever ``decode.beam_size`` says (cheaper, and it only ranks
checkpoints); the log line says so when the run's test uses a beam.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from seqmap import metrics as mt
from seqmap.config import DataConfig, RunConfig
from seqmap.data.batching import Batch, collate_images, collate_labels, collate_pairs, collate_speech
from seqmap.data.samplers import fixed_size_batches, lm_chunks, token_budget_batches
from seqmap.data.tokenizers import PAD
from seqmap.training.loss import fused_output_layer, label_nll, label_smoothed_nll, output_nll


@torch.no_grad()
def summed_nll(model, batches, device) -> tuple[float, int]:
    """(sum of target-token NLL, number of target tokens) over batches.

    Where the model offers its float32 output layer, that layer and the loss run in chunks (``output_nll``), as
    in training, so that scoring never holds a batch's (tokens x vocabulary) logits.
    """
    nll_sum, n_tokens = 0.0, 0
    output = fused_output_layer(model)
    for batch in batches:
        batch = batch.to(device)
        out = model(batch.src, batch.src_mask, batch.tgt_in, **({} if output is None else {"features": True}))
        if output is not None and out.dtype == torch.float32:
            _, nll, n = output_nll(out, output, batch.tgt_out, PAD, 0.0)
        else:  # logits, or features that autocast made 16-bit
            _, nll, n = label_smoothed_nll(out if output is None else output(out), batch.tgt_out, PAD, 0.0)
        nll_sum += nll.item()
        n_tokens += n
    return nll_sum, n_tokens


def translation_batches(pairs, max_tokens: int):
    src_len = [len(s) for s, _ in pairs]
    tgt_len = [len(t) + 1 for _, t in pairs]
    for indices in token_budget_batches(src_len, tgt_len, max_tokens, shuffle=False):
        yield collate_pairs([pairs[i] for i in indices])


def speech_batches(model, utterances, ids: list[list[int]], max_tokens: int):
    """Utterances and their transcripts' ids in budgets of encoder frames, in length order (no shuffling)."""
    frames = model.frontend.utterance_frames(utterances)
    for indices in token_budget_batches(frames, [len(x) + 1 for x in ids], max_tokens, shuffle=False):
        yield collate_speech([utterances.wave(i) for i in indices], [ids[i] for i in indices])


def eval_context(data: DataConfig) -> int:
    """Tokens per evaluation window: ``data.eval_context``, else the training ``data.context``."""
    return data.eval_context or data.context


def lm_batches(stream: list[int], context: int, batch_size: int):
    inputs, targets = lm_chunks(stream, context, pad_id=PAD)
    for i in range(0, inputs.size(0), batch_size):
        yield Batch.from_lm_windows(inputs[i:i + batch_size], targets[i:i + batch_size], pad_id=PAD)


def label_batches(rows, max_tokens: int):
    """(token ids, class id) rows in token-budget batches, in length order (no shuffling)."""
    lengths = [len(ids) + 1 for ids, _ in rows]  # + the CLS vector
    for indices in token_budget_batches(lengths, [1] * len(rows), max_tokens, shuffle=False):
        yield indices, collate_labels([rows[i] for i in indices])


def image_batches(images, labels: list[int], batch_size: int):
    """(N, C, H, W) images and their class ids in batches of ``batch_size``, in order."""
    labels = torch.as_tensor(labels, dtype=torch.long)
    for indices in fixed_size_batches(len(labels), batch_size, shuffle=False):
        yield indices, collate_images(images[indices[0]:indices[-1] + 1], labels[indices[0]:indices[-1] + 1])


@torch.no_grad()
def classify_batches(model, batches, n: int, device) -> tuple[list[int], float]:
    """Predicted class ids of n examples from (indices, ``LabelBatch``) batches, and the gold classes' summed NLL."""
    predicted, nll_sum = [0] * n, 0.0
    for indices, batch in batches:
        batch = batch.to(device)
        logits = model(batch.src, batch.src_mask)
        nll_sum += label_nll(logits, batch.labels)[1].item()
        for i, p in zip(indices, logits.argmax(-1).tolist()):
            predicted[i] = p
    return predicted, nll_sum


def classify_rows(model, rows, max_tokens: int, device) -> tuple[list[int], float]:
    """Predicted class ids of (token ids, class id) rows in their order, and the summed NLL of the gold classes."""
    return classify_batches(model, label_batches(rows, max_tokens), len(rows), device)


def image_metrics(model, images, labels: list[int], n_classes: int, batch_size: int, device) -> dict:
    """``classification_scores`` of the model's predictions on (N, C, H, W) images with class ids ``labels``."""
    predicted, nll_sum = classify_batches(model, image_batches(images, labels, batch_size), len(labels), device)
    return classification_scores(predicted, list(labels), nll_sum, n_classes)


def classification_scores(predicted: list[int], gold: list[int], nll_sum: float, n_classes: int) -> dict:
    """loss (mean NLL per example), accuracy and macro-F1 (percent), and the number of examples."""
    return {"loss": nll_sum / len(gold), "accuracy": mt.accuracy(predicted, gold),
            "macro_f1": mt.macro_f1(predicted, gold, n_classes), "examples": len(gold)}


@torch.no_grad()
def graph_metrics(model, data, nodes, form: str, device) -> dict:
    """``classification_scores`` of one forward pass over the whole graph (``GraphData``), on ``nodes`` (a split).

    Returns the logits of every node too (``"logits"``, (N, C) on the CPU), for a confusion matrix or a plot.
    """
    batch = data.batch(nodes, form).to(device)
    logits = model(batch.src, batch.src_mask)
    nll_sum = label_nll(logits, batch.labels)[1].item()
    predicted = logits[nodes.to(device)].argmax(-1).tolist()
    gold = data.graph.labels[nodes].tolist()
    return classification_scores(predicted, gold, nll_sum, data.graph.num_classes) | {"logits": logits.cpu()}


def classification_metrics(model, rows, n_classes: int, max_tokens: int, device) -> dict:
    """``classification_scores`` of the model's predictions on (token ids, class id) rows."""
    predicted, nll_sum = classify_rows(model, rows, max_tokens, device)
    return classification_scores(predicted, [label for _, label in rows], nll_sum, n_classes)


@contextmanager
def evaluating(model):
    """The model in eval mode inside the block (dropout off), back in the mode it was in after it."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def token_scores(nll_sum: float, n_tokens: int) -> dict:
    """loss (mean NLL per target token), perplexity and the number of tokens, from their sums over a set."""
    return {"loss": nll_sum / max(n_tokens, 1), "ppl": mt.perplexity(nll_sum, n_tokens), "tokens": n_tokens}


def log_token_scores(out: dict, log, note: str = "") -> None:
    """The validation line of a token-sequence task: every metric but the sacreBLEU signatures, then ``note``."""
    shown = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in out.items()
                      if k not in ("bleu_signature", "chrf_signature"))
    log(f"validation{note}: {shown}")


def log_label_scores(out: dict, log) -> None:
    """The validation line of a labelled task (``classification_scores``)."""
    log("validation: " + ", ".join(f"{k} {v:.4g}" for k, v in out.items()))


def greedy_note(cfg: RunConfig, metric: str, verb: str) -> str:
    """Said beside a metric of greedy validation decoding when the run's test and VERB use a beam
    (greedy is cheaper; it rarely changes which checkpoint is best)."""
    beam = cfg.decode.beam_size
    return f" ({metric} by greedy decoding; test and {verb} use decode.beam_size={beam})" if beam > 1 else ""
