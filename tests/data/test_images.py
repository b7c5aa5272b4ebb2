"""Reading labelled images (.npz arrays and class sub-folders), the shift augmentation, MNIST's registry entry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from seqmap.data import datasets
from seqmap.data.dataset_files import ChecksumError, npz_arrays_sha256
from seqmap.data.images import ImageError, pixel_stats, random_shift, read_folder, read_image_file, read_npz, read_split

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _npz(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path


def test_npz_with_x_y_and_with_split_keys(tmp_path):
    x = np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 4, 4)
    plain = read_npz(_npz(tmp_path / "a.npz", x=x, y=np.array([3, 1])), "train", "data.train")
    assert plain.images.shape == (2, 1, 4, 4) and plain.labels == ["3", "1"]
    assert torch.equal(plain.images[1, 0], torch.from_numpy(x[1]))
    keras = _npz(tmp_path / "k.npz", x_train=x, y_train=np.array([0, 1]), x_test=x[:1], y_test=np.array([1]))
    assert read_npz(keras, "test", "data.test").labels == ["1"]
    assert len(read_npz(keras, "train", "data.train")) == 2


def test_npz_channels_last_colour_and_string_labels(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, (3, 4, 6, 3), dtype=np.uint8)
    s = read_npz(_npz(tmp_path / "c.npz", x=x, y=np.array(["cat", "dog", "cat"])), "train", "t")
    assert s.shape == (3, 4, 6) and s.labels == ["cat", "dog", "cat"]
    assert torch.equal(s.images[2, 1], torch.from_numpy(x[2, :, :, 1]))  # channel 1 of image 2


@pytest.mark.parametrize("arrays, message", [
    ({"x": np.zeros((2, 4, 4), np.float32), "y": np.zeros(2, int)}, "pixels must be uint8"),
    ({"x": np.zeros((2, 4), np.uint8), "y": np.zeros(2, int)}, "must be (N, H, W)"),
    ({"x": np.zeros((2, 4, 4), np.uint8), "y": np.zeros(3, int)}, "2 images in x but 3 labels"),
    ({"images": np.zeros((2, 4, 4), np.uint8)}, "has no arrays x and y (or x_train and y_train)"),
    ({"x": np.zeros((2, 4, 4), np.uint8), "y": np.eye(2, dtype=np.uint8)}, "labels must be one per image (N,), got "
                                                                           "shape (2, 2)"),  # one-hot
    ({"x": np.zeros((2, 4, 4), np.uint8), "y": np.array([1.0, 0.0])}, "labels must be integers or strings, got "
                                                                      "float64"),
    ({"x": np.zeros((2, 4, 4, 2), np.uint8), "y": np.zeros(2, int)}, "C = 1 or 3, got shape (2, 4, 4, 2)"),
])
def test_npz_bad_input_is_one_line(tmp_path, arrays, message):
    with pytest.raises(ImageError) as e:
        read_npz(_npz(tmp_path / "bad.npz", **arrays), "train", "data.train")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(ImageError, match="image file not found"):
        read_npz(tmp_path / "none.npz", "train", "data.train")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ImageError, match="cannot read .* as .npz arrays"):
        read_npz(tmp_path / "junk.npz", "train", "data.train")
    (tmp_path / "list.txt").write_text("x")
    with pytest.raises(ImageError, match="neither an .npz file nor a folder"):
        read_split(tmp_path / "list.txt", "train", "data.train")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG nonsense")
    with pytest.raises(ImageError, match="cannot read .*broken.png as an image"):
        read_image_file(tmp_path / "broken.png", "L")


def _png(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


def test_folder_of_class_subfolders(tmp_path):
    rng = np.random.default_rng(1)
    a, b, c = (rng.integers(0, 256, (6, 4), dtype=np.uint8) for _ in range(3))
    _png(tmp_path / "dog" / "2.png", a)
    _png(tmp_path / "cat" / "1.png", b)
    _png(tmp_path / "cat" / "0.png", c)
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    s = read_folder(tmp_path, "data.train")
    assert s.labels == ["cat", "cat", "dog"] and s.shape == (1, 6, 4)  # sorted by class, then file; grey -> L
    assert torch.equal(s.images[0, 0], torch.from_numpy(c)) and torch.equal(s.images[2, 0], torch.from_numpy(a))
    rgb = read_folder(tmp_path, "data.train", mode="RGB")
    assert rgb.shape == (3, 6, 4) and torch.equal(rgb.images[0, 2], torch.from_numpy(c))


def test_folder_sizes_must_agree_unless_resized(tmp_path):
    _png(tmp_path / "a" / "x.png", np.zeros((6, 4), np.uint8))
    _png(tmp_path / "b" / "y.png", np.zeros((5, 5), np.uint8))
    with pytest.raises(ImageError, match="set data.image_size"):
        read_folder(tmp_path, "data.train")
    assert read_folder(tmp_path, "data.train", size=(8, 8)).shape == (1, 8, 8)
    with pytest.raises(ImageError, match="no images in class sub-folders"):
        read_folder(tmp_path / "a", "data.train")


def test_pixel_stats():
    images = torch.tensor([[[[0, 255]]], [[[255, 255]]]], dtype=torch.uint8)  # (2, 1, 1, 2)
    mean, std = pixel_stats(images)
    assert mean == [191.25] and std[0] == pytest.approx(110.4182, abs=1e-3)  # population std


def test_random_shift_moves_every_image_by_one_offset_within_range():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(1, 256, (16, 2, 7, 9), dtype=torch.uint8, generator=g)
    shifted = random_shift(images, 2, torch.Generator().manual_seed(5))
    again = random_shift(images, 2, torch.Generator().manual_seed(5))
    assert torch.equal(shifted, again)  # a seed gives the same shifts (exact resume)
    offsets = set()
    for img, out in zip(images, shifted):
        found = []
        for dy in range(-2, 3):
            for dx in range(-2, 3):
                expect = torch.zeros_like(img)
                src = img[:, max(0, -dy):7 - max(0, dy), max(0, -dx):9 - max(0, dx)]
                expect[:, max(0, dy):7 - max(0, -dy), max(0, dx):9 - max(0, -dx)] = src
                if torch.equal(out, expect):
                    found.append((dy, dx))
        assert len(found) == 1
        offsets.add(found[0])
    assert len(offsets) > 3  # not one shift for all
    assert torch.equal(random_shift(images, 0, g), images)


def test_random_shift_fills_the_uncovered_border_with_the_fill_value():
    """``fill`` (C,) pixel values (the training mean, so a shifted border reads as average, not black) for the
    pixels no source pixel moved onto; the image itself keeps its values."""
    images = torch.full((32, 2, 3, 3), 200, dtype=torch.uint8)
    shifted = random_shift(images, 1, torch.Generator().manual_seed(0), fill=torch.tensor([7.6, 30.0]))
    assert shifted.dtype == torch.uint8
    values = [set(shifted[:, c].unique().tolist()) for c in range(2)]
    assert values == [{7, 200}, {30, 200}]  # a float fill is cast to the images' dtype
    moved = (shifted[:, 0] != 200).flatten(1).any(1)
    assert 0 < int(moved.sum()) < 32  # most images moved, a (0, 0) shift keeps one whole
    assert torch.equal((shifted[:, 0] == 7), (shifted[:, 1] == 30))  # one offset for every channel


def test_holding_out_validation_images_names_the_range():
    from seqmap.data.images import ImageSet

    s = ImageSet(torch.zeros(5, 1, 2, 2, dtype=torch.uint8), ["a", "b", "a", "b", "a"], "x.npz")
    train, valid = s.split_off(2)
    assert (len(train), len(valid), valid.labels, valid.source) == (3, 2, ["b", "a"], "x.npz (last 2)")
    for n in (0, 5):
        with pytest.raises(ImageError, match=f"cannot hold out {n} of 5 images from x.npz for validation; set "
                                             "data.valid_size between 1 and 4"):
            s.split_off(n)
    with pytest.raises(ImageError, match=r"x.npz: 5 images but 4 labels"):
        ImageSet(torch.zeros(5, 1, 2, 2, dtype=torch.uint8), ["a"] * 4, "x.npz")
    with pytest.raises(ImageError, match=r"images must be uint8 \(N, C, H, W\), got torch.float32"):
        ImageSet(torch.zeros(5, 1, 2, 2), ["a"] * 5, "x.npz")


def test_npz_arrays_checksum_ignores_compression(tmp_path):
    x, y = np.arange(24, dtype=np.uint8).reshape(2, 3, 4), np.array([1, 0], np.uint8)
    np.savez(tmp_path / "a.npz", x=x, y=y)
    np.savez_compressed(tmp_path / "b.npz", y=y, x=x)
    a, b = (npz_arrays_sha256((tmp_path / n).read_bytes(), n) for n in ("a.npz", "b.npz"))
    assert a == b
    np.savez(tmp_path / "c.npz", x=x, y=y[::-1].copy())
    assert npz_arrays_sha256((tmp_path / "c.npz").read_bytes(), "c") != a
    with pytest.raises(ChecksumError, match="not a readable .npz"):
        npz_arrays_sha256(b"garbage", "g")


@pytest.mark.skipif(not (SHARED / "mnist" / "mnist.npz").is_file(), reason="shared MNIST copy not present")
def test_mnist_prepare_and_download_from_the_shared_copy(tmp_path):
    prepared = datasets.prepare("mnist", SHARED / "mnist", tmp_path / "p")
    test = read_npz(prepared / "mnist.npz", "test", "data.test")
    assert len(test) == 10_000 and test.shape == (1, 28, 28)
    assert test.labels[:10] == list("7210414959")  # the first test labels (shared README)
    mirror = "file://" + str(SHARED / "mnist")  # a mirror with Keras' layout: mnist.npz at the base URL
    downloaded = datasets.download("mnist", tmp_path / "d", base_url=mirror)
    assert (downloaded / "mnist.npz").read_bytes() == (SHARED / "mnist" / "mnist.npz").read_bytes()
    (tmp_path / "fake").mkdir()
    np.savez(tmp_path / "fake" / "mnist.npz", x_train=np.zeros((1, 28, 28), np.uint8), y_train=np.zeros(1, np.uint8))
    with pytest.raises(ChecksumError, match="expected the arrays' sha256"):
        datasets.prepare("mnist", tmp_path / "fake", tmp_path / "q")


def test_a_16_bit_grey_image_is_scaled_to_8_bits_not_clipped(tmp_path):
    pixels = np.array([[0, 1, 128, 255], [17, 200, 64, 3]], dtype=np.uint8)
    Image.fromarray(pixels.astype(np.uint16) * 257).save(tmp_path / "deep.png")  # 8-bit values spread to 16 bits
    assert Image.open(tmp_path / "deep.png").mode.startswith("I")
    for mode in ("L", "RGB"):
        image = read_image_file(tmp_path / "deep.png", mode)
        assert torch.equal(image, torch.from_numpy(pixels)[None].expand(image.size(0), -1, -1))


def test_an_unreadable_upload_is_named_not_printed_and_a_bomb_says_too_large(tmp_path, monkeypatch):
    import io

    with pytest.raises(ImageError) as e:
        read_image_file(io.BytesIO(b"not an image"), "L", name="image[2]")
    assert "BytesIO" not in str(e.value) and "image[2]" in str(e.value)
    Image.new("L", (64, 64)).save(tmp_path / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Pillow refuses twice its limit: 64 x 64 > 2000
    with pytest.raises(ImageError, match=r"big.png is too large to decode \(.*\); give a smaller image"):
        read_image_file(tmp_path / "big.png", "L")
