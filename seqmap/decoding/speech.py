"""Transcribing audio: waveforms in, transcripts out, with the same greedy / beam search as translation.

The maximum length of an output is ``decode.max_len_a`` times the utterance's encoder frames (after
subsampling) plus ``decode.max_len_b`` tokens; batches hold at most ``decode.max_tokens`` frames
after beam expansion, in length order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from seqmap.config import DecodeConfig
from seqmap.data.batching import pad_waves
from seqmap.data.tokenizers import BOS, Tokenizer
from seqmap.decoding.text import Scored, batch_budget, budget_batches, decode_batch, resolve_config, strip_output


@torch.no_grad()
def transcribe_nbest(model, waves: Sequence[np.ndarray], decode: DecodeConfig, *, n_best: int = 1,
                     need_attention: bool = False, device: torch.device | str = "cpu") -> list[list[Scored]]:
    """Per waveform (float32 samples at the model's rate), its n-best transcripts as ``Scored`` id lists."""
    frames = model.frontend.frame_lengths(torch.tensor([len(w) for w in waves])).tolist()
    short = [i for i, f in enumerate(frames) if f < 1]
    if short:
        raise ValueError(f"utterance {short[0]} is too short ({len(waves[short[0]])} samples) to give one encoder "
                         "frame; pad it with silence or leave it out")
    out: list[list[Scored]] = [[] for _ in waves]
    for batch in budget_batches(frames, range(len(waves)), batch_budget(decode)):
        src, src_mask = pad_waves([waves[i] for i in batch])
        src, src_mask = src.to(device), src_mask.to(device)
        max_len = (decode.max_len_a * torch.tensor([frames[i] for i in batch]) + decode.max_len_b).long().clamp(min=1)
        prompt = torch.full((len(batch), 1), BOS, dtype=torch.long, device=device)
        hyps = decode_batch(model, src, src_mask, prompt, max_len, decode, n_best=n_best,
                            need_attention=need_attention)
        for i, nbest in zip(batch, hyps):
            out[i] = [Scored(strip_output(h.tokens), h.score, h.normalized, h.attention) for h in nbest]
    return out


def transcribe(model, tok: Tokenizer, waves: Sequence[np.ndarray], decode: DecodeConfig | None = None, *,
               device: torch.device | str = "cpu", **overrides) -> list[str]:
    """The best transcript of each waveform; ``overrides`` replace fields of ``decode`` (e.g. ``beam_size=5``)."""
    decode = resolve_config(decode, overrides)
    return [tok.decode(entries[0].output) for entries in transcribe_nbest(model, waves, decode, device=device)]
