"""Where a speech model listened: the decoder's cross-attention over encoder frames, under the spectrogram.

The top panel is the utterance's normalised log-mel spectrogram (what the encoder reads); the bottom
panel is the attention of every output token over the encoder frames, on the same time axis in
seconds (encoder frame j reads feature frames 4j..4j+6, so it is drawn over the 4 hops it advances).
A good alignment is a staircase: each output token attends to the stretch of audio that says it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from matplotlib.figure import Figure

from seqmap.visualize.attention import select_panels
from seqmap.visualize.figures import figure_inches, save_figure


def plot_speech_attention(run, audio_path: str | Path, path: str | Path, *, layer: int | None = None,
                          head: int | str | None = None, title: str | None = None) -> Figure:
    """Transcribe ``audio_path`` greedily with the speech run ``run`` and draw its spectrogram above the
    cross-attention of ``layer`` (default: the last) averaged over heads (or one ``head``)."""
    from seqmap.data.audio import read_wav
    from seqmap.data.batching import pad_waves
    from seqmap.decoding.speech import transcribe_nbest

    model, frontend = run.model, run.model.frontend
    wave, rate = read_wav(audio_path, frontend.sample_rate)
    greedy = dataclasses.replace(run.cfg.decode, beam_size=1)
    hyp = transcribe_nbest(model, [wave], greedy, need_attention=True, device=run.device)[0][0]
    src, mask = pad_waves([wave])
    with torch.no_grad():
        feats, _ = frontend.features(src.to(run.device), mask.to(run.device))
    feats = feats[0].cpu().numpy()  # (F, M)
    attention = hyp.attention.cpu()  # (L, H, T, S)
    layer = attention.size(0) - 1 if layer is None else layer
    maps, _ = select_panels(attention, layer, "mean" if head is None else head)
    weights = maps[0, 0]  # (T, S)
    tokens = run.tgt_tok.pieces(hyp.output) + ["</s>"]
    tokens = tokens[:weights.shape[0]]
    hop = frontend.logmel.hop / rate
    seconds = len(wave) / rate
    fig = Figure(figsize=figure_inches(8.0, 2.2 + 0.25 * len(tokens)), dpi=100)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1.0, 0.4 + 0.1 * len(tokens)]})
    top.imshow(feats.T, origin="lower", aspect="auto", cmap="magma", extent=(0, feats.shape[0] * hop, 0,
                                                                             feats.shape[1]))
    top.set_ylabel("mel band")
    shown = bottom.imshow(weights, aspect="auto", cmap="viridis", interpolation="nearest", vmin=0,
                          extent=(0, weights.shape[1] * 4 * hop, len(tokens) - 0.5, -0.5))
    bottom.set_yticks(range(len(tokens)))
    bottom.set_yticklabels(tokens)
    bottom.set_xlabel("seconds")
    bottom.set_xlim(0, seconds)
    fig.colorbar(shown, ax=[top, bottom], fraction=0.03, pad=0.02)
    what = "mean of heads" if head in (None, "mean") else f"head {head}"
    text = run.tgt_tok.decode(hyp.output)
    fig.suptitle(title or f"{Path(audio_path).name}: \"{text}\" (cross-attention, layer {layer}, {what})",
                 fontsize=10)
    save_figure(fig, path)
    return fig
