"""The two column layouts of the sinusoidal table (``sinusoidal_layout``).

``interleaved`` (the default, Vaswani et al.) alternates sin/cos per frequency;
``split`` (tensor2tensor, fairseq, Marian) puts all sines first, then all cosines.
Both hold the same numbers in another order, so both keep the property that makes
sinusoids useful: a shift by k positions is one fixed rotation per frequency.
"""

import math

import pytest
import torch

from seqmap.config import ConfigError, ModelConfig
from seqmap.models.builder import build_model
from seqmap.nn.positional import SINUSOIDAL_LAYOUTS, SinusoidalPositional, build_positional, sinusoidal_table


def frequency(i: int, d: int) -> float:
    return 10000 ** (-2 * i / d)


def pair_columns(layout: str, d: int) -> list[tuple[int, int]]:
    """(sin column, cos column) of each frequency i < D/2."""
    if layout == "interleaved":
        return [(2 * i, 2 * i + 1) for i in range(d // 2)]
    return [(i, d // 2 + i) for i in range(d // 2)]


def test_split_golden_values():
    # D = 4: frequencies 1 and 1/100; hand-computed sin(1), sin(0.01), cos(1), cos(0.01), then position 2
    table = sinusoidal_table(3, 4, layout="split")
    assert torch.equal(table[0], torch.tensor([0.0, 0.0, 1.0, 1.0]))
    expected_1 = torch.tensor([0.8414709848, 0.0099998333, 0.5403023059, 0.9999500004])
    expected_2 = torch.tensor([0.9092974268, 0.0199986667, -0.4161468365, 0.9998000067])
    assert torch.allclose(table[1], expected_1, atol=1e-7)
    assert torch.allclose(table[2], expected_2, atol=1e-7)


def test_split_formula_at_far_positions():
    d = 8
    table = sinusoidal_table(1000, d, layout="split")
    for pos, i in [(1, 0), (3, 1), (17, 2), (999, 3)]:
        angle = pos * frequency(i, d)
        assert table[pos, i].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert table[pos, d // 2 + i].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_split_is_a_column_permutation_of_interleaved():
    for d in (8, 7):  # odd D: ceil(D/2) sines, then floor(D/2) cosines
        interleaved, split = sinusoidal_table(50, d), sinusoidal_table(50, d, layout="split")
        sines = (d + 1) // 2
        assert torch.equal(split[:, :sines], interleaved[:, 0::2])
        assert torch.equal(split[:, sines:], interleaved[:, 1::2])


@pytest.mark.parametrize("layout", SINUSOIDAL_LAYOUTS)
def test_shift_is_one_rotation_per_frequency(layout):
    """PE(pos + k) = R_k PE(pos) with R_k a fixed rotation of each (sin, cos) column pair, for every pos."""
    d, length = 8, 64
    table = sinusoidal_table(length + 20, d, layout=layout).double()
    for k in (1, 5, 20):
        rotation = torch.zeros(d, d, dtype=torch.float64)
        for i, (s, c) in enumerate(pair_columns(layout, d)):
            a = k * frequency(i, d)
            # sin(x + a) = sin x cos a + cos x sin a;  cos(x + a) = cos x cos a - sin x sin a
            rotation[s, s], rotation[s, c] = math.cos(a), math.sin(a)
            rotation[c, s], rotation[c, c] = -math.sin(a), math.cos(a)
        assert torch.allclose(table[:length] @ rotation.T, table[k: length + k], atol=1e-5)


@pytest.mark.parametrize("layout", SINUSOIDAL_LAYOUTS)
def test_dot_products_depend_on_offset_only(layout):
    table = sinusoidal_table(40, 16, layout=layout).double()
    gram = table @ table.T  # (40, 40)
    for offset in (0, 3, 11):
        diagonal = torch.diagonal(gram, offset)
        assert torch.allclose(diagonal, diagonal[0].expand_as(diagonal), atol=1e-5)


def test_default_layout_unchanged():
    assert ModelConfig().sinusoidal_layout == "interleaved"
    assert torch.equal(sinusoidal_table(30, 8), sinusoidal_table(30, 8, layout="interleaved"))
    assert torch.equal(sinusoidal_table(2, 4)[1], torch.tensor([math.sin(1.0), math.cos(1.0), math.sin(0.01),
                                                                  math.cos(0.01)]))
    pe = build_positional("sinusoidal", d_model=8, n_heads=2, max_len=16, causal=False)
    assert pe.layout == "interleaved" and torch.equal(pe.table, sinusoidal_table(16, 8))


def test_embed_keeps_layout_when_the_table_grows():
    pe = SinusoidalPositional(8, max_len=4, layout="split")
    x = torch.zeros(1, 3, 8)
    assert torch.allclose(pe.embed(x, offset=10)[0], sinusoidal_table(13, 8, layout="split")[10:13], atol=1e-6)


def test_config_passes_layout_to_both_stacks():
    cfg = ModelConfig(src_vocab=20, tgt_vocab=20, d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=1,
                      sinusoidal_layout="split")
    model = build_model(cfg)
    for stack in (model.encoder, model.decoder):
        assert stack.positional.layout == "split"
        assert torch.equal(stack.positional.table[:10], sinusoidal_table(10, 16, layout="split"))


def test_unknown_layout_is_a_named_error():
    with pytest.raises(ConfigError, match="sinusoidal_layout"):
        ModelConfig(sinusoidal_layout="halves")
    with pytest.raises(ValueError, match="split"):
        sinusoidal_table(4, 8, layout="halves")


def test_split_matches_hugging_face_marian():
    marian = pytest.importorskip("transformers.models.marian.modeling_marian")
    reference = marian.MarianSinusoidalPositionalEmbedding(64, 16).create_weight()
    assert torch.allclose(sinusoidal_table(64, 16, layout="split"), reference, atol=1e-6)
