"""Attention heatmaps: which keys (source tokens) each query (output token) looked at.

    plot_attention(weights, src_tokens, tgt_tokens, "attn.png")             # (T, S): one map
    plot_attention(weights, src_tokens, tgt_tokens, "attn.png")             # (L, H, T, S): layer x head grid
    plot_attention(weights, src_tokens, tgt_tokens, "attn.png", layer=-1)   # the heads of one layer
    plot_run_attention(run, "ein Haus", "attn.svg", which="encoder")       # from a loaded run

Keys run along the x axis (columns), queries down the y axis (rows). In a
cross-attention plot row i is the step that chose output token i (the last row
chose EOS); in a self-attention plot rows and columns are the same tokens.
One colour scale (0 to the largest weight shown) serves every panel.

Labels: pieces are shown as written (``▁`` of sentencepiece included); a
whitespace piece shows as ``␣``; long pieces are cut. Characters the default font
lacks (Chinese, Japanese, Korean) are drawn with an installed font that has them
(``seqmap.visualize.fonts``); without one, a warning names them and the package to install.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from seqmap.data.pipeline import classification_ids, truncate_source
from seqmap.data.tokenizers import BOS, EOS
from seqmap.decoding.align import (
    NoAttentionError,
    copy_attention,
    decoder_self_attention,
    encoder_attention,
    forced_attention,
)
from seqmap.visualize.figures import check_format, figure_inches, save_figure
from seqmap.visualize.fonts import label_fonts

NO_ATTENTION = ("the model has no attention to plot: it reads the source only through the encoder's final state "
                "(an RNN with model.rnn_attention=none). Train with rnn_attention=bahdanau|dot|general|concat, "
                "or a Transformer")

FONT_SIZE = 8  # points, tick labels
CELL = 0.25  # inches per token along each axis of a heatmap
CHAR = 0.07  # inches per (half-width) character of a FONT_SIZE label
MAX_LABEL = 24  # characters kept of a long piece
MIN_TICK = 0.14  # inches between labelled tokens at least (every k-th token is labelled below that)
MAX_INCHES = 60  # longest side of a figure; beyond it panels shrink
DPI_RANGE = (40, 144)  # dpi (a multiple of 4) falls from 144 as the figure grows ...
MAX_PIXELS = 8000  # ... so its longer side stays within this many pixels


def display_label(token: str) -> str:
    """A token as a tick label: whitespace made visible, ``$`` kept literal (not mathtext), long pieces cut."""
    if not token.strip():
        token = "␣" * max(len(token), 1)
    if len(token) > MAX_LABEL:
        token = token[: MAX_LABEL - 1] + "…"
    return token.replace("$", r"\$")


def label_width(labels: Sequence[str]) -> float:
    """Width of the longest label in half-width characters (a wide CJK character counts 2)."""
    return max((sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in label) for label in labels),
               default=1)


def _layout(n_src: int, n_tgt: int, rows: int, cols: int, src_chars: float, tgt_chars: float
            ) -> tuple[float, float, float, float]:
    """(panel width, panel height, figure width, figure height) in inches, before rounding."""
    left = 0.6 + CHAR * tgt_chars
    bottom = 0.6 + CHAR * src_chars * 0.87  # x labels rotated by 60 degrees: sin(60) of their length
    extra_w = left + (cols - 1) * 0.15 + 1.1  # y labels, gaps, colorbar
    extra_h = bottom + rows * 0.3 + 0.45  # x labels, panel titles, figure title
    panel_w = min(max(1.5, CELL * n_src), max(1.0, (MAX_INCHES - extra_w) / cols))
    panel_h = min(max(1.0, CELL * n_tgt), max(1.0, (MAX_INCHES - extra_h) / rows))
    return panel_w, panel_h, extra_w + cols * panel_w, extra_h + rows * panel_h


def attention_figure_size(n_src: int, n_tgt: int, rows: int = 1, cols: int = 1, src_chars: float = 1.0,
                          tgt_chars: float = 1.0) -> tuple[float, float, int]:
    """(width, height) in inches and dpi of an attention figure.

    A panel gives each token ``CELL`` inches (at least 1.5 x 1 inches) until the
    figure reaches ``MAX_INCHES``, then panels shrink and only every k-th token is
    labelled. Margins hold the y labels (``tgt_chars`` wide), the rotated x labels
    (``src_chars`` long), panel titles and the colorbar. The dpi (a multiple of 4)
    falls as the figure grows so the image stays within ``MAX_PIXELS``.
    """
    *_, width, height = _layout(n_src, n_tgt, rows, cols, src_chars, tgt_chars)
    width, height = figure_inches(width, height)
    dpi = max(DPI_RANGE[0], min(DPI_RANGE[1], 4 * int(MAX_PIXELS / max(width, height) / 4)))
    return width, height, dpi


def tick_step(n_tokens: int, panel_inches: float) -> int:
    """Label every k-th token so labels are at least ``MIN_TICK`` inches apart."""
    return max(1, math.ceil(n_tokens / max(1, int(panel_inches / MIN_TICK))))


def _index(value: int, size: int, name: str) -> int:
    if not -size <= value < size:
        raise ValueError(f"{name} {value} is out of range: the attention has {size} {name}s "
                         f"(use 0..{size - 1}, or -1 for the last)")
    return value % size


def select_panels(weights, layer: int | None = None, head: int | str | None = None
                  ) -> tuple[np.ndarray, list[str | None]]:
    """The maps to draw as a (rows, cols, T, S) array, and a title per panel (row-major).

    (T, S) weights give one untitled panel. (L, H, T, S) weights give the layer x head
    grid; ``layer`` keeps one row, ``head`` one column, both one panel;
    ``head="mean"`` averages the heads of each layer. Single-headed attention (an RNN's,
    ConvS2S's per decoder layer) is a column of layers, titled by layer alone.
    """
    w = np.asarray(torch.as_tensor(weights).detach().float().cpu())
    if w.ndim == 2:
        if layer is not None or head is not None:
            raise ValueError("layer and head select from (L, H, T, S) weights; these are one (T, S) map")
        return w[None, None], [None]
    if w.ndim != 4:
        raise ValueError(f"attention weights must be (T, S) or (L, H, T, S), got shape {w.shape}")
    n_layers, n_heads = w.shape[:2]
    layers = range(n_layers) if layer is None else [_index(layer, n_layers, "layer")]
    if head == "mean":
        w, heads, head_names = w.mean(axis=1, keepdims=True), [0], ["mean of heads"]
    else:
        heads = range(n_heads) if head is None else [_index(head, n_heads, "head")]
        head_names = [f"head {h}" for h in range(n_heads)]
    maps = w[np.ix_(list(layers), list(heads))]  # (rows, cols, T, S)
    if n_heads == 1:
        return maps, [f"layer {layer_}" for layer_ in layers]
    titles = [f"layer {layer_} {head_names[h]}" for layer_ in layers for h in heads]
    return maps, titles


def plot_attention(weights, src_tokens: Sequence[str], tgt_tokens: Sequence[str], path: str | Path,
                   layer: int | None = None, head: int | str | None = None, title: str | None = None, *,
                   xlabel: str = "source", ylabel: str = "output") -> Figure:
    """Draw attention as a heatmap (or a grid of them) and write it to ``path`` (.png or .svg).

    Args:
        weights: (T, S) or (L, H, T, S) weights (tensor or array), e.g. from
            ``seqmap.decoding.align.forced_attention``. None (a model without attention)
            raises ``NoAttentionError``.
        src_tokens: S labels for the columns (keys).
        tgt_tokens: T labels for the rows (queries).
        path: output file; the suffix picks the format.
        layer, head: with (L, H, T, S) weights, keep one layer (a row of heads) and/or
            one head (``head="mean"`` averages the heads); by default every layer x head.
        title: figure title.
        xlabel, ylabel: axis names (e.g. "keys"/"queries" for self-attention).

    Returns:
        The written Figure; its heatmap axes carry the label ``"attention"``.
    """
    if weights is None:
        raise NoAttentionError(NO_ATTENTION)
    path = check_format(path)
    maps, titles = select_panels(weights, layer, head)
    rows, cols, n_tgt, n_src = maps.shape
    if len(src_tokens) != n_src or len(tgt_tokens) != n_tgt:
        raise ValueError(f"the weights cover {n_tgt} output x {n_src} source tokens, but {len(tgt_tokens)} output "
                         f"and {len(src_tokens)} source labels were given")
    src_labels, tgt_labels = [display_label(t) for t in src_tokens], [display_label(t) for t in tgt_tokens]
    fonts = label_fonts([*src_labels, *tgt_labels, title or ""])
    chars = label_width(src_labels), label_width(tgt_labels)
    width, height, dpi = attention_figure_size(n_src, n_tgt, rows, cols, *chars)
    panel_w, panel_h, *_ = _layout(n_src, n_tgt, rows, cols, *chars)
    steps = tick_step(n_src, panel_w), tick_step(n_tgt, panel_h)
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    vmax = float(maps.max()) if maps.size and maps.max() > 0 else 1.0
    image = None
    for (r, c), ax in np.ndenumerate(axes):
        image = ax.imshow(maps[r, c], cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
        ax.set_label("attention")
        _ticks(ax, src_labels, tgt_labels, steps, fonts, show_x=r == rows - 1, show_y=c == 0)
        if titles[r * cols + c] is not None:
            ax.set_title(titles[r * cols + c], fontsize=FONT_SIZE + 1)
    fig.colorbar(image, ax=axes.ravel().tolist(), label="attention weight", shrink=min(1.0, 0.6 + 0.1 * rows))
    fig.supxlabel(xlabel, fontsize=FONT_SIZE + 1)
    fig.supylabel(ylabel, fontsize=FONT_SIZE + 1)
    if title:
        fig.suptitle(title, fontfamily=fonts)
    save_figure(fig, path)
    return fig


def _ticks(ax, src_labels: list[str], tgt_labels: list[str], steps: tuple[int, int], fonts: list[str],
           show_x: bool, show_y: bool) -> None:
    """Token labels (every k-th: ``steps``) on the outer panels only; x labels rotated."""
    x_at, y_at = range(0, len(src_labels), steps[0]), range(0, len(tgt_labels), steps[1])
    ax.set_xticks(list(x_at), [src_labels[i] for i in x_at] if show_x else [], fontsize=FONT_SIZE,
                  fontfamily=fonts, rotation=60, ha="right", rotation_mode="anchor")
    ax.set_yticks(list(y_at), [tgt_labels[i] for i in y_at] if show_y else [], fontsize=FONT_SIZE,
                  fontfamily=fonts)


ATTENTION_KINDS = ("cross", "encoder", "decoder", "copy")


def plot_run_attention(run, text: str, path: str | Path, *, hypothesis: str | None = None, which: str = "cross",
                       layer: int | None = None, head: int | str | None = None, title: str | None = None) -> Figure:
    """Translate ``text`` with a loaded run (``seqmap.runs.load_run``) and plot the attention of that translation.

    The hypothesis is the run's translation of ``text`` (``translate_ids`` with the
    run's decode settings) unless ``hypothesis`` gives one to force instead (e.g. a
    reference). ``which``: ``cross`` (outputs over the source), ``encoder`` (source
    self-attention), ``decoder`` (causal self-attention over BOS + output) or ``copy``
    (a pointer-generator's copy head over the source, each row labelled with its p_gen, the
    probability of generating rather than copying). A source longer than the run's
    ``data.max_src_len`` is read up to it, as ``translate`` reads it. For a
    language model ``text`` is the sequence itself and the plot is its causal
    self-attention (``cross`` and ``decoder`` are the same there).

    Raises ``NoAttentionError`` when the model has no attention of that kind.
    """
    if which not in ATTENTION_KINDS:
        raise ValueError(f"unknown attention {which!r}; choose one of {', '.join(ATTENTION_KINDS)}")
    path = check_format(path)
    model, tgt_tok, device = run.model, run.tgt_tok, run.device
    bos, eos = tgt_tok.pieces([BOS])[0], tgt_tok.pieces([EOS])[0]
    if run.src_tok is None:  # decoder-only: its only attention is causal self-attention
        if which == "encoder":
            raise NoAttentionError("a language model has no encoder; plot its self-attention (which='decoder')")
        weights = decoder_self_attention(model, None, tgt_tok.encode(text), device=device)
        labels = [bos, *tgt_tok.tokens(text)]
        return plot_attention(weights, labels, labels, path, layer, head, title or _title("self", layer, head),
                              xlabel="keys", ylabel="queries")
    src_ids = run.src_tok.encode(text)
    src_labels = run.src_tok.tokens(text) or run.src_tok.pieces([EOS])  # an empty source reads one EOS
    if run.cfg.data.max_src_len > 0 and len(src_ids) > run.cfg.data.max_src_len:  # what translate reads
        src_ids = truncate_source(src_ids, run.cfg.data.max_src_len)
        src_labels = src_labels[:len(src_ids)]
    if getattr(run, "labels", None) is not None:  # a classifier: its encoder's self-attention is all it has
        src_ids = classification_ids(run.src_tok, text, run.cfg.data.max_len)  # what it reads: the first max_len
        return _plot_classifier_attention(run, text, src_ids, src_labels[:len(src_ids)] or src_labels, path, which,
                                          layer, head, title)
    if which == "encoder":
        weights = encoder_attention(model, src_ids, device=device)
        if weights is None:
            raise NoAttentionError(f"{type(model).__name__} has no encoder self-attention (its encoder is recurrent "
                                   "or convolutional); plot the cross-attention instead")
        return plot_attention(weights, src_labels, src_labels, path, layer, head,
                              title or _title("encoder self", layer, head), xlabel="source (keys)",
                              ylabel="source (queries)")
    if hypothesis is None:
        hyp_ids = _translate(run, src_ids)
        hyp_labels = tgt_tok.pieces(hyp_ids)
    else:
        hyp_ids, hyp_labels = tgt_tok.encode(hypothesis), tgt_tok.tokens(hypothesis)
    if which == "copy":
        copied = copy_attention(model, src_ids, hyp_ids, device=device)
        if copied is None:
            raise NoAttentionError(f"{type(model).__name__} has no copy head (model.copy: false); plot its "
                                   "cross-attention instead")
        weights, p_gen = copied
        rows = [f"{label} ({p:.2f})" for label, p in zip([*hyp_labels, eos], p_gen.tolist())]
        return plot_attention(weights, src_labels, rows, path, title=title or "copy attention",
                              ylabel="output (p_gen: generated rather than copied)")
    if which == "decoder":
        weights = decoder_self_attention(model, src_ids, hyp_ids, device=device)
        labels = [bos, *hyp_labels]
        return plot_attention(weights, labels, labels, path, layer, head, title or _title("decoder self", layer, head),
                              xlabel="output so far (keys)", ylabel="decoder input (queries)")
    weights = forced_attention(model, src_ids, hyp_ids, device=device)
    if weights is None:
        raise NoAttentionError(NO_ATTENTION)
    return plot_attention(weights, src_labels, [*hyp_labels, eos], path, layer, head,
                          title or _title("cross", layer, head))


def _plot_classifier_attention(run, text: str, src_ids: list[int], src_labels: list[str], path: Path, which: str,
                               layer: int | None, head: int | str | None, title: str | None) -> Figure:
    """A classifier's self-attention over the text (with ``cls`` pooling, the CLS row is what the prediction read)."""
    if which == "decoder":
        raise NoAttentionError("a classifier has no decoder; plot its self-attention (which='cross' or 'encoder')")
    weights = encoder_attention(run.model, src_ids, device=run.device)  # (L, H, S', S')
    labels = ["<cls>", *src_labels] if run.cfg.model.pooling == "cls" else src_labels
    with torch.no_grad():
        src = torch.tensor([src_ids], device=run.device)
        predicted = int(run.model(src, None).argmax(-1))
    title = title or f"{_title('self', layer, head)}, predicted: {run.labels.decode(predicted)}"
    return plot_attention(weights, labels, labels, path, layer, head, title,
                          xlabel="text (keys)", ylabel="text (queries)")


def _translate(run, src_ids: list[int]) -> list[int]:
    from seqmap.decoding.text import translate_ids  # decoding at plot time only

    return translate_ids(run.model, [src_ids], run.cfg.decode, device=run.device)[0]  # as `seqmap translate` does


def _title(kind: str, layer: int | None, head: int | str | None) -> str:
    parts = [f"{kind}-attention"]
    if layer is not None:
        parts.append(f"layer {layer}")
    if head is not None:
        parts.append("mean of heads" if head == "mean" else f"head {head}")
    return ", ".join(parts)
