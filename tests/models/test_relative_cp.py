"""``model.positional: relative_cp`` inside each Transformer family: every self-attention layer computes the
per-pair formula of tests/nn/test_positional_relative_cp.py over its own input, with the masks the family
means (the encoder's and classifier's padding, the decoder's and LM's causality) and, when decoding, through
the key/value cache. The invariants every scheme has (incremental decoding equals the full forward, padding
changes nothing, a sentence decodes alone as in a batch) run over ``POSITIONAL_KINDS``, this one included.
"""

import pytest
import torch

from seqmap.config import ModelConfig
from seqmap.models.builder import build_classifier, build_model
from seqmap.models.protocol import Memory
from seqmap.nn.attention import causal_mask
from tests.nn.test_positional_relative_cp import per_pair_attention

V, PAD = 13, 0
CFG = dict(src_vocab=V, tgt_vocab=V, d_model=16, n_heads=2, d_ff=32, enc_layers=2, dec_layers=2, dropout=0.0,
           positional="relative_cp", relative_clip=2)

pytestmark = pytest.mark.usefixtures("one_thread")


def randomised(model: torch.nn.Module) -> torch.nn.Module:
    """The position tables drawn large, so that a wrong row or head shows."""
    for name, p in model.named_parameters():
        if "_terms." in name:
            torch.nn.init.normal_(p)
    return model.eval()


def spy(layers, monkeypatch) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Record (input, output) of every call of each layer's self-attention."""
    calls = [[] for _ in layers]
    for layer, seen in zip(layers, calls):
        real = layer.self_attn.self_attention

        def recorded(x, *args, real=real, seen=seen, **kwargs):
            out, weights = real(x, *args, **kwargs)
            seen.append((x.detach(), out.detach()))
            return out, weights

        monkeypatch.setattr(layer.self_attn, "self_attention", recorded)
    return calls


def assert_formula(layers, positional, calls, allowed):
    """Each layer's outputs (its calls' rows concatenated: the cached steps in order) are the per-pair formula
    over its inputs, with the stack's one positional scheme."""
    for layer, seen in zip(layers, calls):
        x, out = (torch.cat(parts, dim=1) for parts in zip(*seen))
        _, _, _, expected = per_pair_attention(layer.self_attn, positional, x, allowed)
        torch.testing.assert_close(out.double(), expected, rtol=0, atol=1e-5)


def padded_source():
    src = torch.randint(3, V, (2, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    return src.masked_fill(~mask, PAD), mask


def test_the_encoder_decoder_computes_the_formula_in_both_stacks_and_through_the_cache(monkeypatch):
    torch.manual_seed(0)
    model = randomised(build_model(ModelConfig(family="transformer", **CFG)))
    src, src_mask = padded_source()
    encoder, decoder = model.encoder.layers, model.decoder.layers
    enc_calls, dec_calls = spy(encoder, monkeypatch), spy(decoder, monkeypatch)
    tgt = torch.randint(3, V, (2, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        state = None
        for n in (2, 1, 1, 1):  # a prefix, then single steps over the cache
            start = 0 if state is None else state.position
            _, state, _ = model.decode_step(tgt[:, start:start + n], memory, state)
    assert_formula(encoder, model.encoder.positional, enc_calls, src_mask[:, None, :].expand(2, 6, 6))  # padding
    assert_formula(decoder, model.decoder.positional, dec_calls, causal_mask(5).expand(2, 5, 5))
    assert all(len(seen) == 4 for seen in dec_calls)  # four cached steps per layer


def test_the_decoder_only_lm_computes_the_formula_through_the_cache(monkeypatch):
    torch.manual_seed(0)
    model = randomised(build_model(ModelConfig(family="lm", **CFG)))
    layers = model.layers
    calls = spy(layers, monkeypatch)
    tokens = torch.randint(3, V, (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        state, start = None, 0
        for n in (3, 1, 2, 1):
            _, state, _ = model.decode_step(tokens[:, start:start + n], Memory(), state)
            start += n
    assert_formula(layers, model.positional, calls, causal_mask(7).expand(2, 7, 7))


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_the_classifier_computes_the_formula_with_its_padding(monkeypatch, pooling):
    torch.manual_seed(0)
    model = randomised(build_classifier(ModelConfig(family="transformer", **CFG), 3, pooling))
    layers = model.encoder.layers
    calls = spy(layers, monkeypatch)
    src, src_mask = padded_source()
    with torch.no_grad():
        model(src, src_mask)
    keys = torch.cat([torch.ones(2, 1, dtype=torch.bool), src_mask], dim=1) if pooling == "cls" else src_mask
    assert_formula(layers, model.encoder.positional, calls, keys[:, None, :].expand(2, keys.size(1), keys.size(1)))
