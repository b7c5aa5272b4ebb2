"""Labelled images for the ``image`` task: read from ``.npz`` arrays or from a folder of class sub-folders.

Two ways to hold a split (``data.train``, ``data.valid``, ``data.test`` each name one):

* an ``.npz`` file (``numpy.load(path, allow_pickle=False)``) with ``x`` and ``y``, or with
  ``x_<split>`` and ``y_<split>`` (Keras' ``mnist.npz`` holds ``x_train``, ``y_train``, ``x_test``, ``y_test``,
  so one file can serve several splits). ``x`` is uint8 pixels 0..255, (N, H, W) for grey images or
  (N, H, W, C) channels-last with C = 1 or 3; ``y`` is (N,) integer or string labels.
* a folder with one sub-folder per class (``train/cat/001.png``, ``train/dog/xyz.jpg``: the
  torchvision ``ImageFolder`` layout), read with Pillow. Every image must have one size unless
  ``data.image_size`` gives the size to resize to; ``data.image_mode`` picks grey (L) or colour (RGB).

Images are kept as one uint8 tensor (N, C, H, W), labels as strings until the run's ``LabelSet``
encodes them. Every bad input raises :class:`ImageError` with one line naming the file and the fix.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from torch import Tensor

from seqmap.data.corpus import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
IMAGE_MODES = ("auto", "L", "RGB")


class ImageError(DataError):
    """An image file, folder or array is missing, unreadable or inconsistent; the message says what to change."""


@dataclass
class ImageSet:
    """Images (N, C, H, W) uint8 and their N labels (strings), from ``source``."""

    images: Tensor
    labels: list[str]
    source: str = ""

    def __post_init__(self) -> None:
        if self.images.dim() != 4 or self.images.dtype != torch.uint8:
            raise ImageError(f"{self.source}: images must be uint8 (N, C, H, W), got {self.images.dtype} "
                             f"{tuple(self.images.shape)}")
        if len(self.labels) != self.images.size(0):
            raise ImageError(f"{self.source}: {self.images.size(0)} images but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(C, H, W) of every image."""
        return tuple(self.images.shape[1:])

    def split_off(self, n: int) -> tuple[ImageSet, ImageSet]:
        """(all but the last n, the last n): a validation set held out of the training images, deterministically."""
        if not 0 < n < len(self):
            raise ImageError(f"cannot hold out {n} of {len(self)} images from {self.source} for validation; "
                             f"set data.valid_size between 1 and {len(self) - 1}")
        return (ImageSet(self.images[:-n], self.labels[:-n], self.source),
                ImageSet(self.images[-n:], self.labels[-n:], f"{self.source} (last {n})"))


def _as_nchw(x: np.ndarray, where: str) -> Tensor:
    if x.dtype != np.uint8:
        raise ImageError(f"{where}: pixels must be uint8 0..255, got {x.dtype}; convert them, e.g. "
                         "(x * 255).round().astype(numpy.uint8) for floats in [0, 1]")
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3):
        x = x.transpose(0, 3, 1, 2)
    else:
        raise ImageError(f"{where}: images must be (N, H, W) or channels-last (N, H, W, C) with C = 1 or 3, "
                         f"got shape {x.shape}")
    return torch.from_numpy(np.ascontiguousarray(x))


def _labels(y: np.ndarray, where: str) -> list[str]:
    if y.ndim != 1:
        raise ImageError(f"{where}: labels must be one per image (N,), got shape {y.shape}")
    if y.dtype.kind in "iu":
        return [str(int(v)) for v in y]
    if y.dtype.kind == "U":
        return [str(v) for v in y]
    raise ImageError(f"{where}: labels must be integers or strings, got {y.dtype}")


def read_npz(path: str | Path, split: str, where: str) -> ImageSet:
    """The images of ``split`` in an ``.npz``: ``x``/``y``, else ``x_<split>``/``y_<split>``."""
    path = Path(path)
    if not path.is_file():
        raise ImageError(f"{where}: image file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as arrays:
            keys = set(arrays.files)
            for x_key, y_key in (("x", "y"), (f"x_{split}", f"y_{split}")):
                if x_key in keys and y_key in keys:
                    x, y = arrays[x_key], arrays[y_key]
                    break
            else:
                raise ImageError(f"{where}: {path} has no arrays x and y (or x_{split} and y_{split}); it holds "
                                 f"{', '.join(sorted(keys)) or 'nothing'}")
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        if isinstance(e, ImageError):
            raise
        raise ImageError(f"{where}: cannot read {path} as .npz arrays ({' '.join(str(e).split())})") from None
    images = _as_nchw(x, f"{where} ({path}:{x_key})")
    labels = _labels(y, f"{where} ({path}:{y_key})")
    if len(labels) != images.size(0):
        raise ImageError(f"{where}: {path} has {images.size(0)} images in {x_key} but {len(labels)} labels in {y_key}")
    return ImageSet(images, labels, str(path))


def read_image_file(path: str | Path | BinaryIO, mode: str, size: tuple[int, int] | None = None, *,
                    name: str | None = None, max_pixels: int | None = None) -> Tensor:
    """One image file (a path, or an open binary file named ``name``) as uint8 (C, H, W), converted to ``mode``
    (L or RGB) and resized to ``size`` = (H, W) if given; ``max_pixels`` refuses larger images before decoding."""
    from PIL import Image, UnidentifiedImageError

    name = name or str(path)
    try:
        with Image.open(path) as img:
            if max_pixels is not None and img.width * img.height > max_pixels:
                raise ImageError(f"{name} is {img.width}x{img.height} pixels; at most {max_pixels} pixels")
            img = _eight_bit(img).convert(mode)
            if size is not None and (img.height, img.width) != tuple(size):
                img = img.resize((size[1], size[0]), Image.Resampling.BILINEAR)
            array = np.array(img, dtype=np.uint8)  # a writable copy
    except FileNotFoundError:
        raise ImageError(f"image file not found: {name}") from None
    except Image.DecompressionBombError as e:  # Pillow's own limit, met before max_pixels when there is none
        raise ImageError(f"{name} is too large to decode ({' '.join(str(e).split())}); give a smaller image") from None
    except (UnidentifiedImageError, OSError, ValueError) as e:
        if isinstance(e, ImageError):
            raise
        detail = " ".join(str(e).replace(repr(path), name).split())  # not "<_io.BytesIO object at 0x...>"
        raise ImageError(f"cannot read {name} as an image ({detail}); give a PNG, JPEG, BMP, GIF, WebP or TIFF "
                         "file") from None
    array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
    return torch.from_numpy(np.ascontiguousarray(array))


def _eight_bit(img):
    """A 16- or 32-bit grey image (mode I;16*, I) scaled to 8 bits (L); Pillow's convert would clip every value
    above 255 to white. Other modes are returned as they are."""
    from PIL import Image

    if not (img.mode.startswith("I;16") or img.mode == "I"):
        return img
    pixels = np.asarray(img).astype(np.int64).clip(0, 65535)
    return Image.fromarray(((pixels * 255 + 32767) // 65535).astype(np.uint8), "L")


def _folder_mode(files: list[Path], mode: str) -> str:
    """``data.image_mode=auto``: L when every image is grey (L, or 1-bit), else RGB."""
    if mode != "auto":
        return mode
    from PIL import Image

    for f in files:
        try:
            with Image.open(f) as img:
                if img.mode not in ("L", "1", "I;16", "I"):
                    return "RGB"
        except OSError:
            continue  # read_image_file reports it
    return "L"


def read_folder(path: str | Path, where: str, *, mode: str = "auto", size: tuple[int, int] | None = None
                ) -> ImageSet:
    """Images in class sub-folders of ``path`` (the sub-folder name is the label), sorted by class, then file name."""
    root = Path(path)
    if not root.is_dir():
        raise ImageError(f"{where}: image folder not found: {root}")
    classes = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    files = [(f, d.name) for d in classes for f in sorted(d.iterdir())
             if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise ImageError(f"{where}: no images in class sub-folders of {root}; lay it out as {root}/LABEL/IMAGE.png "
                         f"(suffixes {', '.join(IMAGE_SUFFIXES)})")
    mode = _folder_mode([f for f, _ in files], mode)
    images, first = [], None
    for f, _ in files:
        img = read_image_file(f, mode, size)
        if first is None:
            first = (f, tuple(img.shape[1:]))
        elif tuple(img.shape[1:]) != first[1]:
            raise ImageError(f"{where}: {f} is {img.shape[2]}x{img.shape[1]} but {first[0]} is "
                             f"{first[1][1]}x{first[1][0]} (width x height); set data.image_size [H, W] to resize all")
        images.append(img)
    return ImageSet(torch.stack(images), [label for _, label in files], str(root))


def read_split(path: str | Path, split: str, where: str, *, mode: str = "auto",
               size: tuple[int, int] | None = None) -> ImageSet:
    """A split from an ``.npz`` file or a folder of class sub-folders (whichever ``path`` is)."""
    p = Path(path)
    if p.is_dir():
        return read_folder(p, where, mode=mode, size=size)
    if p.suffix != ".npz" and p.exists():
        raise ImageError(f"{where}: {p} is neither an .npz file nor a folder of class sub-folders")
    return read_npz(p, split, where)


def pixel_stats(images: Tensor, chunk: int = 4096) -> tuple[list[float], list[float]]:
    """Per-channel mean and standard deviation of uint8 images (N, C, H, W), on the 0..255 scale (float64 sums)."""
    c = images.size(1)
    total = torch.zeros(c, dtype=torch.float64)
    squares = torch.zeros(c, dtype=torch.float64)
    for i in range(0, images.size(0), chunk):
        x = images[i:i + chunk].to(torch.float64)
        total += x.sum(dim=(0, 2, 3))
        squares += (x * x).sum(dim=(0, 2, 3))
    n = images.size(0) * images.size(2) * images.size(3)
    mean = total / n
    std = (squares / n - mean * mean).clamp(min=1e-12).sqrt()
    return [round(v, 6) for v in mean.tolist()], [round(max(v, 1e-3), 6) for v in std.tolist()]


def random_shift(images: Tensor, max_shift: int, generator: torch.Generator, fill: Tensor | None = None) -> Tensor:
    """Each image translated by its own random (dy, dx) in [-max_shift, max_shift], the uncovered border filled.

    ``fill`` is (C,) pixel values for the border (default 0: black). Pixels keep their dtype.
    """
    if max_shift <= 0:
        return images
    b, c, h, w = images.shape
    k = max_shift
    padded = images.new_zeros(b, c, h + 2 * k, w + 2 * k)
    if fill is not None:
        padded[:] = fill.to(images.dtype).view(1, c, 1, 1)
    padded[:, :, k:k + h, k:k + w] = images
    dy = torch.randint(0, 2 * k + 1, (b,), generator=generator)
    dx = torch.randint(0, 2 * k + 1, (b,), generator=generator)
    rows = (torch.arange(h).view(1, h) + dy.view(b, 1)).view(b, 1, h, 1).expand(b, c, h, w)
    cols = (torch.arange(w).view(1, w) + dx.view(b, 1)).view(b, 1, 1, w).expand(b, c, h, w)
    flat = padded.reshape(b, c, -1)
    index = rows * (w + 2 * k) + cols
    return flat.gather(2, index.reshape(b, c, -1)).reshape(b, c, h, w)
