import pytest
import torch

from seqmap.data.batching import Batch
from seqmap.data.synthetic import BOS, EOS, PAD, SyntheticTask, render, strip


def _rows(batch):
    """(src, tgt) per row as plain lists, cut at their lengths."""
    return [(strip(s), strip(t)) for s, t in zip(batch.src, batch.tgt_out, strict=True)]


def test_same_seed_same_data_other_seed_other_data():
    task = SyntheticTask("reverse", vocab=20, min_len=3, max_len=9)
    a, b, c = task.batches(2, 16, seed=7), task.batches(2, 16, seed=7), task.batches(2, 16, seed=8)
    for x, y in zip(a, b, strict=True):
        for name in ("src", "src_mask", "tgt_in", "tgt_out", "tgt_mask"):
            assert torch.equal(getattr(x, name), getattr(y, name))
        assert x.n_tokens == y.n_tokens
    assert not torch.equal(a[0].src[:, :3], c[0].src[:, :3])


@pytest.mark.parametrize("name, fn", [("copy", lambda s: s), ("reverse", lambda s: s[::-1]), ("sort", sorted)])
def test_targets_are_the_transformed_sources(name, fn):
    (batch,) = SyntheticTask(name, vocab=12, min_len=1, max_len=10).batches(1, 64, seed=0)
    for src, tgt in _rows(batch):
        assert tgt == list(fn(src))


def test_batches_are_the_batches_of_real_data():
    (batch,) = SyntheticTask("copy", vocab=10, min_len=2, max_len=5).batches(1, 8, seed=0)
    assert isinstance(batch, Batch) and batch.n_tokens == int(batch.tgt_mask.sum())
    assert batch.to("cpu").tgt_out is not None  # the trainer moves batches with Batch.to


def test_layout_bos_eos_padding_and_masks():
    (batch,) = SyntheticTask("reverse", vocab=20, min_len=2, max_len=8).batches(1, 32, seed=1)
    lengths = batch.src_mask.sum(dim=1)
    assert lengths.min() >= 2 and lengths.max() <= 8
    assert batch.src.dtype == torch.long and batch.src_mask.dtype == torch.bool
    assert torch.equal(batch.src_mask, batch.src != PAD)
    assert batch.tgt_in.shape == batch.tgt_out.shape == (32, batch.src.size(1) + 1)
    assert (batch.tgt_in[:, 0] == BOS).all()
    for i, n in enumerate(lengths.tolist()):
        assert batch.tgt_out[i, n] == EOS  # target + eos
        assert torch.equal(batch.tgt_in[i, 1 : n + 1], batch.tgt_out[i, :n])  # shifted by one
        assert (batch.tgt_out[i, n + 1 :] == PAD).all() and (batch.tgt_in[i, n + 1 :] == PAD).all()
        assert (batch.src[i, n:] == PAD).all()
    assert torch.equal(batch.tgt_mask.sum(dim=1), lengths + 1)


def test_specials_never_appear_inside_content():
    task = SyntheticTask("sort", vocab=5, min_len=1, max_len=6)
    for batch in task.batches(4, 64, seed=3):
        content = batch.src[batch.src_mask]
        assert content.min() >= 3 and content.max() <= 4
        inside = batch.tgt_out[batch.tgt_mask & (batch.tgt_out != EOS)]
        assert inside.min() >= 3
        assert ((batch.tgt_out == EOS).sum(dim=1) == 1).all()


def test_bad_task_settings_are_rejected():
    with pytest.raises(ValueError, match="choose one of"):
        SyntheticTask("rotate")
    with pytest.raises(ValueError, match="vocab"):
        SyntheticTask("copy", vocab=3)
    with pytest.raises(ValueError, match="min_len"):
        SyntheticTask("copy", min_len=5, max_len=4)


def test_render_and_strip():
    assert render([BOS, 3, 4, 28, 29, EOS, PAD]) == "<bos> a b z 29 <eos> <pad>"
    assert render(torch.tensor([3, 20]), extra={20: "<sep>"}) == "a <sep>"
    assert strip(torch.tensor([5, PAD, 6, EOS, 7])) == [5, 6]
