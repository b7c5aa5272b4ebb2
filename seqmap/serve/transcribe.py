"""The model side of ``POST /transcribe``: base64 audio files in, transcripts and cross-attention out. No HTTP here.

``SpeechEngine`` wraps a loaded speech run (``data.task`` speech) and offers what the app and the batcher call:

    engine.inputs(req)                 -> the request's recordings, decoded and checked (in the request's handler)
    engine.transcribe_key(req)         -> the batch key: the beam size a batch must share
    engine.run_transcribe(key, jobs)   -> per job, its list of transcription dicts (in the worker thread)

Every recording of a batch is decoded in one ``seqmap.decoding.speech.transcribe_nbest`` call (padded
waveforms; padding never changes a real frame, and cross-attention never reads a padded one), so a
batch gives the transcripts of ``seqmap transcribe`` with the same decode settings. Attention, when
asked for, is what the decoder's cross-attention read while it chose each token, over the utterance's
encoder frames, per layer and head as ``/translate`` returns it, with the normalised log-mel spectrogram
and its time steps so that the page can draw each token's row under the audio it heard (as
``seqmap plot attention --audio`` does).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from seqmap.config import DecodeConfig, to_dict
from seqmap.data.audio import read_audio_bytes
from seqmap.data.batching import pad_waves
from seqmap.data.corpus import DataError
from seqmap.data.tokenizers import EOS
from seqmap.decoding.speech import transcribe_nbest
from seqmap.decoding.text import Scored, resolve_config
from seqmap.nn.audio import frames_of
from seqmap.runs import LoadedRun
from seqmap.serve.engine import DECIMALS, run_header
from seqmap.serve.schemas import Limits, RequestError, TranscribeRequest, check_transcribe, decode_base64

FEATURE_DECIMALS = 2  # log-mel features are normalised (unit variance): 0.01 is below what a colour map shows
SUBSAMPLING = 4  # feature frames per encoder frame (two stride-2 convolutions)


@dataclass(frozen=True)
class TranscribeJob:
    waves: list[np.ndarray]  # mono float32 at the model's sample rate
    attention: bool


class SpeechEngine:
    """A loaded speech run and the work of /transcribe (``run_transcribe`` is called from the worker thread only)."""

    def __init__(self, run: LoadedRun, limits: Limits | None = None) -> None:
        self.run = run
        self.limits = limits or Limits()
        self.task = "speech"
        self.decode: DecodeConfig = run.cfg.decode
        self.frontend = run.model.frontend
        m = run.cfg.model
        self.attention_shape = {"available": True, "layers": m.dec_layers, "heads": m.n_heads}
        self.has_attention = True

    # -- in the request's handler ---------------------------------------------------------------
    def inputs(self, req: TranscribeRequest) -> TranscribeJob:
        """The request's recordings, decoded from base64 and resampled; errors name the field and index."""
        items = check_transcribe(req, self.limits, self.decode.beam_size)
        one = isinstance(req.audio, str)
        waves = [self._wave(item, "audio" if one else f"audio[{i}]") for i, item in enumerate(items)]
        if req.attention:
            self.check_attention_size(waves)
        return TranscribeJob(waves, req.attention)

    def _wave(self, data: str, field: str) -> np.ndarray:
        raw = decode_base64(data, field, "audio")
        rate = self.frontend.sample_rate
        try:
            wave, _ = read_audio_bytes(raw, field, rate, max_seconds=self.limits.max_audio_seconds)
        except DataError as e:
            raise RequestError(str(e), field) from None
        if int(self.frontend.frame_lengths(torch.tensor(len(wave)))) < 1:
            raise RequestError(f"{field} is too short ({len(wave) / rate:.3f} s) for one encoder frame; send at "
                               f"least {self.frontend.min_samples / rate:.3f} s of audio", field)
        return wave

    def check_attention_size(self, waves: list[np.ndarray]) -> None:
        """Refuse (422, field ``attention``) a request whose attention and spectrograms could pass the limit."""
        shape, d = self.attention_shape, self.decode
        logmel = self.frontend.logmel
        samples = torch.tensor([len(w) for w in waves])
        frames = self.frontend.frame_lengths(samples).tolist()
        features = frames_of(samples, logmel.n_fft, logmel.hop).tolist()
        bound = sum(shape["layers"] * shape["heads"] * (int(d.max_len_a * s + d.max_len_b) + 1) * s
                    + f * logmel.n_mels for s, f in zip(frames, features))
        if bound > self.limits.max_attention_weights:
            raise RequestError(f"attention for this request could hold up to {bound:,} numbers; this server sends "
                               f"at most {self.limits.max_attention_weights:,} per answer: send fewer or shorter "
                               "recordings, or attention=false", "attention")

    def transcribe_key(self, req: TranscribeRequest) -> Hashable:
        """Options that every request of a batch must share: the beam size."""
        return ("transcribe", req.beam_size or self.decode.beam_size)

    # -- in the worker thread ---------------------------------------------------------------------
    def run_transcribe(self, key: Hashable, jobs: list[TranscribeJob]) -> list[list[dict[str, Any]]]:
        """Transcribe the recordings of every job in one call; per job, one dict per recording."""
        _, beam = key
        run = self.run
        decode = resolve_config(self.decode, {"beam_size": beam})
        waves = [w for job in jobs for w in job.waves]
        want_attention = any(job.attention for job in jobs)
        nbest = transcribe_nbest(run.model, waves, decode, need_attention=want_attention, device=run.device)
        rate = self.frontend.sample_rate
        out, i = [], 0
        for job in jobs:
            results = []
            for wave in job.waves:
                best = nbest[i][0]
                i += 1
                results.append({
                    "transcript": run.tgt_tok.decode(best.output),
                    "tokens": run.tgt_tok.pieces(best.output),
                    "score": best.score,
                    "normalized": best.normalized,
                    "seconds": round(len(wave) / rate, 4),
                    "attention": self.cross_attention(wave, best) if job.attention else None,
                })
            out.append(results)
        return out

    @torch.no_grad()
    def cross_attention(self, wave: np.ndarray, best: Scored) -> dict[str, Any]:
        """The best transcript's (L, H, T, S) cross-attention cut to the utterance's frames, and its spectrogram."""
        run, logmel = self.run, self.frontend.logmel
        frames = int(self.frontend.frame_lengths(torch.tensor(len(wave))))
        weights = best.attention[..., :frames].cpu()  # (L, H, T, S): keys beyond the utterance's frames are padding
        output_tokens = [*run.tgt_tok.pieces(best.output), *run.tgt_tok.pieces([EOS])][: weights.size(-2)]
        src, mask = pad_waves([wave])
        features, real = self.frontend.features(src.to(run.device), mask.to(run.device))
        features = features[0, : int(real[0].sum())].cpu()  # (F, M)
        rate = self.frontend.sample_rate
        return {"output_tokens": output_tokens, "frames": frames, "layers": weights.size(0),
                "heads": weights.size(1), "weights": weights.double().round(decimals=DECIMALS).tolist(),
                "spectrogram": {"features": features.double().round(decimals=FEATURE_DECIMALS).tolist(),
                                "feature_seconds": logmel.hop / rate,
                                "frame_seconds": SUBSAMPLING * logmel.hop / rate,
                                "window_seconds": logmel.n_fft / rate}}

    # -- description -------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """What /info shows: the model, its audio front end, vocabulary, how it was trained, decode defaults."""
        run, cfg = self.run, self.run.cfg
        m, d, t = cfg.model, cfg.data, cfg.train
        rate, logmel = self.frontend.sample_rate, self.frontend.logmel
        return {
            **run_header(run, self.task),
            "sizes": {"d_model": m.d_model, "n_heads": m.n_heads, "d_ff": m.d_ff, "enc_layers": m.enc_layers,
                      "dec_layers": m.dec_layers, "conformer": m.conformer, "norm_position": m.norm_position},
            "attention": self.attention_shape,
            "audio": {"sample_rate": rate, "window_ms": m.window_ms, "hop_ms": m.hop_ms, "n_mels": logmel.n_mels,
                      "min_seconds": self.frontend.min_samples / rate,
                      "max_seconds": self.limits.max_audio_seconds},
            "vocabulary": {"tokenizer": run.tgt_tok.kind, "target": run.tgt_tok.vocab_size},
            "training": {"dataset": d.dataset, "tokenizer": d.tokenizer, "vocab_size": d.vocab_size,
                         "max_steps": t.max_steps, "lr": t.lr, "schedule": t.schedule, "warmup": t.warmup,
                         "spec_augment": list(m.spec_augment), "dropout": m.dropout},
            "decode_defaults": to_dict(self.decode),
            "model_config": to_dict(m),
        }
