"""The training loop end to end on a tiny corpus: run directory, exact resume after SIGKILL,
two processes equal one, NaN steps skipped, and the commands that use a trained run."""

import errno
import io
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from safetensors import SafetensorError

from seqmap.checkpoints import CheckpointError
from seqmap.checkpoints import files as checkpoint_files
from seqmap.cli import main
from seqmap.config import RunConfig, from_dict
from seqmap.data.corpus import DataError
from seqmap.data.tokenizers import load_tokenizer
from seqmap.evaluation import evaluate_test_split
from seqmap.training import trainer as trainer_module
from seqmap.training.run_trainer import train
from seqmap.training.runlog import read_metrics
from seqmap.training.trainer import TrainingError

LETTERS = "abcdefghij"


def _reverse_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.choice(LETTERS) for _ in range(rng.randint(2, 7))]
        pairs.append((" ".join(words), " ".join(reversed(words))))
    return pairs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for split, n, seed in (("train", 400, 1), ("valid", 24, 2), ("test", 24, 3)):
        pairs = _reverse_pairs(n, seed)
        (root / f"{split}.src").write_text("".join(s + "\n" for s, _ in pairs))
        (root / f"{split}.tgt").write_text("".join(t + "\n" for _, t in pairs))
    return root


def config(corpus: Path, **train) -> dict:
    data = {"tokenizer": "word", "max_len": 32}
    for split in ("train", "valid", "test"):
        data[f"{split}_src"], data[f"{split}_tgt"] = str(corpus / f"{split}.src"), str(corpus / f"{split}.tgt")
    t = {"max_steps": 30, "max_tokens": 200, "lr": 3e-3, "warmup": 5, "valid_every": 10, "log_every": 1,
         "label_smoothing": 0.1, "seed": 3}
    t.update(train)
    return {"model": {"family": "transformer", "d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 1,
                      "dec_layers": 1, "dropout": 0.1},
            "data": data, "train": t}


def write_config(tmp_path: Path, cfg: dict) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def train_losses(run_dir: Path) -> dict[int, float]:
    """step -> train loss; a step logged twice (before a kill and after resume) keeps its last value."""
    return {row["step"]: row["loss"] for row in read_metrics(run_dir, "train")}


def test_run_directory_explains_itself(corpus, tmp_path):
    result = train(from_dict(RunConfig, config(corpus)), tmp_path / "run", stream=open(os.devnull, "w"),
                   test=evaluate_test_split)
    run = tmp_path / "run"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"]["src_vocab"] > 10 and saved["model"]["tgt_vocab"] == saved["model"]["src_vocab"]
    assert (run / "tokenizer" / "tokenizer.json").exists() and list((run / "cache").glob("*.npz"))
    index = json.loads((run / "checkpoints" / "index.json").read_text())
    assert index["last"] == "step-000030" and (run / "checkpoints" / "step-000030" / "model.safetensors").exists()
    valid = read_metrics(run, "valid")
    assert [v["step"] for v in valid] == [10, 20, 30]
    assert {"loss", "ppl", "bleu", "chrf", "bleu_signature"} <= set(valid[0])
    losses = train_losses(run)
    assert sorted(losses) == list(range(1, 31)) and losses[30] < losses[1]
    assert "source" in (run / "train.log").read_text()  # validation examples are logged
    assert (run / "provenance.json").is_file()  # where and with what it was trained (tests/test_provenance.py)
    assert result["test"]["sentences"] == 24 and (run / "test.hyp").read_text().count("\n") == 24
    assert "tok:13a" in result["test"]["bleu_signature"]


def test_fused_output_loss_trains_like_logits_then_loss(corpus, tmp_path, monkeypatch):
    """The Transformer trains through ``output_nll``; swapping in logits-then-loss changes no logged loss."""
    cfg = from_dict(RunConfig, config(corpus, max_steps=8, valid_every=8))
    calls = []
    fused = trainer_module.output_nll

    def counted(*args, **kwargs):
        calls.append(1)
        return fused(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "output_nll", counted)
    train(cfg, tmp_path / "fused", stream=open(os.devnull, "w"))
    assert len(calls) == 8
    monkeypatch.setattr(trainer_module, "output_nll", lambda features, output, target, pad, eps:
                        trainer_module.label_smoothed_nll(output(features), target, pad, eps))
    train(cfg, tmp_path / "logits", stream=open(os.devnull, "w"))
    fused_losses, logit_losses = train_losses(tmp_path / "fused"), train_losses(tmp_path / "logits")
    assert sorted(fused_losses) == list(range(1, 9))
    assert fused_losses == pytest.approx(logit_losses, rel=1e-5)


def test_a_run_is_not_overwritten_and_resume_needs_a_checkpoint(corpus, tmp_path):
    cfg = from_dict(RunConfig, config(corpus, max_steps=2, valid_every=2))
    train(cfg, tmp_path / "run", stream=open(os.devnull, "w"))
    with pytest.raises(TrainingError, match="--resume"):
        train(cfg, tmp_path / "run", stream=open(os.devnull, "w"))
    with pytest.raises(TrainingError, match="no checkpoint"):
        train(cfg, tmp_path / "empty", resume=True, stream=open(os.devnull, "w"))


def _another_runs_tokenizer(run: Path, record: str) -> str:
    """The refusal of a new char-tokenizer run where a word-tokenizer run left its tokenizer and ``record``."""
    return (f"{run} holds the start of another run (no checkpoint; its {record} has data.tokenizer='word' (this "
            f"run: 'char')) whose tokenizer/ this run would reuse: delete {run}, or choose another --run-dir")


def test_a_new_run_refuses_the_tokenizer_of_another_run_that_saved_no_checkpoint(corpus, tmp_path):
    """A run killed before its first checkpoint leaves its tokenizer; a new run there reused it silently, whatever
    its own data options (config.yaml then said data.tokenizer: char over a word tokenizer)."""
    cfg = config(corpus, max_steps=2, valid_every=2, valid_bleu=False)
    run = tmp_path / "run"
    train(from_dict(RunConfig, cfg), run, stream=open(os.devnull, "w"))
    shutil.rmtree(run / "checkpoints")  # as if killed before its first checkpoint
    other = dict(cfg, data=dict(cfg["data"], tokenizer="char"))
    with pytest.raises(TrainingError) as err:
        train(from_dict(RunConfig, other), run, stream=open(os.devnull, "w"))
    assert str(err.value) == _another_runs_tokenizer(run, "config.yaml")
    assert not (run / "checkpoints").exists()
    assert train(from_dict(RunConfig, cfg), run, stream=open(os.devnull, "w"))["step"] == 2  # the same data: fine


def test_a_new_run_refuses_the_tokenizer_of_a_run_that_failed_before_writing_its_config(corpus, tmp_path):
    """A run that failed after fitting its tokenizer but before config.yaml (here: data.max_len drops every pair)
    left a tokenizer that a new run reused silently, whatever its data options."""
    cfg = config(corpus, max_steps=2, valid_every=2, valid_bleu=False)
    failed = dict(cfg, data=dict(cfg["data"], max_len=1))
    run = tmp_path / "run"
    with pytest.raises(DataError, match="no training pairs left"):
        train(from_dict(RunConfig, failed), run, stream=open(os.devnull, "w"))
    assert (run / "tokenizer").is_dir() and not (run / "config.yaml").exists()
    other = dict(failed, data=dict(failed["data"], tokenizer="char"))
    with pytest.raises(TrainingError) as err:
        train(from_dict(RunConfig, other), run, stream=open(os.devnull, "w"))
    assert str(err.value) == _another_runs_tokenizer(run, "tokenizer_data.yaml")
    with pytest.raises(DataError, match="no training pairs left"):  # the same data again: its own error, not ours
        train(from_dict(RunConfig, failed), run, stream=open(os.devnull, "w"))
    assert train(from_dict(RunConfig, cfg), run, stream=open(os.devnull, "w"))["step"] == 2  # max_len: not fitted


@pytest.mark.parametrize("code, fix", [(errno.EACCES, "make {ckpts} writable (chmod u+w {ckpts})"),
                                       (errno.ENOSPC, "free some space on the disk of {ckpts}")])
def test_a_checkpoint_that_cannot_be_written_stops_in_one_line_and_keeps_the_last_one(corpus, tmp_path, monkeypatch,
                                                                                      code, fix):
    """A full disk or a read-only checkpoints folder mid-run was a traceback (safetensors' own error); the
    half-written checkpoint must not count."""
    real = checkpoint_files.save_file

    def fails_at_step_4(tensors, filename, metadata=None):
        if ".step-000004.tmp-" in filename:  # safetensors says so in its own words
            raise SafetensorError(f"Error while serializing: I/O error: {os.strerror(code)} (os error {code})")
        real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(checkpoint_files, "save_file", fails_at_step_4)
    run, ckpts = tmp_path / "run", tmp_path / "run" / "checkpoints"
    cfg = from_dict(RunConfig, config(corpus, max_steps=4, valid_every=2, valid_bleu=False))
    with pytest.raises(TrainingError) as err:
        train(cfg, run, stream=open(os.devnull, "w"))
    message = str(err.value)
    assert re.fullmatch(
        re.escape(f"cannot write {ckpts}/.step-000004.tmp-") + "[0-9a-f]{8}" + re.escape(
            f"/model.safetensors ({os.strerror(code)}): {fix.format(ckpts=ckpts)}; the checkpoints saved are intact "
            f"(the latest is step-000002): then continue with `seqmap train --resume {run}`"), message), message
    assert sorted(p.name for p in ckpts.iterdir()) == ["index.json", "step-000002"]  # no half-written step 4
    monkeypatch.setattr(checkpoint_files, "save_file", real)
    assert train(cfg, run, resume=True, stream=open(os.devnull, "w"))["step"] == 4
    assert f"resumed from {ckpts / 'step-000002'} at step 2" in (run / "train.log").read_text()


def test_a_run_dir_that_cannot_be_made_is_one_line(corpus, tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder\n")
    run = tmp_path / "file" / "run"
    assert main(["train", str(write_config(tmp_path, config(corpus))), "--run-dir", str(run), "--threads", "1"]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: cannot write {run} (Not a directory): {tmp_path / 'file'} "
                                       f"is not a folder, or choose another --run-dir\n")


def test_resume_from_a_damaged_latest_checkpoint_names_the_one_to_continue_from(corpus, tmp_path):
    cfg = from_dict(RunConfig, config(corpus, max_steps=4, valid_every=2))
    train(cfg, tmp_path / "run", stream=open(os.devnull, "w"))
    checkpoints = tmp_path / "run" / "checkpoints"
    (checkpoints / "step-000004" / "model.safetensors").write_bytes(b"cut")
    with pytest.raises(CheckpointError) as err:
        train(cfg, tmp_path / "run", resume=True, stream=open(os.devnull, "w"))
    assert str(err.value).startswith(f"cannot read {checkpoints / 'step-000004' / 'model.safetensors'} (")
    assert str(err.value).endswith(f"; the checkpoint is damaged: move {checkpoints / 'step-000004'} out of "
                                   f"{checkpoints} and resume again, to continue from step-000002")
    (checkpoints / "step-000004").rename(tmp_path / "damaged")
    train(cfg, tmp_path / "run", resume=True, stream=open(os.devnull, "w"))  # from step 2 to step 4


def _seqmap(*args, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "seqmap", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def _straight_then_started(corpus, tmp_path: Path, name: str, **train) -> tuple[Path, Path, subprocess.Popen]:
    """A run trained to its end (the reference), and the same config started again in ``name``, still running."""
    cfg_path = write_config(tmp_path, config(corpus, **train))
    straight = tmp_path / "straight"
    assert _seqmap("train", str(cfg_path), "--run-dir", str(straight), "--threads", "1").wait(timeout=300) == 0
    second = tmp_path / name
    return straight, second, _seqmap("train", str(cfg_path), "--run-dir", str(second), "--threads", "1")


def test_resume_after_sigkill_gives_the_losses_of_an_uninterrupted_run(corpus, tmp_path):
    straight, killed, proc = _straight_then_started(corpus, tmp_path, "killed", max_steps=60, valid_every=10)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if any(row["step"] >= 20 for row in read_metrics(killed, "valid")):
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert max(train_losses(killed)) < 60
    resumed = _seqmap("train", "--resume", str(killed), "--threads", "1")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()

    expected, got = train_losses(straight), train_losses(killed)
    assert sorted(got) == sorted(expected) == list(range(1, 61))
    assert got == expected  # bit-for-bit: same batches, dropout masks and optimizer state


def test_two_processes_take_the_step_of_one_process_with_the_same_global_batch(corpus, tmp_path):
    cfg = config(corpus, max_steps=6, valid_every=100, valid_bleu=False)
    cfg["model"]["dropout"] = 0.0  # ranks draw their own dropout masks; compare the maths, not the RNG
    single = tmp_path / "single"
    cfg_path = write_config(tmp_path, cfg)
    one = _seqmap("train", str(cfg_path), "--run-dir", str(single), "--train.accum_steps", "2", "--threads", "1")
    assert one.wait(timeout=300) == 0, one.stderr.read()
    double = tmp_path / "double"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          "-m", "seqmap", "train", str(cfg_path), "--run-dir", str(double), "--threads", "1"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert two.returncode == 0, two.stderr[-3000:]
    assert ", 2 processes, backend gloo" in (double / "train.log").read_text()
    expected, got = train_losses(single), train_losses(double)
    assert sorted(got) == list(range(1, 7))
    for step in expected:
        assert got[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6), step


def _torchrun(*args: str, processes: int = 2) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                           str(processes), "-m", "seqmap", *args, "--threads", "1"], capture_output=True, text=True,
                          timeout=300, env=env)


def test_one_torchrun_process_trains_in_a_group_of_one_with_the_losses_of_a_plain_process(corpus, tmp_path):
    """`torchrun --nproc_per_node 1` joined no process group, so a one-GPU machine never ran the NCCL and
    DistributedDataParallel path that several GPUs run; the log now names the group's backend."""
    cfg_path = write_config(tmp_path, config(corpus, max_steps=6, valid_every=100, valid_bleu=False))
    plain = tmp_path / "plain"
    assert _seqmap("train", str(cfg_path), "--run-dir", str(plain), "--threads", "1").wait(timeout=300) == 0
    group = tmp_path / "group"
    done = _torchrun("train", str(cfg_path), "--run-dir", str(group), processes=1)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ", one process, backend gloo" in (group / "train.log").read_text()
    assert "backend" not in (plain / "train.log").read_text()
    expected, got = train_losses(plain), train_losses(group)
    assert sorted(got) == list(range(1, 7))
    for step in expected:
        assert got[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6), step


def test_under_torchrun_a_user_error_is_reported_once_and_other_processes_name_their_rank(corpus, tmp_path):
    """Both processes printed `seqmap: error: ...`, so one bad value read as two errors."""
    cfg_path = write_config(tmp_path, config(corpus, lr=-1))
    failed = _torchrun("train", str(cfg_path), "--run-dir", str(tmp_path / "run"))
    assert failed.returncode != 0
    lines = [line for line in failed.stderr.splitlines() if "error:" in line and "train.lr" in line]
    # each process's line, unless torchrun stopped that process first when the other one failed
    assert lines and set(lines) <= {"seqmap: error: train.lr must be > 0, got -1.0",
                                    "[rank 1] seqmap: error: train.lr must be > 0, got -1.0"}, failed.stderr[-3000:]
    assert len(lines) == len(set(lines)), failed.stderr[-3000:]


def test_two_processes_resume_with_the_losses_of_an_uninterrupted_run_and_one_process_is_refused(corpus, tmp_path,
                                                                                                  capsys):
    """Each process draws its own dropout masks, but checkpoints held rank 0's RNG states only: after a torchrun
    resume rank 1 drew other masks. One process resuming a 2-process run read on from another data position."""
    cfg_path = write_config(tmp_path, config(corpus, max_steps=8, valid_every=4, valid_bleu=False))
    straight = tmp_path / "straight"
    done = _torchrun("train", str(cfg_path), "--run-dir", str(straight))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("result ") == 1  # the main process reports; the other one printed a second line
    split = tmp_path / "split"  # the run as a kill after step 4's checkpoint leaves it
    shutil.copytree(straight, split)
    shutil.rmtree(split / "checkpoints" / "step-000008")
    rows = (split / "metrics.jsonl").read_text().splitlines(keepends=True)
    (split / "metrics.jsonl").write_text("".join(r for r in rows if json.loads(r)["step"] <= 4))
    assert main(["train", "--resume", str(split), "--threads", "1"]) == 2
    assert capsys.readouterr().err == (
        f"seqmap: error: --resume {split}: step-000004 was trained by 2 processes, this is one process; each "
        f"process's data position and random state are in the checkpoint, so continue it as it ran: "
        f"`torchrun --nproc_per_node 2 -m seqmap train --resume {split}`\n")
    resumed = _torchrun("train", "--resume", str(split))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected, got = train_losses(straight), train_losses(split)
    assert sorted(got) == sorted(expected) == list(range(1, 9))
    assert got == expected  # bit-for-bit, as for one process


def test_nan_steps_are_skipped_and_persistent_nan_stops_with_a_clear_message(corpus, tmp_path, monkeypatch):
    real = trainer_module.output_nll  # the loss a Transformer trains with
    calls = {"n": 0}

    def sometimes_nan(features, *args, **kwargs):
        calls["n"] += 1
        loss, nll, n = real(features, *args, **kwargs)
        return (loss * float("nan"), nll, n) if calls["n"] in (3, 4) else (loss, nll, n)

    monkeypatch.setattr(trainer_module, "output_nll", sometimes_nan)
    result = train(from_dict(RunConfig, config(corpus, max_steps=8, valid_every=100, valid_bleu=False)),
                   tmp_path / "run", stream=open(os.devnull, "w"))
    assert result["step"] == 8
    log = (tmp_path / "run" / "train.log").read_text()
    assert "update skipped (2 in a row, 2 in all)" in log

    monkeypatch.setattr(trainer_module, "output_nll",
                        lambda features, *a, **k: tuple((x * float("nan") if i == 0 else x)
                                                      for i, x in enumerate(real(features, *a, **k))))
    with pytest.raises(TrainingError, match="3 steps in a row had a NaN/inf loss"):
        train(from_dict(RunConfig, config(corpus, max_steps=8, max_bad_steps=3, valid_bleu=False)),
              tmp_path / "run2", stream=open(os.devnull, "w"))
    assert (tmp_path / "run2" / "checkpoints" / "index.json").exists()  # the last good weights are kept


@pytest.fixture(scope="module")
def trained_run(corpus, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "run"
    train(from_dict(RunConfig, config(corpus, max_steps=20, valid_every=10, keep_last=2)), run,
          stream=open(os.devnull, "w"))
    return run


def test_translate_evaluate_and_average_commands(trained_run, corpus, tmp_path, capsys):
    assert main(["translate", str(trained_run), "a b c", "d e"]) == 0
    assert capsys.readouterr().out.count("\n") == 2  # one line per sentence, even an empty translation
    assert main(["translate", str(trained_run), "--input", str(corpus / "test.src")]) == 0
    assert capsys.readouterr().out.count("\n") == 24
    out = tmp_path / "hyps.txt"
    assert main(["evaluate", str(trained_run), "--src", str(corpus / "test.src"), "--ref", str(corpus / "test.tgt"),
                 "--out", str(out), "--tok-ref", str(corpus / "test.tgt")]) == 0
    printed = capsys.readouterr().out
    assert "BLEU = " in printed and "nrefs:1" in printed and "reference perplexity" in printed
    assert "BLEU (tokenized, lowercased) = " in printed and "tok:none" in printed
    assert out.read_text().count("\n") == 24
    checkpoints = sorted(str(p) for p in (trained_run / "checkpoints").glob("step-*"))
    assert len(checkpoints) == 2
    assert main(["average", *checkpoints, "--out", str(tmp_path / "avg")]) == 0
    assert main(["translate", str(tmp_path / "avg"), "a b"]) == 0


def test_commands_report_user_errors_in_one_line(trained_run, corpus, tmp_path, capsys):
    (tmp_path / "short.tgt").write_text("a\n")
    assert main(["evaluate", str(trained_run), "--src", str(corpus / "test.src"),
                 "--ref", str(tmp_path / "short.tgt")]) == 2
    err = capsys.readouterr().err
    assert "test.src" in err and "short.tgt" in err and "24" in err
    assert main(["translate", str(tmp_path / "missing"), "x"]) == 2
    assert f"{tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    assert main(["generate", str(trained_run), "--prompt", "a"]) == 2
    assert "translation model" in capsys.readouterr().err
    bad = write_config(tmp_path, {"model": {"famly": "rnn"}})
    assert main(["train", str(bad)]) == 2
    assert "did you mean model.family" in capsys.readouterr().err


def test_language_model_trains_and_generates(tmp_path, capsys):
    text = "to be or not to be, that is the question.\n" * 40
    (tmp_path / "train.txt").write_text(text)
    (tmp_path / "valid.txt").write_text(text[:400])
    cfg = {"model": {"family": "lm", "d_model": 32, "n_heads": 2, "d_ff": 64, "dec_layers": 2, "dropout": 0.0},
           "data": {"task": "lm", "tokenizer": "char", "train": str(tmp_path / "train.txt"),
                    "valid": str(tmp_path / "valid.txt"), "test": str(tmp_path / "valid.txt"), "context": 32},
           "train": {"max_steps": 40, "batch_size": 8, "lr": 3e-3, "warmup": 5, "valid_every": 40, "log_every": 10}}
    result = train(from_dict(RunConfig, cfg), tmp_path / "lm", stream=open(os.devnull, "w"), test=evaluate_test_split)
    assert result["step"] == 40
    tok = load_tokenizer(tmp_path / "lm" / "tokenizer")
    assert tok.decode(tok.encode("be,\nthat")) == "be,\nthat"  # the newline is a character it knows
    valid = read_metrics(tmp_path / "lm", "valid")[-1]
    assert valid["ppl"] < 10  # 17 distinct characters; a model that learned nothing is near 17
    assert result["test"]["ppl"] == pytest.approx(valid["ppl"], rel=1e-4)  # test text = valid text here
    assert main(["generate", str(tmp_path / "lm"), "--prompt", "to be", "--decode.max_new_tokens", "20",
                 "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("to be") and len(out.strip()) > len("to be")
    # seqmap evaluate scores the same text later: its own test split, a --data file, its validation split
    ppl = f"perplexity = {result['test']['ppl']:.2f}   ({result['test']['tokens']} tokens of "
    assert main(["evaluate", str(tmp_path / "lm")]) == 0
    assert capsys.readouterr().out == (f"loss = {result['test']['loss']:.4f}   {ppl}its test split, windows of 32)\n")
    assert main(["evaluate", str(tmp_path / "lm"), "--data", str(tmp_path / "valid.txt")]) == 0
    assert f"{ppl}{tmp_path / 'valid.txt'}, windows of 32)" in capsys.readouterr().out
    assert main(["evaluate", str(tmp_path / "lm"), "--split", "val"]) == 0
    assert f"perplexity = {valid['ppl']:.2f}   (" in capsys.readouterr().out
    assert main(["evaluate", str(tmp_path / "lm"), "--src", "x.txt"]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: --src is for translation runs; {tmp_path / 'lm'} is a language "
                                       "model: leave out --src\n")
    (tmp_path / "empty.txt").write_text("")
    assert main(["evaluate", str(tmp_path / "lm"), "--data", str(tmp_path / "empty.txt")]) == 2
    assert "empty.txt: the file is empty" in capsys.readouterr().err


def test_translate_with_beam_nbest_prefix_and_alignment(trained_run, corpus, tmp_path, capsys):
    assert main(["translate", str(trained_run), "a b c", "--decode.beam_size", "3", "--nbest", "3"]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    assert len(lines) == 3 and all(line.startswith("0 ||| ") for line in lines)
    scores = [float(line.rsplit("|||", 1)[1]) for line in lines]
    assert scores == sorted(scores, reverse=True)
    assert main(["translate", str(trained_run), "a b c", "--prefix", "c"]) == 0
    assert capsys.readouterr().out.startswith("c")
    # sentences may come after options too; each gives one line, and --decode.* still applies
    assert main(["translate", str(trained_run), "--threads", "1", "a b c", "--decode.beam_size", "2", "d e"]) == 0
    assert capsys.readouterr().out.count("\n") == 2
    assert main(["translate", str(trained_run), "a b c", "--align"]) == 0
    assert "alignment:" in capsys.readouterr().out
    assert main(["translate", str(trained_run), "a b c", "--nbest", "4"]) == 2  # beam 1 cannot give 4
    assert "beam" in capsys.readouterr().err
    other = tmp_path / "other.hyp"
    other.write_text("".join("a\n" for _ in range(24)))
    assert main(["evaluate", str(trained_run), "--src", str(corpus / "test.src"), "--ref", str(corpus / "test.tgt"),
                 "--out", str(tmp_path / "h.txt"), "--decode.beam_size", "2", "--nbest", "2",
                 "--compare", str(other)]) == 0
    out = capsys.readouterr().out
    assert "paired bootstrap" in out and "p = " in out
    assert (tmp_path / "h.txt.nbest").read_text().count("\n") == 48


def test_plot_attention_and_curves_of_a_trained_run(trained_run, tmp_path, capsys):
    from matplotlib.image import imread

    attention = tmp_path / "attention.png"
    assert main(["plot", "attention", str(trained_run), "--text", "a b c", "--out", str(attention)]) == 0
    assert imread(attention).shape[0] > 100
    assert main(["plot", "attention", str(trained_run), "--text", "a b c", "--self", "encoder", "--layer", "0",
                 "--out", str(tmp_path / "self.svg")]) == 0
    assert "<svg" in (tmp_path / "self.svg").read_text()[:500]
    for flags, message in ((["--head", "x"], "--head must be a number or 'mean', got 'x'"),
                           (["--copy"], "has no copy head (model.copy: false)"),
                           (["--copy", "--self", "encoder"], "--copy and --self pick different attentions")):
        assert main(["plot", "attention", str(trained_run), "--text", "a b c", *flags,
                     "--out", str(tmp_path / "copy.png")]) == 2
        assert message in capsys.readouterr().err
    assert main(["plot", "curves", str(trained_run), "--out", str(tmp_path / "curves.png")]) == 0
    assert imread(tmp_path / "curves.png").shape[1] > 100


def test_checkpoint_is_chosen_by_best_last_name_or_path(trained_run, tmp_path):
    from seqmap.runs import RunError, find_checkpoint

    names = sorted(p.name for p in (trained_run / "checkpoints").glob("step-*"))
    assert find_checkpoint(trained_run, "last").name == names[-1]
    assert find_checkpoint(trained_run, names[0]) == trained_run / "checkpoints" / names[0]
    assert find_checkpoint(trained_run, str(trained_run / "checkpoints" / names[0])).name == names[0]
    assert find_checkpoint(trained_run / "checkpoints" / names[0], "best").name == names[0]
    with pytest.raises(RunError, match="best, last or a checkpoint directory; 'step-999999' is none of them"):
        find_checkpoint(trained_run, "step-999999")


def test_stateful_recurrent_lm_trains_over_epochs_and_needs_rnn_lm(tmp_path, capsys):
    text = "to be or not to be, that is the question.\n" * 40
    (tmp_path / "train.txt").write_text(text)
    (tmp_path / "valid.txt").write_text(text[:400])
    cfg = {"model": {"family": "rnn_lm", "rnn_cell": "lstm", "emb_size": 32, "hidden_size": 64, "dec_layers": 1,
                     "dropout": 0.0},
           "data": {"task": "lm", "tokenizer": "char", "train": str(tmp_path / "train.txt"),
                    "valid": str(tmp_path / "valid.txt"), "context": 16, "eval_context": 200},
           "train": {"stateful": True, "max_steps": 200, "batch_size": 4, "lr": 1e-2, "warmup": 5,
                     "valid_every": 200, "log_every": 10}}
    result = train(from_dict(RunConfig, cfg), tmp_path / "lm", stream=open(os.devnull, "w"), test=evaluate_test_split)
    assert result["step"] == 200
    assert read_metrics(tmp_path / "lm", "train")[-1]["epoch"] == 199 // 26  # 1680 chars / 4 rows: 26 windows
    assert read_metrics(tmp_path / "lm", "valid")[-1]["ppl"] < 6  # 16 distinct characters

    # the classic recipe of LSTM language models: plain SGD at a large rate (20 on the mean token loss is
    # Zaremba's 1 on the loss summed over 20 steps), small clipping, halved after every later "epoch"
    cfg["train"].update(optimizer="sgd", lr=20.0, clip_norm=0.25, schedule="step", warmup=0, decay_start=100,
                        decay_every=26)
    train(from_dict(RunConfig, cfg), tmp_path / "sgd", stream=open(os.devnull, "w"))
    logged = {row["step"]: row["lr"] for row in read_metrics(tmp_path / "sgd", "train")}
    assert logged[10] == logged[100] == 20.0 and logged[110] == 10.0 and logged[130] == 5.0 and logged[200] == 20 / 2**4
    trainer_json = json.loads((tmp_path / "sgd" / "checkpoints" / "step-000200" / "trainer.json").read_text())
    assert "momentum" in trainer_json["optimizer"]["param_groups"][0]  # SGD's state, not AdamW's
    assert read_metrics(tmp_path / "sgd", "valid")[-1]["ppl"] < 10  # it learns (uniform: 16, unigram: about 13)

    cfg["model"] = {"family": "lm", "d_model": 16, "n_heads": 2, "d_ff": 32, "dec_layers": 1}
    with pytest.raises(TrainingError, match="train.stateful=true .* needs data.task=lm and model.family=rnn_lm"):
        train(from_dict(RunConfig, cfg), tmp_path / "lm2", stream=open(os.devnull, "w"))


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_no_progress_bar_frames_outside_a_terminal(corpus, tmp_path, monkeypatch):
    """A log file gets one line per train.log_every steps, not thousands of carriage-return frames."""
    err, out = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    cfg = config(corpus, max_steps=12, log_every=4)
    cfg["decode"] = {"beam_size": 2}
    train(from_dict(RunConfig, cfg), tmp_path / "file", stream=out)
    assert "\r" not in err.getvalue() + out.getvalue()
    assert "validation (BLEU by greedy decoding; test and translate use decode.beam_size=2)" in out.getvalue()
    steps = [line.split()[2] for line in out.getvalue().splitlines() if line.split()[1:2] == ["step"]]
    assert steps == ["1", "4", "8", "12"]
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    train(from_dict(RunConfig, config(corpus, max_steps=12, log_every=4)), tmp_path / "tty", stream=io.StringIO())
    assert "\r" in terminal.getvalue()  # on a terminal the bar is drawn


def test_language_model_resume_after_a_skipped_step_reads_on_from_the_same_batch(tmp_path, monkeypatch):
    """A skipped (NaN) step still consumed its batch: the checkpoint stores the data position, not the step."""
    text = "".join(f"line {i} of the text, with {i % 7} words\n" for i in range(300))
    (tmp_path / "train.txt").write_text(text)
    (tmp_path / "valid.txt").write_text(text[:400])
    cfg = {"model": {"family": "lm", "d_model": 16, "n_heads": 2, "d_ff": 32, "dec_layers": 1, "dropout": 0.0},
           "data": {"task": "lm", "tokenizer": "char", "train": str(tmp_path / "train.txt"),
                    "valid": str(tmp_path / "valid.txt"), "context": 16},
           "train": {"max_steps": 10, "batch_size": 4, "lr": 3e-3, "warmup": 2, "valid_every": 5, "log_every": 1}}
    real = trainer_module.output_nll
    calls = {"n": 0, "nan_at": 3}

    def nan_once(features, *args, **kwargs):
        calls["n"] += 1
        loss, nll, n = real(features, *args, **kwargs)
        return (loss * float("nan"), nll, n) if calls["n"] == calls["nan_at"] else (loss, nll, n)

    monkeypatch.setattr(trainer_module, "output_nll", nan_once)
    straight = tmp_path / "straight"
    assert train(from_dict(RunConfig, cfg), straight, stream=open(os.devnull, "w"))["step"] == 10
    calls.update(n=0)
    split = tmp_path / "split"
    first = dict(cfg, train=dict(cfg["train"], max_steps=5))
    train(from_dict(RunConfig, first), split, stream=open(os.devnull, "w"))
    calls.update(nan_at=-1)  # the resumed part has no NaN; the straight run had its only one before step 5
    train(from_dict(RunConfig, cfg), split, resume=True, stream=open(os.devnull, "w"))
    expected, got = train_losses(straight), train_losses(split)
    assert "update skipped" in (split / "train.log").read_text()
    assert sorted(got) == sorted(expected) == list(range(1, 11))
    assert got == expected


def test_ctrl_c_saves_the_step_it_stopped_after_and_resume_gives_the_losses_of_an_uninterrupted_run(corpus, tmp_path):
    """Ctrl-C lost every step since the last checkpoint (here: all of them, no validation before step 40)."""
    straight, stopped, proc = _straight_then_started(corpus, tmp_path, "stopped", max_steps=40, valid_every=40)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and max(train_losses(stopped), default=0) < 10:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait() == 130, err
    step = max(train_losses(stopped))
    assert 10 <= step < 40, "the run finished before it could be interrupted"
    checkpoint = stopped / "checkpoints" / f"step-{step:06d}"
    assert err.splitlines()[-1] == (f"seqmap: interrupted at step {step}; saved {checkpoint}: continue with "
                                    f"`seqmap train --resume {stopped}`")
    assert "Ctrl-C: stopping after this step" in (stopped / "train.log").read_text()
    resumed = _seqmap("train", "--resume", str(stopped), "--threads", "1")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    assert train_losses(stopped) == train_losses(straight)  # bit-for-bit, as after SIGKILL


def test_max_epochs_ends_a_run_at_an_epochs_end_validates_it_and_resume_reads_on_into_the_next(corpus, tmp_path):
    """train.max_epochs alone ends a run: the last step is validated and saved though valid_every is not reached,
    and a resumed run with more epochs draws the batches (and losses) of a run that had them from the start."""
    one = config(corpus, max_steps=0, max_epochs=1, valid_every=1000, log_every=1, valid_bleu=False)
    split = tmp_path / "split"
    first = train(from_dict(RunConfig, one), split, stream=open(os.devnull, "w"))
    steps = first["step"]
    assert first["stop_reason"] == "reached train.max_epochs=1" and steps > 5
    assert [row["step"] for row in read_metrics(split, "valid")] == [steps]
    assert json.loads((split / "checkpoints" / "index.json").read_text())["last"] == f"step-{steps:06d}"
    assert {row["epoch"] for row in read_metrics(split, "train")} == {0}

    two = dict(one, train=dict(one["train"], max_epochs=2))
    resumed = train(from_dict(RunConfig, two), split, resume=True, stream=open(os.devnull, "w"))
    straight = train(from_dict(RunConfig, two), tmp_path / "straight", stream=open(os.devnull, "w"))
    assert resumed["stop_reason"] == straight["stop_reason"] == "reached train.max_epochs=2"
    assert resumed["step"] == straight["step"] > steps + 5
    assert train_losses(split) == train_losses(tmp_path / "straight")
    epochs = {row["step"]: row["epoch"] for row in read_metrics(tmp_path / "straight", "train")}
    assert (epochs[steps], epochs[steps + 1], epochs[straight["step"]]) == (0, 1, 1)


@pytest.mark.parametrize("family", ["lm", "rnn_lm"])
def test_a_language_model_trains_max_epochs_passes_over_its_text(tmp_path, capsys, family):
    """An epoch of a language model is its training tokens over (batch_size x context) windows: random windows
    (model.family lm) or consecutive rows (train.stateful, an rnn_lm). `seqmap train` ends with the test ppl."""
    text = "to be or not to be, that is the question.\n" * 40
    (tmp_path / "train.txt").write_text(text)
    (tmp_path / "valid.txt").write_text(text[:400])
    model = ({"family": "lm", "d_model": 16, "n_heads": 2, "d_ff": 32, "dec_layers": 1} if family == "lm" else
             {"family": "rnn_lm", "rnn_cell": "lstm", "emb_size": 16, "hidden_size": 16, "dec_layers": 1})
    cfg = {"model": {**model, "dropout": 0.0},
           "data": {"task": "lm", "tokenizer": "char", "train": str(tmp_path / "train.txt"),
                    "valid": str(tmp_path / "valid.txt"), "test": str(tmp_path / "valid.txt"), "context": 16},
           "train": {"max_steps": 0, "max_epochs": 2, "batch_size": 4, "lr": 3e-3, "warmup": 2, "valid_every": 1000,
                     "log_every": 1, "stateful": family == "rnn_lm"}}
    assert main(["train", str(write_config(tmp_path, cfg)), "--run-dir", str(tmp_path / "lm")]) == 0
    result = json.loads(capsys.readouterr().out.split("result ", 1)[1])
    tokens = int(re.search(r"lm data: (\d+) train", (tmp_path / "lm" / "train.log").read_text()).group(1))
    per_epoch = tokens // (4 * 16) if family == "lm" else (tokens // 4 - 1) // 16  # 4 rows of 16-token windows
    assert tokens == len(text) and per_epoch > 10
    assert (result["steps"], result["stop"]) == (2 * per_epoch, "reached train.max_epochs=2")
    epochs = [row["epoch"] for row in read_metrics(tmp_path / "lm", "train")]
    assert epochs == [0] * per_epoch + [1] * per_epoch
    (test,) = read_metrics(tmp_path / "lm", "test")
    assert result["test_ppl"] == round(test["ppl"], 2) and test["ppl"] == pytest.approx(math.exp(test["loss"]))
    assert test["tokens"] == 400  # the test text (data.valid's 400 characters), windows not overlapping


def test_max_time_ends_a_run_after_the_step_that_spends_it_and_keeps_that_step(corpus, tmp_path):
    result = train(from_dict(RunConfig, config(corpus, max_steps=0, max_time=1e-6, valid_every=1000)),
                   tmp_path / "run", stream=open(os.devnull, "w"))
    assert (result["step"], result["stop_reason"]) == (1, "reached train.max_time=1e-06 minutes")
    assert [row["step"] for row in read_metrics(tmp_path / "run", "valid")] == [1]
    assert (tmp_path / "run" / "checkpoints" / "step-000001" / "model.safetensors").is_file()


@pytest.mark.parametrize("precision, logged", [
    ("fp32", "device cpu, fp32\n"),
    ("bf16", "device cpu, fp32 (train.precision=bf16 is for CUDA; on cpu it trains in fp32)\n"),
])
def test_the_log_says_in_which_precision_the_model_trains(corpus, tmp_path, precision, logged):
    """train.precision=bf16 on the CPU trained in fp32 and said nothing about it."""
    train(from_dict(RunConfig, config(corpus, max_steps=1, valid_every=1, valid_bleu=False, precision=precision,
                                      device="cpu")), tmp_path / "run", stream=open(os.devnull, "w"))
    (line,) = [line for line in (tmp_path / "run" / "train.log").read_text().splitlines(keepends=True)
               if " model: transformer, " in line]
    assert line.endswith(f"M parameters, {logged}")


@pytest.mark.parametrize("task, train_options, data_options, message", [
    ("translation", {"early_stopping": "bleu", "valid_bleu": False}, {},
     "train.early_stopping / patience_metrics bleu is measured on the decoded validation set, which "
     "train.valid_bleu=false turns off; set train.valid_bleu=true, or use loss or ppl"),
    ("lm", {"early_stopping": "chrf"}, {},
     "train.early_stopping / patience_metrics chrf is not measured for a language model (data.task=lm validates "
     "loss and ppl); use loss or ppl"),
    ("translation", {"patience": 3, "patience_metrics": ["loss", "rougeL"]}, {"tgt_lang": "zh"},
     "train.early_stopping / patience_metrics rougeL is not measured for a Chinese target (data.tgt_lang=zh: "
     "rouge-score reads Latin-script words); use bleu, chrf, loss or ppl"),
])
def test_a_metric_validation_never_measures_is_refused_before_the_data_is_read(corpus, tmp_path, task, train_options,
                                                                              data_options, message):
    """It ranked no checkpoint ("best": null) and, with train.patience, stopped the run after that many
    validations as if it had stopped improving."""
    cfg = config(corpus, **train_options)
    if task == "lm":
        cfg["model"] = {"family": "lm", "d_model": 16, "n_heads": 2, "d_ff": 32, "dec_layers": 1}
        cfg["data"] = {"task": "lm", "tokenizer": "char", "train": str(tmp_path / "unread.txt")}
    cfg["data"].update(data_options)
    with pytest.raises(TrainingError) as info:
        train(from_dict(RunConfig, cfg), tmp_path / "run", stream=open(os.devnull, "w"))
    assert str(info.value) == message
    assert not (tmp_path / "run").exists()


def test_resume_from_weights_alone_or_a_newer_format_says_what_to_do(corpus, tmp_path):
    """Both got the damaged-checkpoint advice glued to their own ("...load it without optimizer=the checkpoint is
    damaged and no earlier one is left: ..."): a checkpoint of `seqmap import` or `average` holds no optimiser."""
    cfg = from_dict(RunConfig, config(corpus, max_steps=2, valid_every=2, valid_bleu=False))
    run = tmp_path / "run"
    train(cfg, run, stream=open(os.devnull, "w"))
    trainer_json = run / "checkpoints" / "step-000002" / "trainer.json"
    saved = json.loads(trainer_json.read_text())
    trainer_json.write_text(json.dumps({**saved, "optimizer": None}))
    with pytest.raises(TrainingError) as info:
        train(cfg, run, resume=True, stream=open(os.devnull, "w"))
    assert str(info.value) == (f"--resume {run}: {run / 'checkpoints' / 'step-000002'} holds weights but no optimiser "
                               "state to continue from (a checkpoint of `seqmap import` or `seqmap average`); start a "
                               f"new run from its weights with `seqmap train CONFIG --init {run} --run-dir NEW_DIR`")
    trainer_json.write_text(json.dumps({**saved, "version": 99}))
    with pytest.raises(CheckpointError) as info:
        train(cfg, run, resume=True, stream=open(os.devnull, "w"))
    assert str(info.value) == f"{trainer_json} has format version 99; upgrade seqmap to read it"


def test_inverse_sqrt_without_warmup_is_refused_before_the_data_is_read(corpus, tmp_path):
    """lr * sqrt(warmup / step) with warmup 0 is 0 at every step: it stopped in the schedule with a ValueError after
    the tokenizer was trained. A run imported from the HF format says warmup 0 with a constant schedule."""
    cfg = from_dict(RunConfig, config(corpus, warmup=0))
    with pytest.raises(TrainingError, match=r"train.schedule=inverse_sqrt .* needs train.warmup >= 1 \(got 0\)"):
        train(cfg, tmp_path / "run", stream=open(os.devnull, "w"))
    assert not (tmp_path / "run" / "tokenizer").exists()
    constant = config(corpus, warmup=0, schedule="constant", max_steps=2, valid_every=2, valid_bleu=False)
    assert train(from_dict(RunConfig, constant), tmp_path / "constant", stream=open(os.devnull, "w"))["step"] == 2
