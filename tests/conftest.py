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
