"""An image classifier (ViT) end to end through config / train / evaluate / classify / plot, and exact resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file

from seqmap.cli import main
from seqmap.runs import load_run

pytestmark = pytest.mark.usefixtures("one_thread")


def bars(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """8x8 grey images with a bright 2-pixel-wide vertical bar at columns 0-1, 3-4 or 6-7 (the class), noise around."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = rng.integers(0, 60, (n, 8, 8)).astype(np.uint8)
    for i, label in enumerate(y):
        col = (0, 3, 6)[label]
        x[i, :, col:col + 2] = rng.integers(180, 256, (8, 2))
    return x, np.array(["left", "middle", "right"])[y]


def config(tmp_path, steps: int = 60) -> str:
    x, y = bars(400, 0)
    xt, yt = bars(90, 1)
    np.savez(tmp_path / "bars.npz", x_train=x, y_train=y, x_test=xt, y_test=yt)
    cfg = {"model": {"family": "vit", "patch_size": 2, "d_model": 16, "n_heads": 2, "d_ff": 32, "enc_layers": 1,
                     "dropout": 0.0, "positional": "learned", "max_len": 17},
           "data": {"task": "image", "train": str(tmp_path / "bars.npz"), "test": str(tmp_path / "bars.npz"),
                    "valid_size": 60, "augment_shift": 1},
           "train": {"max_steps": steps, "batch_size": 32, "lr": 3e-3, "warmup": 5, "schedule": "constant",
                     "valid_every": 20, "log_every": 10, "early_stopping": "accuracy", "label_smoothing": 0.0}}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_train_evaluate_classify_plot(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", config(tmp_path), "--run-dir", str(run_dir)]) == 0
    result = json.loads(capsys.readouterr().out.split("result ", 1)[1])
    assert result["test_accuracy"] >= 90.0  # the bars are easy; an untrained or broken model scores ~33
    run = load_run(run_dir)
    assert run.labels.names == ("left", "middle", "right") and run.cfg.model.image_height == 8
    # the same test images as a folder of PNGs score exactly as the .npz did
    xt, yt = bars(90, 1)
    for i, (img, label) in enumerate(zip(xt, yt)):
        (tmp_path / "pngs" / label).mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(tmp_path / "pngs" / label / f"{i:03d}.png")
    assert main(["evaluate", str(run_dir), "--data", str(tmp_path / "pngs"), "--confusion",
                 str(tmp_path / "cm.png")]) == 0
    out = capsys.readouterr().out
    assert f"accuracy = {result['test_accuracy']:.2f}" in out and (tmp_path / "cm.png").stat().st_size > 0
    assert main(["classify", str(run_dir), str(tmp_path / "pngs" / yt[0] / "000.png"), "--top", "2"]) == 0
    first = capsys.readouterr().out.split("\t")
    assert first[0] == yt[0] and float(first[1]) > 0.5
    assert main(["plot", "attention", str(run_dir), "--image", str(tmp_path / "pngs" / yt[0] / "000.png"),
                 "--out", str(tmp_path / "attn.png")]) == 0
    assert (tmp_path / "attn.png").stat().st_size > 0
    assert main(["translate", str(run_dir), "x"]) == 2
    assert "is a classifier; use `seqmap classify`" in capsys.readouterr().err


def test_resume_is_exact_with_augmentation(tmp_path):
    cfg = config(tmp_path, steps=40)
    assert main(["train", cfg, "--run-dir", str(tmp_path / "straight")]) == 0
    assert main(["train", cfg, "--run-dir", str(tmp_path / "resumed"), "--train.max_steps", "20"]) == 0
    assert main(["train", "--resume", str(tmp_path / "resumed"), "--train.max_steps=40"]) == 0
    a = load_file(tmp_path / "straight" / "checkpoints" / "step-000040" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "checkpoints" / "step-000040" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("override, message", [
    (["--data.valid_size", "0"], "no validation images: set data.valid, or data.valid_size"),
    (["--data.valid_size", "400"], "cannot hold out 400 of 400 images"),
    (["--model.patch_size", "3"], "model.patch_size=3 must divide the image size 8x8"),
    (["--model.family", "classifier"], "model.family=vit and data.task=image go together (got model.family=classifier"),
])
def test_bad_image_configs_are_one_line(tmp_path, capsys, override, message):
    assert main(["train", config(tmp_path), "--run-dir", str(tmp_path / "r"), *override]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
