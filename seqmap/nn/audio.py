"""Speech as a sequence: waveform -> log-mel frames -> convolutional subsampling -> vectors for the encoder.

    wave (B, N) samples in [-1, 1], N_b real per row
      -> LogMel: power spectrum of Hann windows (torch.stft), a mel filterbank, log    (B, F, M)
      -> per-utterance mean/variance normalisation over its real frames (all bands) (B, F, M)
      -> SpecAugment-style masks (training only, optional)
      -> ConvSubsampling: two 3x3 convolutions of stride 2 over (time, mel), ReLU   (B, F', D)

``AudioFrontEnd`` is what a Transformer encoder's token embedding is for text (as ``PatchEmbedding``
is for images): the speech model is the Transformer encoder-decoder with this module in front.

Padding never changes a real frame: windows are not centred (frame f covers samples
[f * hop, f * hop + n_fft)), a frame is real only if its whole window lies within the utterance,
and an output of the subsampling is real only if every input frame it reads is real. So the
frame mask after subsampling is exact, and an utterance alone or padded in a batch gives the same
vectors at its real frames. The mel filterbank is librosa's (Slaney scale, area-normalised), kept
as a buffer so that a saved model computes its own features.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

LOG_FLOOR = 1e-6  # added to mel energies before the log (digital silence stays finite)


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int) -> Tensor:
    """(n_mels, n_fft // 2 + 1) triangular mel filters from librosa (``pip install seqmap[speech]``)."""
    try:
        import librosa.filters
    except ImportError:
        raise ImportError("speech models need librosa for their mel filterbank: pip install 'seqmap[speech]'") \
            from None
    return torch.from_numpy(librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels)).float()


def frames_of(samples: Tensor, n_fft: int, hop: int) -> Tensor:
    """Whole analysis windows in utterances of ``samples`` samples (0 when shorter than one window)."""
    return torch.where(samples >= n_fft, (samples - n_fft) // hop + 1, torch.zeros_like(samples))


def subsampled(frames: Tensor) -> Tensor:
    """Outputs of two unpadded stride-2 convolutions of width 3 over ``frames`` real input frames."""
    once = torch.clamp((frames - 3) // 2 + 1, min=0)
    return torch.clamp((once - 3) // 2 + 1, min=0)


class LogMel(nn.Module):
    """Waveforms (B, N) -> log mel energies (B, F, n_mels), F = whole windows of the longest row."""

    def __init__(self, sample_rate: int, n_fft: int, hop: int, n_mels: int):
        super().__init__()
        self.sample_rate, self.n_fft, self.hop, self.n_mels = sample_rate, n_fft, hop, n_mels
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)
        self.register_buffer("filters", mel_filterbank(sample_rate, n_fft, n_mels), persistent=False)

    def forward(self, wave: Tensor) -> Tensor:
        if wave.size(1) < self.n_fft:  # too short for one window: pad so that stft has one (masked) frame
            wave = nn.functional.pad(wave, (0, self.n_fft - wave.size(1)))
        spec = torch.stft(wave, self.n_fft, self.hop, window=self.window, center=False, return_complex=True)
        power = spec.real ** 2 + spec.imag ** 2  # (B, n_fft // 2 + 1, F)
        return torch.log(self.filters @ power + LOG_FLOOR).transpose(1, 2)  # (B, F, M)


def normalise(features: Tensor, mask: Tensor) -> Tensor:
    """Per utterance: zero mean and unit variance over all bands of its real frames; padded frames become 0.

    features (B, F, M), mask (B, F) True at real frames. One mean and one variance per utterance remove its
    gain (a constant in the log domain) but keep the shape of its spectrum: normalising each band on its
    own would flatten a steady tone, and turn every band into the same speech/silence contrast.
    """
    m = mask.unsqueeze(-1).to(features.dtype)
    n = (m.sum((1, 2), keepdim=True) * features.size(-1)).clamp(min=1.0)
    mean = (features * m).sum((1, 2), keepdim=True) / n
    var = (((features - mean) * m) ** 2).sum((1, 2), keepdim=True) / n
    return (features - mean) / torch.sqrt(var + 1e-5) * m


def spec_augment(features: Tensor, mask: Tensor, freq_masks: int, freq_width: int, time_masks: int,
                 time_width: int) -> Tensor:
    """Zero ``freq_masks`` random bands of up to ``freq_width`` mels and ``time_masks`` random spans of up to
    ``time_width`` real frames in each utterance (Park et al. 2019, without time warping); torch's RNG."""
    b, f, m = features.shape
    keep = torch.ones_like(features, dtype=torch.bool)
    lengths = mask.sum(1)
    bands = torch.arange(m, device=features.device)
    steps = torch.arange(f, device=features.device)
    for _ in range(freq_masks):
        width = torch.randint(0, freq_width + 1, (b, 1), device=features.device)
        start = (torch.rand(b, 1, device=features.device) * (m - width + 1)).long()
        keep &= ~((bands >= start) & (bands < start + width)).unsqueeze(1)
    for _ in range(time_masks):
        width = torch.minimum(torch.randint(0, time_width + 1, (b, 1), device=features.device),
                              (lengths // 5).unsqueeze(1))  # at most a fifth of the utterance per span
        start = (torch.rand(b, 1, device=features.device) * (lengths.unsqueeze(1) - width + 1)).long()
        keep &= ~((steps >= start) & (steps < start + width)).unsqueeze(-1)
    return features * keep


class ConvSubsampling(nn.Module):
    """(B, F, M) features -> (B, F', D): two 3x3 convolutions of stride 2 (no padding), ReLU, then a Linear."""

    def __init__(self, n_mels: int, channels: int, d_model: int):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=2)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=2)
        width = ((n_mels - 3) // 2 + 1 - 3) // 2 + 1
        self.proj = nn.Linear(channels * width, d_model)

    def forward(self, features: Tensor) -> Tensor:
        x = torch.relu(self.conv1(features.unsqueeze(1)))  # (B, C, F1, M1)
        x = torch.relu(self.conv2(x))  # (B, C, F2, M2)
        b, c, f, m = x.shape
        return self.proj(x.permute(0, 2, 1, 3).reshape(b, f, c * m))


class AudioFrontEnd(nn.Module):
    """Raw waveforms and their sample mask -> encoder input vectors (B, F', D) and their frame mask (B, F').

    Args:
        sample_rate: the rate every input must have (the data reader resamples to it).
        n_fft, hop: window and hop in samples (e.g. 25 ms and 10 ms).
        n_mels: mel bands.
        channels: convolution channels of the subsampling.
        d_model: the encoder width D.
        spec_augment: (freq_masks, freq_width, time_masks, time_width) applied in training mode only.
    """

    def __init__(self, sample_rate: int, n_fft: int, hop: int, n_mels: int, channels: int, d_model: int,
                 spec_augment: tuple[int, int, int, int] = (0, 0, 0, 0)):
        super().__init__()
        self.logmel = LogMel(sample_rate, n_fft, hop, n_mels)
        self.subsample = ConvSubsampling(n_mels, channels, d_model)
        self.spec_augment = tuple(spec_augment)

    @property
    def sample_rate(self) -> int:
        return self.logmel.sample_rate

    @property
    def min_samples(self) -> int:
        """The shortest utterance that gives one encoder frame: 7 windows, for the two convolutions."""
        return self.logmel.n_fft + 6 * self.logmel.hop

    def frame_lengths(self, samples: Tensor) -> Tensor:
        """Encoder frames (after subsampling) of utterances of ``samples`` samples."""
        return subsampled(frames_of(samples, self.logmel.n_fft, self.logmel.hop))

    def utterance_frames(self, utterances) -> list[int]:
        """Encoder frames of each utterance (``seqmap.data.audio.Utterances``: ``len()``, ``length(i)`` in samples),
        the lengths that batching budgets."""
        return self.frame_lengths(torch.tensor([utterances.length(i) for i in range(len(utterances))])).tolist()

    def features(self, wave: Tensor, wave_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """Normalised log-mel features (B, F, M) and their mask (B, F), before subsampling (for plots)."""
        if wave.dim() != 2 or (wave_mask is not None and wave_mask.shape != wave.shape):
            raise ValueError(f"wave must be (B, N) samples and wave_mask None or (B, N), got {tuple(wave.shape)} and "
                             f"{None if wave_mask is None else tuple(wave_mask.shape)}; one waveform is wave[None]")
        samples = (torch.full((wave.size(0),), wave.size(1), device=wave.device) if wave_mask is None
                   else wave_mask.sum(1))
        feats = self.logmel(wave.float())
        lengths = frames_of(samples, self.logmel.n_fft, self.logmel.hop)
        mask = torch.arange(feats.size(1), device=wave.device) < lengths.unsqueeze(1)
        return normalise(feats, mask), mask

    def forward(self, wave: Tensor, wave_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        feats, mask = self.features(wave, wave_mask)
        if self.training and any(self.spec_augment):
            feats = spec_augment(feats, mask, *self.spec_augment)
        if feats.size(1) < 7:  # the two convolutions need 7 frames for one output
            raise ValueError(f"audio too short: {int(wave.size(1))} samples give no frame after subsampling; "
                             f"an utterance needs at least {self.min_samples} samples")
        x = self.subsample(feats)
        lengths = subsampled(mask.sum(1))
        return x, torch.arange(x.size(1), device=x.device) < lengths.unsqueeze(1)
