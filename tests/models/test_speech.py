"""The speech Transformer (and its Conformer encoder): protocol invariants on waveforms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("librosa", reason="the speech extra (pip install 'seqmap[speech]') is not installed")

from seqmap.config import ConfigError, ModelConfig  # noqa: E402
from seqmap.data.batching import pad_waves  # noqa: E402
from seqmap.decoding.beam import beam_search  # noqa: E402
from seqmap.decoding.greedy import greedy  # noqa: E402
from seqmap.models.builder import build_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
VOCAB = 14


def model(conformer: bool = False, **kw):
    torch.manual_seed(0)
    cfg = ModelConfig(family="speech", sample_rate=8000, tgt_vocab=VOCAB, d_model=16, n_heads=2, d_ff=32,
                      enc_layers=2, dec_layers=1, n_mels=16, conv_channels=4, dropout=0.0, conformer=conformer,
                      conv_kernel=5, **kw)
    return build_model(cfg).eval()


def waves(*lengths: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.3 * rng.standard_normal(n)).astype(np.float32) for n in lengths]


@pytest.mark.parametrize("conformer", [False, True])
def test_padding_frames_get_exactly_zero_cross_attention_and_change_nothing(conformer):
    m = model(conformer)
    src, mask = pad_waves(waves(1500, 3000))
    tgt = torch.tensor([[1, 5, 6], [1, 7, 8]])
    with torch.no_grad():
        memory = m.encode(src, mask)
        _, _, attn = m.decode_step(tgt, memory, None, need_attention=True)  # (B, L, H, t, S)
        short = int(memory.mask[0].sum())
        assert short < memory.mask.size(1)
        assert attn[0, ..., short:].abs().max() == 0
        alone = m(src[:1, :1500], None, tgt[:1])
        batched = m(src, mask, tgt)
    torch.testing.assert_close(batched[0], alone[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("conformer", [False, True])
def test_incremental_decoding_equals_the_full_forward_pass(conformer):
    m = model(conformer)
    src, mask = pad_waves(waves(2000, 2600))
    tgt = torch.tensor([[1, 5, 6, 7], [1, 8, 9, 10]])
    with torch.no_grad():
        full = m(src, mask, tgt)
        memory, state, steps = m.encode(src, mask), None, []
        for t in range(tgt.size(1)):
            logits, state, _ = m.decode_step(tgt[:, t:t + 1], memory, state)
            steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-4, atol=1e-5)


def test_beam_of_one_is_greedy():
    m = model()
    src, mask = pad_waves(waves(1800, 2500, 3100))
    g = greedy(m, src, mask, bos=1, eos=2, max_len=8)
    b = beam_search(m, src, mask, beam_size=1, bos=1, eos=2, max_len=8)
    for row, hyp in enumerate(b.hypotheses):
        assert hyp[0].tokens == g.tokens[row, :int(g.lengths[row])].tolist()


@pytest.mark.parametrize("conformer", [False, True])
def test_every_parameter_gets_a_finite_gradient_and_one_batch_is_learnt(conformer):
    m = model(conformer, spec_augment=[1, 2, 1, 2]).train()
    src, mask = pad_waves(waves(1600, 2400))
    tgt_in, tgt_out = torch.tensor([[1, 5, 6], [1, 7, 8]]), torch.tensor([[5, 6, 2], [7, 8, 2]])
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    losses = []
    for step in range(40):
        loss = torch.nn.functional.cross_entropy(m(src, mask, tgt_in).flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        if step == 0:
            for name, p in m.named_parameters():
                assert p.grad is not None and torch.isfinite(p.grad).all(), name
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]


def test_config_errors_name_the_option():
    with pytest.raises(ConfigError, match="model.conv_kernel must be odd"):
        ModelConfig(family="speech", conv_kernel=4)
    with pytest.raises(ConfigError, match="model.spec_augment"):
        ModelConfig(family="speech", spec_augment=[1, 2])
    with pytest.raises(ConfigError, match="model.sample_rate must be set"):
        build_model(ModelConfig(family="speech", tgt_vocab=10))
    with pytest.raises(ConfigError, match=r"model.window_ms=0.5 / hop_ms=10.0 at 8000 Hz give windows of 4 and hops "
                                          "of 80 samples; lengthen them"):
        build_model(ModelConfig(family="speech", tgt_vocab=10, sample_rate=8000, window_ms=0.5))
    with pytest.raises(ConfigError, match=r"hops of 0 samples"):
        build_model(ModelConfig(family="speech", tgt_vocab=10, sample_rate=8000, hop_ms=0.05))
    with pytest.raises(ConfigError, match=r"model.n_mels=6 is too few for the 4x subsampling; use at least 7"):
        build_model(ModelConfig(family="speech", tgt_vocab=10, sample_rate=8000, n_mels=6))
    assert build_model(ModelConfig(family="speech", tgt_vocab=10, sample_rate=8000, n_mels=7, d_model=16, n_heads=2,
                                   d_ff=16, conv_channels=2)).frontend.subsample.proj.in_features == 2  # one band


def test_a_row_with_no_whole_frame_changes_nothing_for_the_others():
    """A 100-sample clip beside a long one: no real encoder frame, finite outputs everywhere, the long row as alone.
    Features of a clip shorter than one window are one masked frame."""
    m = model()
    src, mask = pad_waves(waves(3000, 100))
    tgt = torch.tensor([[1, 5, 6], [1, 7, 8]])
    with torch.no_grad():
        memory = m.encode(src, mask)
        batched, alone = m(src, mask, tgt), m(src[:1, :3000], None, tgt[:1])
        feats, feats_mask = m.frontend.features(torch.zeros(1, 50), None)
    assert memory.mask.sum(1).tolist() == [m.frontend.frame_lengths(torch.tensor([3000])).item(), 0]
    assert bool(batched.isfinite().all())
    torch.testing.assert_close(batched[0], alone[0], rtol=1e-4, atol=1e-4)
    assert feats.shape == (1, 1, 16) and feats_mask.tolist() == [[False]] and feats.abs().max() == 0
    with pytest.raises(ValueError, match=f"audio too short: 100 samples give no frame after subsampling; an "
                                         f"utterance needs at least {m.frontend.min_samples} samples"):
        m.encode(src[1:, :100], None)


def test_ctc_loss_reads_the_targets_without_eos_and_padding():
    m = model(ctc_weight=0.3)
    src, mask = pad_waves(waves(2400, 3000))
    tgt_in, tgt_out = torch.tensor([[1, 5, 6, 7], [1, 8, 0, 0]]), torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]])
    out, ctc = m(src, mask, tgt_in, ctc_targets=tgt_out)
    torch.testing.assert_close(out, m(src, mask, tgt_in))
    memory = m.encode(src, mask)
    log_probs = m.ctc_head(memory.states).log_softmax(-1).transpose(0, 1)
    want = torch.nn.functional.ctc_loss(log_probs, torch.tensor([5, 6, 7, 8]), memory.mask.sum(1),
                                        torch.tensor([3, 1]), blank=0, reduction="sum")
    torch.testing.assert_close(ctc, want)
    ctc.backward()
    assert m.ctc_head.weight.grad.abs().sum() > 0 and m.decoder.output.weight.grad is None
    with pytest.raises(ConfigError, match="model.ctc_weight must be in"):
        ModelConfig(family="speech", ctc_weight=1.0)
