"""The audio front end: log-mel features against a direct computation, exact frame masks, padding invariance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("librosa", reason="the speech extra (pip install 'seqmap[speech]') is not installed")

from seqmap.nn.audio import AudioFrontEnd, LogMel, frames_of, normalise, spec_augment, subsampled  # noqa: E402

RATE, N_FFT, HOP, MELS = 8000, 200, 80, 40


def sine(freq: float, seconds: float = 0.5, rate: int = RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def test_log_mel_matches_a_direct_numpy_computation():
    import librosa

    wave = sine(440.0) + 0.01 * np.random.default_rng(0).standard_normal(4000).astype(np.float32)
    got = LogMel(RATE, N_FFT, HOP, MELS)(torch.from_numpy(wave)[None])[0].numpy()
    window = np.hanning(N_FFT + 1)[:-1]  # periodic Hann, as torch.hann_window
    frames = np.stack([wave[f * HOP:f * HOP + N_FFT] * window for f in range((len(wave) - N_FFT) // HOP + 1)])
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # (F, n_fft / 2 + 1)
    want = np.log(power @ librosa.filters.mel(sr=RATE, n_fft=N_FFT, n_mels=MELS).T + 1e-6)
    assert got.shape == want.shape == (frames_of(torch.tensor(4000), N_FFT, HOP).item(), MELS)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("freq", [300.0, 1000.0, 2500.0])
def test_a_sines_energy_lands_in_its_mel_band(freq):
    import librosa

    feats = LogMel(RATE, N_FFT, HOP, MELS)(torch.from_numpy(sine(freq))[None])[0]
    centres = librosa.mel_frequencies(n_mels=MELS + 2, fmax=RATE / 2)[1:-1]  # the filters' peaks
    loudest = int(feats.mean(0).argmax())
    assert abs(loudest - int(np.abs(centres - freq).argmin())) <= 1
    assert feats.mean(0)[loudest] - feats.mean(0).median() > 5.0  # far above the other bands


def test_frame_counts_are_whole_windows_then_two_stride_2_convolutions():
    samples = torch.tensor([0, 199, 200, 279, 280, 680, 4000])
    assert frames_of(samples, N_FFT, HOP).tolist() == [0, 0, 1, 1, 2, 7, 48]
    assert subsampled(torch.tensor([0, 2, 3, 6, 7, 48])).tolist() == [0, 0, 0, 0, 1, 11]


def frontend(**kw) -> AudioFrontEnd:
    torch.manual_seed(0)
    return AudioFrontEnd(RATE, N_FFT, HOP, MELS, 8, 16, **kw).eval()


def test_padding_never_changes_a_real_frame():
    fe = frontend()
    short, long = torch.from_numpy(sine(500.0, 0.3)), torch.from_numpy(sine(900.0, 0.6))
    alone, mask_alone = fe(short[None], None)
    batch = torch.zeros(2, len(long))
    batch[0, :len(short)], batch[1] = short, long
    wave_mask = torch.arange(len(long)) < torch.tensor([[len(short)], [len(long)]])
    padded, mask = fe(batch, wave_mask)
    n = int(mask_alone.sum())
    assert n == alone.size(1) == int(fe.frame_lengths(torch.tensor(len(short))))
    assert mask.sum(1).tolist() == [n, int(fe.frame_lengths(torch.tensor(len(long))))]
    torch.testing.assert_close(padded[0, :n], alone[0], rtol=1e-3, atol=2e-4)  # batched float rounding only


def test_normalise_uses_only_real_frames_and_zeroes_the_rest():
    feats = torch.randn(2, 10, 4)
    mask = torch.arange(10) < torch.tensor([[6], [10]])
    out = normalise(feats, mask)
    assert out[0, 6:].abs().max() == 0
    torch.testing.assert_close(out[0, :6].mean(), torch.tensor(0.0), atol=1e-5, rtol=0)
    torch.testing.assert_close(out[0, :6].var(unbiased=False), torch.tensor(1.0), atol=1e-3, rtol=0)
    torch.testing.assert_close(normalise(3.0 + feats, mask), out, atol=1e-5, rtol=0)  # a gain changes nothing
    spectrum = out[1].mean(0)  # ... but the shape of the spectrum stays
    torch.testing.assert_close(spectrum - spectrum.mean(), (feats[1].mean(0) - feats[1].mean()) / feats[1].std(
        unbiased=False), atol=1e-3, rtol=0)
    torch.testing.assert_close(out[0, :6], normalise(feats[:1, :6], mask[:1, :6])[0])


def test_spec_augment_masks_only_in_training_and_only_within_limits():
    torch.manual_seed(0)
    feats, mask = torch.ones(3, 50, 20), torch.ones(3, 50, dtype=torch.bool)
    out = spec_augment(feats, mask, 2, 4, 2, 5)
    zero_bands = (out == 0).all(1).sum(1)  # whole mel bands masked per utterance
    assert (zero_bands <= 8).all() and (out == 0).any()
    fe = frontend(spec_augment=(2, 4, 2, 5))
    wave = torch.from_numpy(sine(700.0))[None]
    torch.testing.assert_close(fe(wave, None)[0], fe(wave, None)[0])  # eval: deterministic, no masks


def test_too_short_audio_is_one_clear_error():
    with pytest.raises(ValueError, match="too short"):
        frontend()(torch.zeros(1, 300), None)


def test_a_waveform_without_its_batch_axis_is_one_clear_error():
    """A 1-D waveform failed with an IndexError inside the frame count."""
    with pytest.raises(ValueError, match=r"wave must be \(B, N\) samples.*wave\[None\]"):
        frontend()(torch.zeros(4000), None)
    with pytest.raises(ValueError, match=r"wave_mask None or \(B, N\)"):
        frontend()(torch.zeros(2, 4000), torch.ones(2, 3000, dtype=torch.bool))
