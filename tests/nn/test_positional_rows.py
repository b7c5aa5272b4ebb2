"""Per-row positions (rows of a batch at different positions, as left-padded prompts are) give each row
exactly what it gets alone at those positions."""

import pytest
import torch

from seqmap.nn.positional import LearnedPositional, RotaryPositional, SinusoidalPositional

D = 8


@pytest.mark.parametrize("make", [lambda: SinusoidalPositional(D, max_len=4), lambda: LearnedPositional(16, D)])
def test_embed_with_per_row_positions_equals_each_row_at_its_offset(make):
    torch.manual_seed(0)
    pe, x = make(), torch.randn(3, 2, D)
    offsets = [0, 5, 9]  # past the sinusoidal table's first 4 rows: it grows
    positions = torch.tensor(offsets)[:, None] + torch.arange(2)  # (B, T)
    got = pe.embed(x, positions=positions)
    for b, offset in enumerate(offsets):
        torch.testing.assert_close(got[b:b + 1], pe.embed(x[b:b + 1], offset), atol=0, rtol=0)


def test_learned_positions_refuse_a_row_past_max_len():
    with pytest.raises(ValueError, match="model.max_len=4"):
        LearnedPositional(4, D).embed(torch.randn(2, 1, D), positions=torch.tensor([[1], [4]]))


def test_rotate_with_per_row_positions_equals_each_row_at_its_positions():
    rope = RotaryPositional(D, max_len=4)
    x = torch.randn(3, 2, 2, D)  # (B, H, T, Dh)
    positions = torch.tensor([[0, 1], [6, 7], [2, 3]])  # (B, T)
    got = rope.rotate(x, positions)
    for b in range(3):
        torch.testing.assert_close(got[b:b + 1], rope.rotate(x[b:b + 1], positions[b]), atol=0, rtol=0)
