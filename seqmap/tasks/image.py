"""Image classification: one label per image, from an .npz or a folder of class sub-folders; batches of
``train.batch_size`` images, each shifted by up to ``data.augment_shift`` pixels when asked."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from seqmap.config import DataConfig
from seqmap.data.batching import collate_images
from seqmap.data.corpus import DataError
from seqmap.data.images import ImageSet, pixel_stats, random_shift, read_split
from seqmap.data.labels import LabelSet
from seqmap.data.pipeline import held_out_count, log_held_out, run_labels, valid_name
from seqmap.data.samplers import fixed_size_batches
from seqmap.data.tokenizers import PAD
from seqmap.tasks.base import Task, TrainingContext
from seqmap.training.validate import evaluating, image_metrics, log_label_scores


@dataclass
class ImageData:
    labels: LabelSet  # saved as RUN_DIR/tokenizer/labels.json (the run's only "tokenizer")
    train: ImageSet
    valid: ImageSet
    test: ImageSet | None
    train_ids: list[int]  # class ids of the training and validation images
    valid_ids: list[int]
    mean: list[float]  # per-channel pixel mean / std of the training images (0..255)
    std: list[float]


def read_image_split(cfg: DataConfig, split: str) -> ImageSet | None:
    """``data.<split>`` read as images (an .npz or a folder), or None when it is not set."""
    path = getattr(cfg, split)
    if path is None:
        return None
    size = tuple(cfg.image_size) if cfg.image_size else None
    return read_split(path, split, f"data.{split}", mode=cfg.image_mode, size=size)


def load_images(cfg: DataConfig, run_dir: Path, log: Callable[[str], None] = print) -> ImageData:
    """Labelled images for the ``image`` task: train, valid (``data.valid``, or the last ``data.valid_size``
    training images) and test (may be absent); all must have the training images' shape."""
    if cfg.train is None:
        raise DataError("no training images: set data.train to an .npz file or a folder of class sub-folders")
    train = read_image_split(cfg, "train")
    valid = read_image_split(cfg, "valid")
    if valid is None:
        if cfg.valid_size <= 0:
            raise DataError("no validation images: set data.valid, or data.valid_size to hold out that many of "
                            "the training images")
        train, valid = train.split_off(held_out_count(len(train), cfg, "images", f"data.train ({cfg.train})"))
    test = read_image_split(cfg, "test")
    for name, part in (("valid", valid), ("test", test)):
        if part is not None and part.shape != train.shape:
            raise DataError(f"data.{name} images are {'x'.join(map(str, part.shape))} but the training images are "
                            f"{'x'.join(map(str, train.shape))} (channels x height x width); use one size, or "
                            "set data.image_size")
    log_held_out(cfg, len(train), "images", log)
    labels = run_labels(train.labels, cfg, run_dir, log)
    train_ids = [labels.encode(v, where="data.train") for v in train.labels]
    valid_ids = [labels.encode(v, where=valid_name(cfg)) for v in valid.labels]
    mean, std = pixel_stats(train.images)
    log(f"images: {len(train)} train / {len(valid)} valid / {0 if test is None else len(test)} test, "
        f"{'x'.join(map(str, train.shape))} (channels x height x width), pixel mean {mean} std {std}")
    return ImageData(labels, train, valid, test, train_ids, valid_ids, mean, std)


class ImageTask(Task):
    name = "image"

    def load(self, cfg, run_dir, log=print):
        return load_images(cfg, run_dir, log)

    def model_fields(self, data: ImageData) -> dict:
        c, h, w = data.train.shape
        return dict(n_classes=len(data.labels), image_channels=c, image_height=h, image_width=w,
                    pixel_mean=data.mean, pixel_std=data.std, src_vocab=0, tgt_vocab=0, pad_id=PAD)

    def batches(self, ctx: TrainingContext):
        """``train.batch_size`` images per batch, shuffled per epoch; ``data.augment_shift`` moves each image by a
        random offset drawn from a generator seeded by (seed, epoch, batch), so a resumed run draws the same."""
        t, data, shift = ctx.cfg.train, ctx.data, ctx.cfg.data.augment_shift
        labels = torch.tensor(data.train_ids, dtype=torch.long)

        def make_batch(indices: list[int], epoch: int, index: int):
            index_t = torch.tensor(indices, dtype=torch.long)
            images = data.train.images[index_t]
            if shift:
                g = torch.Generator().manual_seed((t.seed * 1_000_003 + epoch) * 1_000_003 + index)
                images = random_shift(images, shift, g)
            return collate_images(images, labels[index_t])

        return ctx.epoch_batches(
            lambda epoch: fixed_size_batches(len(labels), t.batch_size, shuffle=True, seed=t.seed, epoch=epoch),
            make_batch)

    def validate(self, model, data: ImageData, cfg, device, log):
        """loss, accuracy and macro-F1 of the validation images."""
        with evaluating(model):
            out = image_metrics(model, data.valid.images, data.valid_ids, len(data.labels), cfg.train.batch_size,
                                device)
            log_label_scores(out, log)
        return out

    def test(self, trainer):
        """Loss, accuracy and macro-F1 of the best checkpoint on the test images (``data.test``)."""
        cfg, data, log = trainer.cfg, trainer.data, trainer.log
        if data.test is None:
            return None
        best = trainer.load_best()
        labels = [data.labels.encode(v, where="data.test") for v in data.test.labels]
        result = image_metrics(trainer.model.eval(), data.test.images, labels, len(data.labels),
                               cfg.train.batch_size, trainer.device)
        log.metrics("test", trainer.state["step"], **result)
        log.info(f"test ({len(labels)} images, {best.name}): accuracy {result['accuracy']:.2f} macro-F1 "
                 f"{result['macro_f1']:.2f} loss {result['loss']:.4f}")
        return result


TASK = ImageTask()
