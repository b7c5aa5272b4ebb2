"""Tiny trained runs for the server tests: a reverse-the-words Transformer and a character LM (seconds each)."""

import os
import random
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from seqmap.config import RunConfig, from_dict
from seqmap.runs import LoadedRun, load_run
from seqmap.training.run_trainer import train

LETTERS = "abcdefghij"


@contextmanager
def one_torch_thread():
    """One CPU thread while the block runs (these tests share the machine with other work), then as before."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    with one_torch_thread():
        yield


def _reverse_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.choice(LETTERS) for _ in range(rng.randint(2, 7))]
        pairs.append((" ".join(words), " ".join(reversed(words))))
    return pairs


def translation_config(root: Path, steps: int = 200) -> dict:
    data = {"tokenizer": "word", "max_len": 32}
    for split, n, seed in (("train", 400, 1), ("valid", 16, 2)):
        pairs = _reverse_pairs(n, seed)
        (root / f"{split}.src").write_text("".join(s + "\n" for s, _ in pairs))
        (root / f"{split}.tgt").write_text("".join(t + "\n" for _, t in pairs))
        data[f"{split}_src"], data[f"{split}_tgt"] = str(root / f"{split}.src"), str(root / f"{split}.tgt")
    return {"model": {"family": "transformer", "d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 2,
                      "dec_layers": 2, "dropout": 0.0},
            "data": data,
            "train": {"max_steps": steps, "max_tokens": 600, "lr": 5e-3, "warmup": 20, "schedule": "constant",
                      "valid_every": steps, "log_every": steps, "valid_bleu": False, "seed": 3, "device": "cpu"},
            "decode": {"max_len_a": 1.0, "max_len_b": 5}}


def lm_config(root: Path, steps: int = 40) -> dict:
    text = "to be or not to be, that is the question.\n" * 40
    (root / "train.txt").write_text(text)
    (root / "valid.txt").write_text(text[:400])
    return {"model": {"family": "lm", "d_model": 32, "n_heads": 2, "d_ff": 64, "dec_layers": 2, "dropout": 0.0},
            "data": {"task": "lm", "tokenizer": "char", "train": str(root / "train.txt"),
                     "valid": str(root / "valid.txt"), "context": 32},
            "train": {"max_steps": steps, "batch_size": 8, "lr": 3e-3, "warmup": 5, "valid_every": steps,
                      "log_every": steps, "device": "cpu"},
            "decode": {"max_new_tokens": 24}}


def _train(cfg: dict, run_dir: Path) -> Path:
    with open(os.devnull, "w") as devnull, one_torch_thread():
        train(from_dict(RunConfig, cfg), run_dir, stream=devnull)
    return run_dir


@pytest.fixture(scope="session")
def translation_run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("serve_translation")
    return _train(translation_config(root), root / "run")


@pytest.fixture(scope="session")
def lm_run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("serve_lm")
    return _train(lm_config(root), root / "run")


@pytest.fixture(scope="session")
def translation_run(translation_run_dir) -> LoadedRun:
    return load_run(translation_run_dir)


@pytest.fixture(scope="session")
def lm_run(lm_run_dir) -> LoadedRun:
    return load_run(lm_run_dir)


def text_classifier_config(root: Path, steps: int = 60) -> dict:
    """Texts whose label is the colour word among a few fillers (red / green / blue)."""
    rng = random.Random(5)
    for split, n in (("train", 300), ("valid", 30)):
        rows = []
        for _ in range(n):
            label = rng.choice(["red", "green", "blue"])
            words = [rng.choice(LETTERS) for _ in range(rng.randint(1, 6))]
            words.insert(rng.randrange(len(words) + 1), label)
            rows.append(" ".join(words) + "\t" + label)
        (root / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return {"model": {"family": "classifier", "d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 2,
                      "dropout": 0.0, "positional": "learned", "max_len": 16},
            "data": {"task": "classification", "tokenizer": "word", "vocab_size": 64, "max_len": 15,
                     "train": str(root / "train.tsv"), "valid": str(root / "valid.tsv")},
            "train": {"max_steps": steps, "max_tokens": 400, "lr": 3e-3, "warmup": 5, "schedule": "constant",
                      "valid_every": steps, "log_every": steps, "label_smoothing": 0.0, "device": "cpu"}}


def image_classifier_config(root: Path, steps: int = 40) -> dict:
    """8x8 grey images of a bright vertical bar at the left, middle or right (the label)."""
    import numpy as np

    rng = np.random.default_rng(7)
    y = rng.integers(0, 3, 300)
    x = rng.integers(0, 40, (300, 8, 8)).astype(np.uint8)
    for i, label in enumerate(y):
        x[i, :, (0, 3, 6)[label]:(0, 3, 6)[label] + 2] = 250
    np.savez(root / "bars.npz", x=x, y=np.array(["left", "middle", "right"])[y])
    return {"model": {"family": "vit", "patch_size": 2, "d_model": 16, "n_heads": 2, "d_ff": 32, "enc_layers": 2,
                      "dropout": 0.0, "positional": "learned", "max_len": 17},
            "data": {"task": "image", "train": str(root / "bars.npz"), "valid_size": 40},
            "train": {"max_steps": steps, "batch_size": 32, "lr": 3e-3, "warmup": 5, "schedule": "constant",
                      "valid_every": steps, "log_every": steps, "label_smoothing": 0.0, "device": "cpu"}}


@pytest.fixture(scope="session")
def text_classifier_run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("serve_text_classifier")
    return _train(text_classifier_config(root), root / "run")


@pytest.fixture(scope="session")
def image_classifier_run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("serve_image_classifier")
    return _train(image_classifier_config(root), root / "run")


@pytest.fixture(scope="session")
def text_classifier_run(text_classifier_run_dir) -> LoadedRun:
    return load_run(text_classifier_run_dir)


@pytest.fixture(scope="session")
def image_classifier_run(image_classifier_run_dir) -> LoadedRun:
    return load_run(image_classifier_run_dir)


def _speech_task():
    """tests/test_speech_run.py as a module: its tone-words task (``config``, ``tone``, ``wav_file``, ``RATE``)."""
    import importlib.util

    pytest.importorskip("librosa", reason="the speech extra (pip install 'seqmap[speech]') is not installed")
    path = Path(__file__).resolve().parents[1] / "test_speech_run.py"
    spec = importlib.util.spec_from_file_location("speech_run_helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def speech_run_dir(tmp_path_factory) -> Path:
    """The tone-words speech model of tests/test_speech_run.py (about 10 s of training)."""
    import yaml

    root = tmp_path_factory.mktemp("serve_speech")
    cfg = yaml.safe_load(Path(_speech_task().config(root)).read_text())
    cfg["train"]["device"] = "cpu"
    return _train(cfg, root / "run")


@pytest.fixture(scope="session")
def speech_run(speech_run_dir) -> LoadedRun:
    return load_run(speech_run_dir)


@pytest.fixture(scope="session")
def speech_task():
    """The helpers of tests/test_speech_run.py: ``tone``, ``wav_file``, ``WORDS``, ``RATE``."""
    return _speech_task()
