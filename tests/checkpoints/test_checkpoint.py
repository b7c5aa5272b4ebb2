"""``seqmap.checkpoints.checkpoint``: round trips, no pickle, atomic saves, clear errors (``Tiny`` and ``save``
serve test_manager.py and test_averaging.py too)."""

from __future__ import annotations

import errno
import random

import numpy as np
import pytest
import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from seqmap.checkpoints import (
    CheckpointError,
    WeightsOnlyError,
    find_tokenizer,
    load_checkpoint,
    load_weights,
    read_config,
    rng_state,
    save_checkpoint,
)
from seqmap.checkpoints import checkpoint as ckpt
from seqmap.checkpoints import files as ckpt_files
from seqmap.checkpoints.averaging import save_averaged

V, D = 11, 8
CONFIG = {"model": {"kind": "tiny", "d_model": D, "dropout": 0.1}, "train": {"lr": 1e-2, "clip": None}, "tags": ["a"]}
STATE = {"step": 2, "epoch": 0, "batch_in_epoch": 2, "best_metric": float("inf"), "bad_epochs": 0, "nan_skipped": 1}


class Tiny(nn.Module):
    """An embedding, a hidden layer and an output layer tied to the embedding, plus an integer buffer."""

    def __init__(self, d: int = D, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(V, d)
        self.hidden = nn.Linear(d, d)
        self.output = nn.Linear(d, V, bias=False)
        self.output.weight = self.embed.weight
        self.register_buffer("seen", torch.tensor(seed, dtype=torch.long))

    def forward(self, tokens):
        return self.output(torch.tanh(self.hidden(self.embed(tokens))))


BATCHES = [torch.randint(0, V, (4, 5), generator=torch.Generator().manual_seed(i)) for i in range(5)]


def _train(model, optimizer, batches):
    for tokens in batches:
        optimizer.zero_grad()
        logits = model(tokens)
        nn.functional.cross_entropy(logits.reshape(-1, V), tokens.reshape(-1)).backward()
        optimizer.step()


def _trained(seed: int = 0):
    model = Tiny(seed=seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.95))
    _train(model, optimizer, BATCHES[:2])
    return model, optimizer


def save(path, model, optimizer=None, **kw):
    return save_checkpoint(path, model=model, optimizer=optimizer, trainer_state=STATE, config=CONFIG, **kw)


def test_round_trip_weights_optimizer_config_state_and_tie(tmp_path):
    model, optimizer = _trained()
    save(tmp_path / "c", model, optimizer)
    fresh = Tiny(seed=1)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.5, betas=(0.9, 0.999))
    loaded = load_checkpoint(tmp_path / "c", model=fresh, optimizer=fresh_opt)
    assert loaded.config == CONFIG and read_config(tmp_path / "c") == CONFIG
    assert loaded.trainer_state == STATE
    assert fresh.output.weight is fresh.embed.weight  # the tie survives loading
    for name, t in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], t), name
    assert fresh_opt.param_groups[0]["betas"] == (0.8, 0.95) and fresh_opt.param_groups[0]["lr"] == 1e-2

    _train(model, optimizer, BATCHES[2:])  # three more steps, with and without the save/load
    _train(fresh, fresh_opt, BATCHES[2:])
    for (name, a), b in zip(model.named_parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b), f"{name} differs after resuming"


def test_tied_weight_stored_once(tmp_path):
    save(tmp_path / "c", Tiny())
    weights = load_weights(tmp_path / "c")
    assert set(weights) == set(Tiny().state_dict())
    assert weights["output.weight"] is weights["embed.weight"]
    with safe_open(str(tmp_path / "c" / "model.safetensors"), framework="pt") as f:
        assert len([k for k in f.keys() if k.endswith(".weight") and k != "hidden.weight"]) == 1


def test_rng_states_restored(tmp_path):
    torch.manual_seed(3), random.seed(3), np.random.seed(3)
    save(tmp_path / "c", Tiny())
    expected = torch.rand(4), random.random(), np.random.rand(3)
    torch.manual_seed(99), random.seed(99), np.random.seed(99)
    load_checkpoint(tmp_path / "c", restore_rng=True)
    assert torch.equal(torch.rand(4), expected[0])
    assert random.random() == expected[1]
    assert np.array_equal(np.random.rand(3), expected[2])



def test_each_rank_restores_its_own_rng_states(tmp_path):
    """A run of several processes: every rank draws its own dropout masks, so every rank's states are kept."""
    model, states, draws = Tiny(), [], []
    for seed in (5, 6, 7):  # ranks 0, 1, 2
        torch.manual_seed(seed), random.seed(seed), np.random.seed(seed)
        states.append(rng_state())
        draws.append((torch.rand(4), random.random(), np.random.rand(3)))
    for name, rank_rng in (("ranks", states[1:]), ("one", ())):  # "one": a single process's checkpoint
        torch.manual_seed(5), random.seed(5), np.random.seed(5)  # rank 0 saves its own states
        save(tmp_path / name, model, rank_rng=rank_rng)
    for name, rank, drawn in (("ranks", 2, 2), ("ranks", 0, 0), ("ranks", 1, 1), ("one", 1, 0)):
        torch.manual_seed(99), random.seed(99), np.random.seed(99)
        load_checkpoint(tmp_path / name, restore_rng=True, rank=rank)
        assert torch.equal(torch.rand(4), draws[drawn][0]), (name, rank)
        assert random.random() == draws[drawn][1] and np.array_equal(np.random.rand(3), draws[drawn][2]), (name, rank)


def test_no_pickle_anywhere(tmp_path, monkeypatch):
    model, optimizer = _trained()
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "vocab.txt").write_text("a\nb\n")
    save(tmp_path / "c", model, optimizer, tokenizer_dir=tok)
    files = sorted(p.relative_to(tmp_path / "c").as_posix() for p in (tmp_path / "c").rglob("*") if p.is_file())
    assert files == ["config.yaml", "model.safetensors", "tokenizer/vocab.txt", "trainer.json", "trainer.safetensors"]

    def refuse(*args, **kwargs):
        raise AssertionError("torch.load called")

    monkeypatch.setattr(torch, "load", refuse)
    fresh = Tiny(seed=1)
    load_checkpoint(tmp_path / "c", model=fresh, optimizer=torch.optim.AdamW(fresh.parameters()), restore_rng=True)
    assert torch.equal(fresh.hidden.weight, model.hidden.weight)


def test_trainer_state_must_be_plain_json(tmp_path):
    with pytest.raises(TypeError, match=r"trainer_state\['best'\].*item"):
        save_checkpoint(tmp_path / "c", model=Tiny(), trainer_state={"best": torch.tensor(1.0)}, config={})
    assert not (tmp_path / "c").exists()


def test_crash_mid_save_leaves_no_broken_checkpoint(tmp_path, monkeypatch):
    model, optimizer = _trained()
    target = tmp_path / "ckpts" / "step-000002"
    real = ckpt.write_trainer
    calls = []

    def crash(directory, *args):
        assert (directory / "model.safetensors").exists()  # the weights were written first
        calls.append(directory)
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(ckpt, "write_trainer", crash)
    with pytest.raises(KeyboardInterrupt):
        save(target, model, optimizer)
    assert calls and not target.exists()
    monkeypatch.setattr(ckpt, "write_trainer", real)
    save(target, model, optimizer)
    load_checkpoint(target, model=Tiny(seed=1))

    # a crash while re-saving the same step keeps the previous version intact
    before = load_weights(target)["hidden.weight"].clone()
    _train(model, optimizer, BATCHES[2:3])
    monkeypatch.setattr(ckpt, "write_trainer", crash)
    with pytest.raises(KeyboardInterrupt):
        save(target, model, optimizer)
    assert torch.equal(load_weights(target)["hidden.weight"], before)

    # a temp dir left by a killed process is removed by the next save; the re-save replaces the old version
    (target.parent / ".step-000002.tmp-dead").mkdir()
    monkeypatch.setattr(ckpt, "write_trainer", real)
    save(target, model, optimizer)
    assert torch.equal(load_weights(target)["hidden.weight"], model.hidden.weight)
    assert sorted(p.name for p in target.parent.iterdir()) == ["step-000002"]


def test_failed_rename_puts_the_previous_version_back(tmp_path, monkeypatch):
    target = tmp_path / "c"
    save(target, Tiny(seed=1))
    real_replace, calls = ckpt.os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:  # after the old version was moved aside, before the new one is moved in
            raise OSError("disk gone")
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", replace)
    with pytest.raises(OSError, match="disk gone"):
        save(target, Tiny(seed=2))
    monkeypatch.undo()
    assert torch.equal(load_weights(target)["hidden.weight"], Tiny(seed=1).hidden.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_a_full_disk_is_an_os_error_naming_the_file_and_the_old_version_stays(tmp_path, monkeypatch):
    """safetensors reports a full disk as its own SafetensorError ("... (os error 28)"): it was a traceback
    from trainer.safetensors, with no errno for a caller to act on."""
    target = tmp_path / "c"
    save(target, Tiny(seed=1))
    real = ckpt_files.save_file

    def full(tensors, filename, metadata=None):
        if filename.endswith("trainer.safetensors"):
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(ckpt_files, "save_file", full)
    with pytest.raises(OSError) as err:
        save(target, Tiny(seed=2))
    assert err.value.errno == errno.ENOSPC and err.value.filename.endswith("/trainer.safetensors")
    monkeypatch.undo()
    assert torch.equal(load_weights(target)["hidden.weight"], Tiny(seed=1).hidden.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_truncated_weights_named(tmp_path):
    save(tmp_path / "c", Tiny())
    file = tmp_path / "c" / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*earlier checkpoint"):
        load_checkpoint(tmp_path / "c", model=Tiny())
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        load_weights(tmp_path / "c")


def test_invalid_trainer_json_named(tmp_path):
    save(tmp_path / "c", Tiny())
    (tmp_path / "c" / "trainer.json").write_text('{"trainer_state": {"step": 1')
    with pytest.raises(CheckpointError, match=r"trainer\.json.*earlier checkpoint"):
        load_checkpoint(tmp_path / "c")


@pytest.mark.parametrize("text, problem", [
    ("model: [1\n", "expected ',' or ']', but got '<stream end>' at line 2, column 1"),
    ("model:\n\td_model: 8\n", "found character '\\t' that cannot start any token at line 2, column 1"),
])
def test_a_damaged_config_is_named_in_one_line(tmp_path, text, problem):
    """A config.yaml that is not YAML gave PyYAML's message of four lines, and `seqmap: error:` speaks in one."""
    save(tmp_path / "c", Tiny())
    (tmp_path / "c" / "config.yaml").write_text(text)
    with pytest.raises(CheckpointError) as info:
        read_config(tmp_path / "c")
    assert str(info.value) == (f"cannot read {tmp_path / 'c' / 'config.yaml'} ({problem}); the checkpoint is "
                               f"damaged: use an earlier checkpoint in {tmp_path}")
    (tmp_path / "c" / "config.yaml").write_text("- a list\n")
    with pytest.raises(CheckpointError, match=r"config\.yaml does not hold a mapping; the checkpoint is damaged"):
        read_config(tmp_path / "c")


def test_missing_files_named(tmp_path):
    with pytest.raises(CheckpointError, match="nowhere"):
        load_checkpoint(tmp_path / "nowhere", model=Tiny())
    (tmp_path / "config.yaml").write_text("")  # a file given where a checkpoint goes ("does not exist" before)
    with pytest.raises(CheckpointError, match=r"config.yaml is a file, not a checkpoint directory"):
        load_checkpoint(tmp_path / "config.yaml", model=Tiny())
    save(tmp_path / "c", Tiny())
    (tmp_path / "c" / "trainer.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"trainer\.safetensors"):
        load_checkpoint(tmp_path / "c", restore_rng=True)


def test_strict_loading_names_the_parameter(tmp_path):
    save(tmp_path / "c", Tiny())
    with pytest.raises(CheckpointError, match=r"'embed\.weight'.*\(11, 8\).*\(11, 6\)"):
        load_checkpoint(tmp_path / "c", model=Tiny(d=6))
    other = nn.Sequential(nn.Linear(D, D))
    with pytest.raises(CheckpointError, match=r"missing \(0\.weight.*unexpected \(embed\.weight"):
        load_checkpoint(tmp_path / "c", model=other)


def test_a_weights_only_checkpoint_loads_its_weights_but_cannot_resume(tmp_path):
    """An averaged (or imported) checkpoint holds no optimizer or RNG state: WeightsOnlyError, a CheckpointError."""
    model, optimizer = _trained()
    save(tmp_path / "a", model, optimizer)
    out = save_averaged([tmp_path / "a"], tmp_path / "avg")
    fresh = Tiny(seed=1)
    load_checkpoint(out, model=fresh)
    assert torch.equal(fresh.hidden.weight, model.hidden.weight)
    with pytest.raises(WeightsOnlyError, match="holds no optimizer state; load it without optimizer="):
        load_checkpoint(out, optimizer=torch.optim.AdamW(fresh.parameters()))
    with pytest.raises(CheckpointError, match="holds no RNG state; load it with restore_rng=False"):
        load_checkpoint(out, restore_rng=True)


def test_a_checkpoint_finds_its_own_tokenizer_else_its_runs(tmp_path):
    """``find_tokenizer``: what translate, --init and averaging decode a checkpoint with."""
    step = tmp_path / "run" / "checkpoints" / "step-000001"
    save(step, Tiny())
    assert find_tokenizer(step) is None  # a graph run has none
    (tmp_path / "run" / "tokenizer").mkdir()
    assert find_tokenizer(step) == tmp_path / "run" / "tokenizer"
    (step / "tokenizer").mkdir()
    assert find_tokenizer(step) == step / "tokenizer"
