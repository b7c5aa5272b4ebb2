"""Shared test set-up: a fixed seed for every test, and a tiny model config for quick runs."""

import pytest
import torch

from seqmap.config import ModelConfig


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module (``pytestmark = pytest.mark.usefixtures("one_thread")``): tiny
    tensors run faster on one thread than on two on a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_transformer_cfg() -> ModelConfig:
    """A Transformer small enough to train for a hundred steps in a few seconds on a CPU."""
    return ModelConfig(family="transformer", d_model=32, n_heads=2, d_ff=64, enc_layers=1, dec_layers=1, dropout=0.0)


@pytest.fixture(scope="session")
def trained_reverse_toy():
    """(model, task): a Transformer trained 300 steps on the reverse toy task (a few seconds), for comparing
    decoders of one trained model (int8, packed weights). Tests that change the model work on a copy."""
    import seqmap.training.toy as toy_module
    from seqmap.training.toy import ToyConfig, train_toy

    trained = {}
    real_evaluate = toy_module.evaluate

    def keep(model, task, cfg, family):  # the trained model and its task, as train_toy evaluates them
        trained.update(model=model, task=task)
        return real_evaluate(model, task, cfg, family)

    toy_module.evaluate = keep
    try:
        torch.manual_seed(0)
        cfg = ModelConfig(family="transformer", d_model=64, n_heads=2, d_ff=128, enc_layers=1, dec_layers=1,
                          dropout=0.0)
        toy = ToyConfig(task="reverse", vocab=10, min_len=2, max_len=6, steps=300, batch_size=64, lr=3e-3,
                        warmup=20, eval_size=50, log_every=0)
        metrics = train_toy(cfg, toy, log=None)
    finally:
        toy_module.evaluate = real_evaluate
    assert metrics["exact_match"] > 0.5, "the toy did not learn; comparisons of its decoders would say nothing"
    return trained["model"].eval(), trained["task"]
