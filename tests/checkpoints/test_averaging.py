"""``seqmap.checkpoints.averaging``: the element-wise mean of checkpoints of one run; those of different runs whose
weights happen to have the same shapes are refused, naming what differs."""

from __future__ import annotations

import json
import re

import pytest
import torch
from torch import nn

from seqmap.checkpoints import CheckpointError, load_checkpoint, load_weights, save_checkpoint
from seqmap.checkpoints.averaging import average_checkpoints, save_averaged

from .test_checkpoint import CONFIG, D, Tiny, save

MODEL = {"family": "transformer", "d_model": 4, "norm_position": "pre", "dropout": 0.1}
VOCAB = {"<pad>": 0, "a": 1, "b": 2}
DATA = {"train": "corpus/train.tsv", "valid": "corpus/valid.tsv", "tokenizer": "word", "lowercase": False}


def _tokenizer(folder, vocab=VOCAB):
    folder.mkdir(parents=True)
    (folder / "tokenizer.json").write_text(json.dumps({"kind": "word", "vocab_size": len(vocab)}))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    return folder


def _checkpoint(path, seed, *, model=MODEL, data=DATA, train=None, tokenizer=True, vocab=VOCAB):
    """A checkpoint of a 4 x 4 Linear: ``seed`` sets its weights, the rest what its config and tokenizer say."""
    torch.manual_seed(seed)
    config = {"model": dict(model), "data": dict(data), "train": train or {"lr": 1e-3, "max_steps": 100}}
    tok = _tokenizer(path.parent / f".tok-{path.name}", vocab) if tokenizer else None
    return save_checkpoint(path, model=nn.Linear(4, 4), trainer_state={"step": seed}, config=config,
                           tokenizer_dir=tok)


def test_average_of_two(tmp_path):
    a, b = Tiny(seed=1), Tiny(seed=2)
    save(tmp_path / "a", a)
    save(tmp_path / "b", b)
    avg = average_checkpoints([tmp_path / "a", tmp_path / "b"])
    for name, t in a.state_dict().items():
        if t.is_floating_point():
            expected = ((t.double() + b.state_dict()[name].double()) / 2).float()
            assert torch.equal(avg[name], expected), name
    assert avg["seen"].item() == 2  # integer buffers come from the last checkpoint
    assert avg["output.weight"] is avg["embed.weight"]

    out = save_averaged([tmp_path / "a", tmp_path / "b"], tmp_path / "avg")
    model = Tiny(seed=5)
    loaded = load_checkpoint(out, model=model)
    assert loaded.config == CONFIG and model.output.weight is model.embed.weight
    assert torch.equal(model.hidden.bias, avg["hidden.bias"])


def test_average_mismatch_is_named(tmp_path):
    save(tmp_path / "a", Tiny())
    save(tmp_path / "b", Tiny(d=6))
    with pytest.raises(CheckpointError, match=r"'embed\.weight'"):
        average_checkpoints([tmp_path / "a", tmp_path / "b"])
    save_checkpoint(tmp_path / "c", model=nn.Linear(D, D), trainer_state={}, config={})
    with pytest.raises(CheckpointError, match=r"'bias'"):
        average_checkpoints([tmp_path / "a", tmp_path / "c"])


def test_checkpoints_of_one_run_are_averaged_whatever_their_step_and_schedule(tmp_path):
    first = _checkpoint(tmp_path / "step-1", 1)
    second = _checkpoint(tmp_path / "step-2", 2, train={"lr": 5e-4, "max_steps": 200})  # resumed with a new lr
    older = {k: v for k, v in MODEL.items() if k != "dropout"}  # saved before model.dropout (default 0.1) existed
    third = _checkpoint(tmp_path / "step-3", 3, model=older)
    moved = {**DATA, "train": "/elsewhere/train.tsv", "valid": "/elsewhere/valid.tsv"}  # resumed after a move
    fourth = _checkpoint(tmp_path / "step-4", 4, data={k: v for k, v in moved.items() if k != "lowercase"})
    out = save_averaged([first, second, third, fourth], tmp_path / "avg")
    expected = sum(load_weights(step)["weight"] for step in (first, second, third, fourth)) / 4
    torch.testing.assert_close(load_weights(out)["weight"], expected)
    assert json.loads((out / "tokenizer" / "vocab.json").read_text()) == VOCAB


@pytest.mark.parametrize(("other", "differs"), [
    (dict(model={**MODEL, "norm_position": "post"}), r"\(model\.norm_position 'pre' vs 'post'\)"),
    (dict(model={"kind": "tiny"}), r"\(model\.d_model 4 vs unset, model\.dropout 0\.1 vs unset, "
                                    r"model\.family 'transformer' vs unset, and 2 more model settings\)"),
    (dict(model={**MODEL, "norm_position": "post", "dropout": 0.3}),
     r"\(model\.dropout 0\.1 vs 0\.3, model\.norm_position 'pre' vs 'post'\)"),
    (dict(vocab={"<pad>": 0, "x": 1, "y": 2}), r"\(their tokenizer files differ: vocab\.json\)"),
    (dict(tokenizer=False), r"\(only the first has a tokenizer\)"),
    (dict(data={**DATA, "lowercase": True}), r"\(data\.lowercase False vs True\)"),  # one tokenizer, other text
    (dict(data={**DATA, "train": "other.tsv", "opencc": "t2s", "max_len": 64}),
     r"\(data\.max_len 128 vs 64, data\.opencc None vs 't2s'\)"),  # data.train is a path: not compared
    (dict(train={"lr": 1e-3, "seed": 2}), r"\(train\.seed 1 vs 2\)"),  # one config from two seeds (1: the default)
], ids=["pre-vs-post-LN", "not-a-model-config", "two-settings", "another-vocabulary-of-one-size", "no-tokenizer",
        "lowercase", "two-data-options", "another-seed"])
def test_checkpoints_of_different_runs_with_weights_of_one_shape_are_refused(tmp_path, other, differs):
    """These used to be averaged into garbage: nothing but the weights' names and shapes was compared."""
    first = _checkpoint(tmp_path / "a" / "step-1", 1)
    second = _checkpoint(tmp_path / "b" / "step-1", 2, **other)
    message = (rf"^cannot average {re.escape(str(first))} and {re.escape(str(second))}: they are not checkpoints "
               rf"of one run {differs}; average checkpoints of one run$")
    for average in (average_checkpoints, lambda paths: save_averaged(paths, tmp_path / "avg")):
        with pytest.raises(CheckpointError, match=message):
            average([first, second])
    assert not (tmp_path / "avg").exists()


def test_a_checkpoint_without_a_tokenizer_is_compared_and_saved_with_its_runs(tmp_path):
    """As ``load_run`` does, a checkpoint without its own tokenizer/ uses its run's (RUN/tokenizer)."""
    steps = [_checkpoint(tmp_path / "run" / "checkpoints" / f"step-{i}", i, tokenizer=False) for i in (1, 2)]
    _tokenizer(tmp_path / "run" / "tokenizer")
    out = save_averaged(steps, tmp_path / "avg")  # outside the run: its tokenizer must travel with it
    assert json.loads((out / "tokenizer" / "vocab.json").read_text()) == VOCAB
    other = _checkpoint(tmp_path / "other" / "checkpoints" / "step-1", 3, tokenizer=False)
    _tokenizer(tmp_path / "other" / "tokenizer", {"<pad>": 0, "b": 1, "a": 2})
    with pytest.raises(CheckpointError, match=r"their tokenizer files differ: vocab\.json"):
        average_checkpoints([steps[0], other])
