"""``seqmap train CONFIG --init RUN_DIR``: fine-tuning starts from the run's weights and keeps its tokenizer."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from seqmap.cli import main
from seqmap.runs import load_run

pytestmark = pytest.mark.usefixtures("one_thread")


def _classifier_config(tmp_path, name: str, steps: int) -> str:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from test_classification_run import config  # the same small topic-classification task

    cfg = config(tmp_path)
    cfg["train"].update(max_steps=steps, valid_every=steps)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_init_starts_from_the_runs_weights_and_tokenizer(tmp_path, capsys):
    first = _classifier_config(tmp_path, "a.yaml", 20)
    assert main(["train", first, "--run-dir", str(tmp_path / "a")]) == 0
    # the same data under another tokenizer setting: --init keeps the initial run's tokenizer anyway
    second = yaml.safe_load(open(first))
    second["data"]["vocab_size"] = 50
    second["model"] = {"dropout": 0.2}  # dropout may change; the architecture may not
    second["train"].update(max_steps=1, valid_every=1, lr=1e-12, warmup=0)  # one step that changes ~nothing
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(second))
    assert main(["train", str(tmp_path / "b.yaml"), "--init", str(tmp_path / "a"), "--run-dir",
                 str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    a, b = load_run(tmp_path / "a"), load_run(tmp_path / "b")
    assert (tmp_path / "b" / "tokenizer" / "tokenizer.json").read_text() == \
        (tmp_path / "a" / "tokenizer" / "tokenizer.json").read_text()
    assert b.cfg.model.dropout == 0.2 and b.cfg.model.d_model == a.cfg.model.d_model
    wa = load_file(a.checkpoint / "model.safetensors")
    wb = load_file(b.checkpoint / "model.safetensors")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)  # lr 1e-12: still the initial weights
    assert "initialised from" in (tmp_path / "b" / "train.log").read_text()
    assert json.loads(out.rsplit("result ", 1)[1])["test_accuracy"] >= 80.0  # it starts trained


def test_init_mistakes_are_one_line(tmp_path, capsys):
    first = _classifier_config(tmp_path, "a.yaml", 2)
    assert main(["train", first, "--run-dir", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    assert main(["train", first, "--init", str(tmp_path / "a"), "--run-dir", str(tmp_path / "c")]) == 0  # same model
    capsys.readouterr()
    assert main(["train", first, "--init", str(tmp_path / "a"), "--run-dir", str(tmp_path / "c2"),
                 "--model.d_model", "64"]) == 2
    assert "with --init the model is the initial run's; remove model.d_model" in capsys.readouterr().err
    assert main(["train", first, "--init", str(tmp_path / "nowhere"), "--run-dir", str(tmp_path / "d")]) == 2
    assert f"{tmp_path / 'nowhere'} does not exist" in capsys.readouterr().err
