"""`seqmap train` refusals before any training: a run directory that is a file, a resume that changes the run."""

from pathlib import Path

import pytest

from seqmap.checkpoints import CheckpointManager
from seqmap.cli import main
from seqmap.config import DataConfig, ModelConfig, RunConfig, TrainConfig, save_config, to_dict
from seqmap.models.builder import build_model

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "tinyshakespeare_char.yaml"


def test_a_run_dir_that_is_a_file_is_a_one_line_error(tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.write_text("not a run\n")
    assert main(["train", str(CONFIG), "--run-dir", str(taken)]) == 2
    assert capsys.readouterr().err == f"seqmap: error: the run directory {taken} is a file; choose another --run-dir\n"
    assert taken.read_text() == "not a run\n"


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A run directory with one checkpoint of a tiny Transformer, as `seqmap train` leaves it."""
    cfg = RunConfig(model=ModelConfig(src_vocab=12, tgt_vocab=12, d_model=16, n_heads=2, d_ff=32, enc_layers=1,
                                      dec_layers=1),
                    data=DataConfig(train="train.tsv", tokenizer="char"), train=TrainConfig(device="cpu"))
    CheckpointManager(tmp_path).save(10, model=build_model(cfg.model), trainer_state={"step": 10},
                                     config=to_dict(cfg))
    save_config(cfg, tmp_path / "config.yaml")
    return tmp_path


@pytest.mark.parametrize("override, message", [
    ("--model.d_model=32", "model.d_model is 16 in {ckpt} but 32 now"),
    ("--data.tokenizer=word", "data.tokenizer is 'char' in {ckpt} but 'word' now"),
    ("--train.optimizer=sgd", "train.optimizer is 'adamw' in {ckpt} but 'sgd' now"),
    ("--train.early_stopping=bleu", "train.early_stopping is 'loss' in {ckpt} but 'bleu' now"),  # after training
])
def test_resume_refuses_a_changed_model_data_or_optimiser_and_keeps_the_config(run_dir, override, message, capsys):
    before = (run_dir / "config.yaml").read_text()
    assert main(["train", "--resume", str(run_dir), *override.split("=")]) == 2  # --key VALUE as --key=VALUE
    err = capsys.readouterr().err
    assert err.startswith(f"seqmap: error: --resume {run_dir}: "
                          + message.format(ckpt=run_dir / "checkpoints" / "step-000010"))
    assert err.endswith("undo the change, or train a new run in another --run-dir\n") and err.count("\n") == 1
    assert (run_dir / "config.yaml").read_text() == before


def test_an_override_may_come_before_the_config(tmp_path, capsys):
    """argparse took the value of `--model.d_model 7` for CONFIG (config file not found: 7)."""
    assert main(["train", "--model.d_model", "7", str(CONFIG), "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == "seqmap: error: model.d_model=7 must be divisible by model.n_heads=4\n"


@pytest.mark.parametrize("rank, prefix", [("0", ""), ("1", "[rank 1] ")])
def test_under_torchrun_the_processes_but_rank_0_name_their_rank_in_an_error(tmp_path, monkeypatch, capsys, rank,
                                                                             prefix):
    """Every process of `torchrun --nproc_per_node 2 -m seqmap train` printed `seqmap: error: ...`: one error read
    as two. Rank 0's line is the report; another's says whose it is (an error of that process alone stays seen)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    assert main(["train", str(CONFIG), "--train.keep_last", "0", "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == (f"{prefix}seqmap: error: train.keep_last must be >= 1 (the latest checkpoint "
                                       "is needed to resume), got 0\n")


def test_a_schedule_that_cannot_run_is_refused_before_the_data_is_read(tmp_path, capsys):
    """train.schedule=cosine without train.max_steps was found when the trainer was built: after the data had been
    read and the tokenizer trained (minutes on a real corpus), leaving a run directory without a checkpoint."""
    assert main(["train", str(CONFIG), "--train.schedule", "cosine", "--train.max_steps", "0", "--train.max_epochs",
                 "2", "--data.train", str(tmp_path / "not_read.txt"), "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.startswith("seqmap: error: train.schedule=cosine decays from train.warmup to "
                                              "train.max_steps, so it needs train.max_steps > train.warmup (got 0 and")
    assert not (tmp_path / "run").exists()
