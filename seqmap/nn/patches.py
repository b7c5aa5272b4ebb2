"""Images as sequences: cut into square patches in row-major order, each patch a vector (Dosovitskiy et al. 2021).

    images (B, C, H, W) pixels 0..255 -> normalised -> patches (B, N, C*P*P) -> Linear -> (B, N, D)

with N = (H / P) * (W / P), patch n = (row n // (W / P), column n % (W / P)), and inside a patch the
values ordered channel, row, column. ``PatchEmbedding`` is what a Transformer encoder's token
embedding is for text: the Vision Transformer is seqmap's encoder-only classifier with this module
in place of ``TokenEmbedding``. The pixel mean and standard deviation of the training images are
buffers of the module, so a saved model normalises raw pixels itself.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def patchify(images: Tensor, patch: int) -> Tensor:
    """(B, C, H, W) -> (B, N, C * patch * patch), patches in row-major order (left to right, top to bottom)."""
    b, c, h, w = images.shape
    if h % patch or w % patch:
        raise ValueError(f"a {h}x{w} image is not a whole number of {patch}x{patch} patches")
    x = images.reshape(b, c, h // patch, patch, w // patch, patch)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(b, (h // patch) * (w // patch), c * patch * patch)


def unpatchify(patches: Tensor, patch: int, channels: int, height: int, width: int) -> Tensor:
    """The inverse of :func:`patchify`: (B, N, C * patch * patch) -> (B, C, H, W)."""
    b = patches.size(0)
    x = patches.reshape(b, height // patch, width // patch, channels, patch, patch)
    return x.permute(0, 3, 1, 4, 2, 5).reshape(b, channels, height, width)


class PatchEmbedding(nn.Module):
    """Raw pixels (B, C, H, W) -> patch vectors (B, N, D): normalise, cut into patches, project linearly.

    Args:
        channels, height, width: the image shape every input must have.
        patch: the side of a square patch; must divide ``height`` and ``width``.
        d_model: the width D of a patch vector.
        mean, std: per-channel pixel mean and standard deviation (on the 0..255 scale) of the training set.
    """

    def __init__(self, channels: int, height: int, width: int, patch: int, d_model: int,
                 mean: list[float] | None = None, std: list[float] | None = None):
        super().__init__()
        if height % patch or width % patch:
            raise ValueError(f"model.patch_size={patch} must divide the image size {height}x{width}")
        self.channels, self.height, self.width, self.patch, self.d_model = channels, height, width, patch, d_model
        self.grid = (height // patch, width // patch)
        self.proj = nn.Linear(channels * patch * patch, d_model)
        mean = torch.tensor(mean if mean is not None else [0.0] * channels, dtype=torch.float32)
        std = torch.tensor(std if std is not None else [1.0] * channels, dtype=torch.float32)
        if mean.numel() != channels or std.numel() != channels or bool((std <= 0).any()):
            raise ValueError(f"pixel mean/std must be {channels} numbers each (std > 0), got {mean.tolist()} / "
                             f"{std.tolist()}")
        self.register_buffer("mean", mean.view(1, channels, 1, 1))
        self.register_buffer("std", std.view(1, channels, 1, 1))

    @property
    def n_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    def check(self, images: Tensor) -> None:
        """Raise ``ValueError`` (one line) unless ``images`` is (B, C, H, W) of this module's shape."""
        want = (self.channels, self.height, self.width)
        if images.dim() != 4 or tuple(images.shape[1:]) != want:
            got = "x".join(map(str, images.shape[1:])) if images.dim() == 4 else f"{images.dim()}-d"
            raise ValueError(f"images must be {'x'.join(map(str, want))} (channels x height x width), got {got}")

    def forward(self, images: Tensor) -> Tensor:
        self.check(images)
        x = (images.to(self.mean.dtype) - self.mean) / self.std
        return self.proj(patchify(x, self.patch))
