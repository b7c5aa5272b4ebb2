"""What a Vision Transformer looked at: attention rollout and the last layer's class-token attention over the image.

``seqmap.nn.rollout`` computes both; here they are (grid_h, grid_w) maps over the patches, drawn over
the image with nearest-neighbour blocks (one block per patch, so nothing is invented between patches).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor

from seqmap.nn.rollout import class_token_attention
from seqmap.visualize.figures import figure_inches, save_figure


def cls_maps(weights: Tensor, grid: tuple[int, int], head: int | None = None) -> tuple[Tensor, Tensor]:
    """(rollout, last layer) class-token attention over the patches, each (grid_h, grid_w) summing to 1.

    ``weights``: (L, H, 1 + N, 1 + N) with the class token at position 0; ``head``: one head of the last
    layer (default: their mean).
    """
    n = grid[0] * grid[1]
    if weights.size(-1) != n + 1:
        raise ValueError(f"expected {n} patches and a class token ({n + 1} positions), got {weights.size(-1)}")
    rolled, last = class_token_attention(weights, head)
    return rolled.reshape(grid).float(), last.reshape(grid).float()


def plot_image_attention(run, image_path: str | Path, path: str | Path, *, head: int | None = None,
                         title: str | None = None) -> Figure:
    """Classify ``image_path`` with the image classifier ``run`` and draw the image, its attention rollout and
    the last layer's class-token attention (mean of heads, or ``head``), the prediction in the title."""
    from seqmap.data.images import read_image_file

    m = run.cfg.model
    if m.pooling != "cls":
        raise ValueError("attention maps read the class token's row; this run pools by mean (model.pooling=mean)")
    if head is not None and not 0 <= head < m.n_heads:
        raise ValueError(f"--head must be in 0..{m.n_heads - 1}, got {head}")
    image = read_image_file(image_path, "L" if m.image_channels == 1 else "RGB", (m.image_height, m.image_width))
    model = run.model
    x = image[None].to(run.device)
    with torch.no_grad():
        probs = model(x, None).softmax(-1)[0].cpu()
        weights = model.encoder_attention(x, None)[0].cpu()  # (L, H, S', S')
    grid = model.encoder.embedding.grid
    rolled, last = cls_maps(weights, grid, head)
    k = int(probs.argmax())
    label = run.labels.decode(k)
    picture = image.permute(1, 2, 0).numpy()
    picture = picture[..., 0] if picture.shape[-1] == 1 else picture
    fig = Figure(figsize=figure_inches(9.0, 3.5), dpi=100)
    axes = fig.subplots(1, 3)
    extent = (0, m.image_width, m.image_height, 0)
    panels = [("image", None), ("attention rollout", rolled),
              (f"last layer, CLS row ({'mean of heads' if head is None else f'head {head}'})", last)]
    for ax, (name, heat) in zip(axes, panels):
        ax.imshow(picture, cmap="gray" if picture.ndim == 2 else None, extent=extent, interpolation="nearest")
        if heat is not None:
            shown = ax.imshow(np.asarray(heat), cmap="inferno", alpha=0.6, extent=extent, interpolation="nearest")
            fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.04)
        ax.set_title(name, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title or f"{Path(image_path).name}: predicted {label} ({probs[k]:.3f})", fontsize=10)
    fig.subplots_adjust(left=0.02, right=0.95, top=0.82, bottom=0.04, wspace=0.3)
    save_figure(fig, path)
    return fig
