"""The toy run: a quick check that training lowers the loss, and (slow) that the shipped configs learn."""

from pathlib import Path

import pytest
import torch
import yaml

from seqmap.config import ConfigError, ModelConfig
from seqmap.data.synthetic import BOS, EOS, PAD, SyntheticTask
from seqmap.training.toy import ToyConfig, ToyRun, lm_sequences, train_toy
from seqmap.training.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "toy"


def test_a_hundred_steps_lower_the_loss(tiny_transformer_cfg):
    toy = ToyConfig(task="reverse", vocab=10, min_len=2, max_len=5, steps=100, batch_size=32, lr=3e-3,
                    warmup=10, eval_size=20, log_every=0)
    metrics = train_toy(tiny_transformer_cfg, toy, log=None)
    assert metrics["final_loss"] < 0.6 * metrics["first_loss"]
    assert all(torch.isfinite(torch.tensor(metrics["losses"])))
    assert 0.0 <= metrics["exact_match"] <= metrics["token_accuracy"] <= 1.0
    assert metrics["eval_size"] == 20 and len(metrics["examples"]) == 3


@pytest.mark.parametrize("family", ["transformer", "convs2s", "lm"])
def test_the_toy_trains_through_the_one_trainer(family, monkeypatch):
    """No second training loop: every toy step is a ``Trainer.step`` on one batch of the task."""
    steps, real = [], Trainer.step

    def counted(self, micro_batches):
        steps.append([b.n_tokens for b in micro_batches])
        return real(self, micro_batches)

    monkeypatch.setattr(Trainer, "step", counted)
    model = ModelConfig(family=family, d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=1, dropout=0.0,
                        emb_size=8, hidden_size=8)
    toy = ToyConfig(task="copy", vocab=8, min_len=2, max_len=4, steps=3, batch_size=4, warmup=1, eval_size=4,
                    log_every=0)
    metrics = train_toy(model, toy, log=None)
    assert len(steps) == 3 and all(len(micro) == 1 and micro[0] > 0 for micro in steps)
    assert len(metrics["losses"]) == 3


def test_lm_runs_end_to_end():
    model = ModelConfig(family="lm", d_model=32, n_heads=2, d_ff=64, dec_layers=1, dropout=0.0)
    toy = ToyConfig(task="copy", vocab=8, min_len=2, max_len=4, steps=30, batch_size=16, warmup=5,
                    eval_size=10, log_every=0)
    metrics = train_toy(model, toy, log=None)
    assert metrics["final_loss"] < metrics["first_loss"]
    assert metrics["eval_size"] == 10


def test_lm_framing_puts_the_loss_on_the_target_only():
    (batch,) = SyntheticTask("reverse", vocab=10, min_len=2, max_len=4).batches(1, 8, seed=0)
    sep = 10
    inputs, targets = lm_sequences(batch, sep)
    for i in range(8):
        src = batch.src[i][batch.src_mask[i]].tolist()
        tgt = src[::-1]
        n = len(src)
        assert inputs[i, : 2 * n + 2].tolist() == [BOS, *src, sep, *tgt]
        assert targets[i, : 2 * n + 2].tolist() == [PAD] * (n + 1) + tgt + [EOS]
        assert (targets[i, 2 * n + 2 :] == PAD).all()


def test_toy_config_rejects_bad_values_and_unknown_keys():
    with pytest.raises(ConfigError, match="toy.task"):
        ToyConfig(task="rotate")
    with pytest.raises(ConfigError, match="min_len"):
        ToyConfig(min_len=9, max_len=3)
    with pytest.raises(ConfigError, match="did you mean toy.steps"):
        ToyRun.from_dict({"toy": {"stpes": 3}})
    with pytest.raises(ConfigError, match="src_vocab"):
        train_toy(ModelConfig(src_vocab=99), ToyConfig(steps=1), log=None)
    with pytest.raises(ConfigError, match=r"model.family = classifier cannot learn a toy task .*; use one of "
                                          r"transformer, rnn, convs2s, lm, rnn_lm"):  # not: model.n_classes >= 2
        train_toy(ModelConfig(family="classifier"), ToyConfig(steps=1), log=None)


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_configs_parse(path):
    run = ToyRun.from_dict(yaml.safe_load(path.read_text()))
    assert run.toy.task in path.stem


@pytest.mark.slow
@pytest.mark.parametrize("name", ["reverse_transformer", "reverse_rnn", "reverse_convs2s", "reverse_lm"])
def test_shipped_config_learns_reverse(name):
    run = ToyRun.from_dict(yaml.safe_load((CONFIGS / f"{name}.yaml").read_text()))
    metrics = train_toy(run.model, run.toy, log=None)
    assert metrics["exact_match"] >= 0.9, metrics["examples"]


@pytest.mark.parametrize("changes, message", [
    ({"steps": 0}, "toy.steps must be > 0, got 0"),
    ({"vocab": 3}, "toy.vocab = 3 leaves no symbols; ids 0-2 are pad, bos, eos, so use >= 4"),
    ({"lr": 0.0}, "toy.lr must be > 0, got 0.0"),
    ({"clip": -1.0}, "toy.clip must be >= 0, got -1.0"),  # named none of the five options it checks
    ({"log_every": -5}, "toy.log_every must be >= 0, got -5"),
    ({"eval_seed": 0, "seed": 0}, "toy.eval_seed = 0 equals toy.seed; held-out data needs another seed"),
])
def test_each_bad_toy_value_is_named(changes, message):
    with pytest.raises(ConfigError) as info:
        ToyConfig(**changes)
    assert str(info.value) == message


def test_toy_command_logs_every_log_every_steps_and_prints_its_metrics(capsys):
    """`seqmap toy` in this process (tests/test_cli.py runs it as a user would, in a subprocess)."""
    import json

    from seqmap.cli import main

    assert main(["toy", str(CONFIGS / "reverse_transformer.yaml"), "--model.d_model", "16", "--model.d_ff", "32",
                 "--toy.steps", "6", "--toy.log_every", "3", "--toy.warmup", "2", "--toy.eval_size", "5",
                 "--toy.examples", "2", "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines if line.startswith("step")] == [["step", "3"], ["step", "6"]]
    assert sum(line.startswith("  src ") for line in lines) == 2
    metrics = json.loads(lines[-1].removeprefix("metrics "))
    assert (metrics["task"], metrics["family"], metrics["eval_size"], metrics["threads"]) == (
        "reverse", "transformer", 5, 1)
    assert 0.0 <= metrics["exact_match"] <= metrics["token_accuracy"] <= 1.0 and metrics["final_loss"] > 0
