"""Decoding runs under inference mode (``seqmap.decoding.inference``) and nothing made there leaks out:
results are ordinary tensors a caller can train on, position tables grown while decoding serve training,
and Linear weights packed while decoding still serve a model with frozen weights under autograd."""

from dataclasses import dataclass
from typing import NamedTuple

import pytest
import torch

from seqmap.config import ModelConfig
from seqmap.decoding import beam_search, greedy, sample
from seqmap.decoding.inference import inference, ordinary
from seqmap.models.builder import build_model
from seqmap.nn.packed import PackedLinear, pack_linears, packing_available

BOS, EOS = 1, 2


class Pair(NamedTuple):
    a: torch.Tensor
    b: list


@dataclass
class Box:
    t: torch.Tensor
    n: int


def test_ordinary_clones_inference_tensors_wherever_they_sit():
    with torch.inference_mode():
        made = torch.arange(3)
    kept = torch.ones(2)
    out = ordinary(Pair(made, [Box(made, 4), (made, kept), "text"]))
    assert isinstance(out, Pair) and isinstance(out.b[0], Box) and isinstance(out.b[1], tuple)
    for t in (out.a, out.b[0].t, out.b[1][0]):
        assert not t.is_inference() and torch.equal(t, torch.arange(3))
    assert out.b[1][1] is kept and out.b[0].n == 4 and out.b[2] == "text"


def test_inference_runs_in_inference_mode_and_returns_ordinary_tensors():
    seen = []

    @inference
    def f(x):
        seen.append(torch.is_inference_mode_enabled())
        return x * 2

    y = f(torch.ones(2, requires_grad=True))
    assert seen == [True] and not y.is_inference() and not y.requires_grad
    y.add_(1)  # an inference tensor would refuse this outside inference mode
    assert torch.equal(y, torch.full((2,), 3.0))


def transformer(**overrides):
    cfg = dict(family="transformer", src_vocab=11, tgt_vocab=11, d_model=16, n_heads=2, d_ff=32, enc_layers=1,
               dec_layers=1, dropout=0.0)
    cfg.update(overrides)
    torch.manual_seed(0)
    return build_model(ModelConfig(**cfg)).eval()


@pytest.mark.parametrize("search", ["greedy", "sample", "beam"])
def test_decoded_tokens_feed_a_training_step(search):
    """Outputs of each search are ordinary tensors: they go through a forward and backward pass with gradients."""
    model = transformer()
    src = torch.randint(3, 11, (3, 5))
    kwargs = dict(bos=BOS, eos=EOS, max_len=6)
    if search == "greedy":
        tokens = greedy(model, src, None, **kwargs).tokens
    elif search == "sample":
        tokens = sample(model, src, None, generator=torch.Generator().manual_seed(0), **kwargs).tokens
    else:
        tokens = beam_search(model, src, None, beam_size=2, **kwargs).best().tokens
    assert not tokens.is_inference()
    model.train()
    tgt = torch.cat([torch.full((3, 1), BOS), tokens.clamp(min=3)], dim=1)
    model(src, None, tgt).sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("positional", ["sinusoidal", "rope"])
def test_position_tables_grown_while_decoding_are_ordinary_tensors(positional):
    """Decoding past a position table's length grows it inside inference mode; the grown table is an ordinary
    tensor (an inference tensor refuses in-place updates and being saved for backward outside that mode),
    and training reads it."""
    model = transformer(positional=positional, max_len=4)
    src = torch.randint(3, 11, (2, 3))
    greedy(model, src, None, bos=BOS, eos=-1, max_len=12)  # eos -1: never stops early, reads 12 positions
    pos = model.decoder.positional
    tables = [pos.table] if positional == "sinusoidal" else [pos.cos, pos.sin]
    assert all(t.size(0) >= 12 and not t.is_inference() for t in tables)
    model.train()
    model(src, None, torch.randint(3, 11, (2, 12))).sum().backward()


@pytest.mark.skipif(not packing_available(), reason="needs oneDNN packing (x86-64 torch with mkldnn)")
def test_weights_packed_while_decoding_serve_later_calls_with_autograd_on():
    """Packs made during decoding (inference tensors) serve a later forward pass with autograd on whose
    weights are frozen (the packed path: nothing requires a gradient), and training drops them."""
    model = pack_linears(transformer())
    src, tgt = torch.randint(3, 11, (2, 4)), torch.randint(3, 11, (2, 5))
    greedy(model, src, None, bos=BOS, eos=EOS, max_len=4)
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    assert any(pack.weight.is_inference() for m in packed for pack in m._packs.values())
    for p in model.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        expected = transformer()(src, None, tgt)  # the same weights, plain nn.Linear
    assert torch.allclose(model(src, None, tgt), expected, atol=1e-5)
    for p in model.parameters():
        p.requires_grad_(True)
    model.train()
    assert not any(m._packs for m in packed)
    model(src, None, tgt).sum().backward()
