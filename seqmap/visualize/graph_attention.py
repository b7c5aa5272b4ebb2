"""Graph attention around one node: how much the node attended to each of its neighbours, per GAT layer.

    plot_node_attention(run, data, node=5, path="node5.png")                 # every layer, mean of heads
    plot_node_attention(run, data, node=5, path="node5.svg", layer=0, head=3)  # one head of one layer

A panel per layer: the node in the centre, its in-neighbours (the nodes it attends, itself included
through its self-loop) on a circle around it, heaviest first, clockwise from the top. Each edge's
width and colour give the weight alpha_ij (the row of weights sums to 1 over the neighbours, self
included); the centre's own ring shows its self-loop weight. Nodes are filled by their gold class and
labelled ``id`` and ``gold/predicted`` class. The weights are those of the evaluation-mode forward
pass (no dropout), averaged over the layer's heads unless ``head`` picks one. One colour scale (0 to
the largest weight shown) serves every panel.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from seqmap.visualize.figures import check_format, figure_inches, save_figure

MAX_LABELLED = 12  # neighbours labelled by id and class (the heaviest); the rest are drawn unlabelled


@torch.no_grad()
def node_attention(model, features, structure, node: int) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """(neighbour ids (K,), per layer the (K, H) weights node ``node`` gave them, predicted classes (N,)).

    ``structure`` is a (2, E) edge index or an (N, N) boolean mask, as the model was trained with;
    the model is a ``seqmap.models.gat.GAT`` (its ``attention`` method returns the weights).
    """
    logits, weights = model.attention(features, structure)
    if structure.dtype == torch.bool:  # dense: weights (H, N, N), row ``node`` over its neighbours
        neighbours = structure[node].nonzero().squeeze(1)
        per_layer = [w[:, node, neighbours].T for w in weights]
    else:  # sparse: weights (E, H) per edge j -> i
        incoming = (structure[1] == node).nonzero().squeeze(1)
        neighbours = structure[0, incoming]
        per_layer = [w[incoming] for w in weights]
    return (neighbours.cpu().numpy(), [w.float().cpu().numpy() for w in per_layer],
            logits.argmax(-1).cpu().numpy())


def select_heads(per_layer: list[np.ndarray], layer: int | None, head: int | str | None
                  ) -> tuple[list[np.ndarray], list[str]]:
    """The (K,) weights to draw per panel and the panel titles: layers (all or one), a head or their mean."""
    n_layers = len(per_layer)
    if layer is not None and not -n_layers <= layer < n_layers:
        raise ValueError(f"layer {layer} is out of range: the GAT has {n_layers} layers (use 0..{n_layers - 1})")
    layers = range(n_layers) if layer is None else [layer % n_layers]
    panels, titles = [], []
    for index in layers:
        w = per_layer[index]
        if head in (None, "mean"):
            panels.append(w.mean(axis=1))
            titles.append(f"layer {index}, mean of {w.shape[1]} head{'s' if w.shape[1] > 1 else ''}")
        else:
            if not 0 <= head < w.shape[1]:
                raise ValueError(f"head {head} is out of range: layer {index} has {w.shape[1]} head(s) (use "
                                 f"0..{w.shape[1] - 1}, pick a layer with --layer, or average with --head mean)")
            panels.append(w[:, head])
            titles.append(f"layer {index}, head {head}")
    return panels, titles


def plot_node_attention(run, data, node: int, path: str | Path, *, layer: int | None = None,
                        head: int | str | None = None, title: str | None = None) -> Figure:
    """Draw the attention of ``node`` over its neighbours in a graph run and write it to ``path`` (.png or .svg).

    Args:
        run: a loaded graph run (``seqmap.runs.load_run``).
        data: its graph (``seqmap.data.graphs.GraphData``).
        node: the node id, 0..N-1.
        layer: one layer (0: the hidden layer, 1: the output layer); default every layer.
        head: one head's weights, or ``"mean"`` / None (default) for the mean of the layer's heads.
        title: figure title (default: the node, its gold and predicted class).

    Returns:
        The written Figure; its panels carry the label ``"graph attention"``.
    """
    path = check_format(path)
    n = data.graph.num_nodes
    if not 0 <= node < n:
        raise ValueError(f"node {node} is out of range: {data.graph.name} has {n} nodes (ids 0..{n - 1})")
    structure = data.structure(run.cfg.model.graph_attention).to(run.device)
    neighbours, per_layer, predicted = node_attention(run.model.eval(), data.features.to(run.device), structure, node)
    if neighbours.size == 0:
        raise ValueError(f"node {node} has no incoming edge (not even a self-loop): nothing to plot")
    panels, titles = select_heads(per_layer, layer, head)
    gold = data.graph.labels.numpy()
    vmax = max(float(p.max()) for p in panels) or 1.0
    cmap, norm = colormaps["viridis"], Normalize(0.0, vmax)
    side = 4.5
    fig = Figure(figsize=figure_inches(side * len(panels) + 1.0, side + 0.6), dpi=100, layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, weights, panel_title in zip(axes, panels, titles, strict=True):
        _draw_panel(ax, node, neighbours, weights, gold, predicted, cmap, norm)
        ax.set_title(panel_title, fontsize=9)
        ax.set_label("graph attention")
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=list(axes), label="attention weight", shrink=0.8)
    fig.suptitle(title or f"node {node} (gold class {gold[node]}, predicted {predicted[node]}): attention over "
                 f"its {neighbours.size} in-neighbours (self-loop included)", fontsize=10)
    save_figure(fig, path)
    return fig


def _draw_panel(ax, node: int, neighbours: np.ndarray, weights: np.ndarray, gold: np.ndarray,
                predicted: np.ndarray, cmap, norm) -> None:
    """The centre node, its neighbours on a circle (heaviest first, clockwise from the top), weighted edges."""
    classes = colormaps["tab10"]
    others = [(w, j) for w, j in zip(weights.tolist(), neighbours.tolist(), strict=True) if j != node]
    others.sort(key=lambda pair: (-pair[0], pair[1]))
    self_weight = next((w for w, j in zip(weights.tolist(), neighbours.tolist(), strict=True) if j == node), None)
    k = max(len(others), 1)
    radius = 1.0
    for rank, (w, j) in enumerate(others):
        angle = math.pi / 2 - 2 * math.pi * rank / k
        x, y = radius * math.cos(angle), radius * math.sin(angle)
        ax.plot([x, 0.0], [y, 0.0], color=cmap(norm(w)), linewidth=0.5 + 6.0 * norm(w), zorder=1,
                solid_capstyle="round")
        ax.scatter([x], [y], s=160 if rank < MAX_LABELLED else 30, color=classes(gold[j] % 10), edgecolors="black",
                   linewidths=0.5, zorder=2)
        if rank < MAX_LABELLED:
            ax.annotate(f"{j}\n{_classes(gold[j], predicted[j])}\n{w:.2f}", (x, y), xytext=(1.28 * x, 1.28 * y),
                        ha="center", va="center", fontsize=6.5)
    ring = cmap(norm(self_weight)) if self_weight is not None else "none"
    ax.scatter([0.0], [0.0], s=420, color=classes(gold[node] % 10), edgecolors=[ring], linewidths=4.0, zorder=3)
    self_text = f"\nself {self_weight:.2f}" if self_weight is not None else ""
    ax.annotate(f"{node}\n{_classes(gold[node], predicted[node])}{self_text}", (0.0, 0.0), xytext=(0.0, -0.3),
                ha="center", va="top", fontsize=7, fontweight="bold",
                bbox=dict(boxstyle="round,pad=0.2", facecolor="white", alpha=0.85, edgecolor="none"), zorder=4)
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-1.6, 1.6)
    ax.set_aspect("equal")
    ax.axis("off")


def _classes(gold: int, predicted: int) -> str:
    """``gold/predicted``; an unlabelled node (-1) shows ``?``."""
    return f"{gold if gold >= 0 else '?'}/{predicted}"
