"""Plots: attention heatmaps, training curves, positional encodings, confusion matrices.

    plot_attention(weights, src_tokens, tgt_tokens, "attn.png")    # (T, S) or (L, H, T, S)
    plot_run_attention(load_run(run_dir), "ein Haus", "attn.svg")   # translate, force-decode, plot
    plot_curves(run_dir, "curves.png")                              # from RUN_DIR/metrics.jsonl
    plot_positional(64, 100, "positions.png")                       # sinusoidal table and RoPE angles
    plot_confusion(matrix, class_names, "confusion.png")            # a classifier's gold x predicted counts
    plot_image_attention(load_run(vit_run), "digit.png", "a.png")   # ViT: attention rollout over the image
    plot_node_attention(run, graph_data, 5, "node5.png")            # a GAT node's attention over its neighbours
    plot_speech_attention(load_run(asr_run), "digits.wav", "a.png") # speech: alignment over the spectrogram

Every function builds a ``matplotlib.figure.Figure`` directly (no pyplot): no GUI
backend is touched, no global figure is left open, and the figure is returned for
inspection after it is written. The format comes from the file suffix (``.png`` or
``.svg``); a PNG is exactly ``figure size x dpi`` pixels (no tight bounding box),
an SVG keeps its text as text (searchable, editable).

This package needs matplotlib; the rest of seqmap does not import it.
"""

from __future__ import annotations

from seqmap.nn.rollout import attention_rollout
from seqmap.visualize.attention import plot_attention, plot_run_attention
from seqmap.visualize.confusion import plot_confusion
from seqmap.visualize.curves import plot_curves
from seqmap.visualize.figures import FORMATS, figure_inches, save_figure
from seqmap.visualize.graph_attention import plot_node_attention
from seqmap.visualize.image_attention import plot_image_attention
from seqmap.visualize.positional import plot_positional
from seqmap.visualize.speech_attention import plot_speech_attention

__all__ = ["FORMATS", "attention_rollout", "figure_inches", "plot_attention", "plot_confusion", "plot_curves",
           "plot_image_attention", "plot_node_attention", "plot_positional", "plot_run_attention",
           "plot_speech_attention", "save_figure"]
