"""A step whose gradients are NaN/inf is skipped whether or not gradients are clipped (``train.clip_norm: 0``
still measures their norm), and leaves the weights as they were."""

from __future__ import annotations

import pytest
import torch

from seqmap.config import ModelConfig, TrainConfig
from seqmap.data.batching import Batch
from seqmap.models.builder import build_model
from seqmap.training.trainer import Trainer


def _batch() -> Batch:
    ids = torch.arange(4, 20).view(2, 8) % 30 + 4
    return Batch.from_lm_windows(ids[:, :-1], ids[:, 1:])


def _trainer(clip_norm: float) -> Trainer:
    torch.manual_seed(0)
    model = build_model(ModelConfig(family="lm", tgt_vocab=40, d_model=16, n_heads=2, d_ff=32, dec_layers=1,
                                    max_len=16, dropout=0.0))
    return Trainer(model, TrainConfig(clip_norm=clip_norm, warmup=2, max_steps=10), torch.device("cpu"))


@pytest.mark.parametrize("clip_norm", [0.0, 1.0])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_step_with_non_finite_gradients_and_a_finite_loss_is_skipped(clip_norm, bad):
    trainer = _trainer(clip_norm)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    weight = next(p for p in trainer.model.parameters() if p.dim() >= 2)
    hook = weight.register_hook(lambda grad: grad * bad)  # the loss stays finite, one gradient does not
    assert trainer.step([_batch()]) is None
    assert all(torch.equal(p, before[name]) for name, p in trainer.model.named_parameters())
    assert all(p.grad is None for p in trainer.model.parameters())  # nothing carried into the next step
    hook.remove()
    loss, _, tokens = trainer.step([_batch()])  # the next finite step is taken
    assert torch.isfinite(torch.tensor(loss)) and tokens == 14
    assert not torch.equal(weight, before[next(n for n, p in trainer.model.named_parameters() if p is weight)])


def test_unclipped_gradients_are_applied_unchanged():
    """clip_norm 0 measures the norm without scaling anything: the update equals one with a limit never reached."""
    off, huge = _trainer(0.0), _trainer(1e9)
    for trainer in (off, huge):
        trainer.step([_batch()])
    for (name, a), (_, b) in zip(off.model.named_parameters(), huge.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name
