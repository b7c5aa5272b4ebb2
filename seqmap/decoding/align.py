"""Which source token each output token looked at: attention by forced decoding, and alignments from it.

    weights = forced_attention(model, src_ids, hyp_ids)      # (L, H, T, S), or None without attention
    copy, p_gen = copy_attention(model, src_ids, hyp_ids)    # a pointer-generator's copy head: (T, S), (T,)
    positions = align(weights)                               # per output token, the source position attended most
    alignment_lines(src_pieces, tgt_pieces, positions)      # ["house -> Haus (1)", ...]
    moses_pairs(positions)                                   # "0-0 1-1 1-2"

Forced decoding feeds BOS + the hypothesis through ``decode_step`` in one call
(teacher forcing). Incremental decoding equals the full pass, so row i is the
attention the search computed when it chose output token i; the last row is the
step that chose EOS. Everything here speaks the model protocol only; self-attention
is read through methods a model may offer (see ``encoder_attention``,
``decoder_self_attention``), never by asking for a model class.

Alignments are between tokenizer pieces (subwords), not words, and come from
attention, which is a heuristic alignment at best (it is not trained to align).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from seqmap.data.tokenizers import BOS, EOS, PAD, Tokenizer


class NoAttentionError(ValueError):
    """The model computes no attention of the kind asked for; the message says which and what to do."""


def _sources(src_ids: Sequence[int] | None, device) -> tuple[Tensor | None, Tensor | None]:
    """One source as (src (1, S), src_mask (1, S)); an empty source reads one EOS, as ``translate`` does."""
    if src_ids is None:
        return None, None
    src = torch.tensor([list(src_ids) or [EOS]], dtype=torch.long, device=device)
    return src, src != PAD


def _inputs(hyp_ids: Sequence[int], bos: int, device) -> tuple[Tensor, int]:
    """(BOS + hypothesis (1, n + 1), n); a trailing EOS on the hypothesis is dropped (it was never an input)."""
    hyp = [int(i) for i in hyp_ids]
    if hyp and hyp[-1] == EOS:
        hyp = hyp[:-1]
    return torch.tensor([[bos, *hyp]], dtype=torch.long, device=device), len(hyp)


@torch.no_grad()
def forced_attention(model, src_ids: Sequence[int] | None, hyp_ids: Sequence[int], *, eos: bool = True,
                     bos: int = BOS, device: torch.device | str = "cpu") -> Tensor | None:
    """Attention of one (source, hypothesis) pair, by forced decoding in one ``decode_step`` call.

    Args:
        model: anything speaking the protocol (``encode`` / ``decode_step(..., need_attention=True)``),
            in eval mode (dropout would perturb the weights).
        src_ids: source ids (no BOS/EOS, as ``translate`` feeds them), or None for a
            decoder-only model, whose attention is then its self-attention over BOS + hypothesis.
        hyp_ids: output ids, with or without the final EOS.
        eos: keep the last row, the step that chose EOS (T = n + 1); False gives one
            row per hypothesis token (T = n).
        bos: the id fed first.
        device: where the model lives.

    Returns:
        (L, H, T, S) float weights on the CPU (rows sum to 1 over the real source), or
        None if the model has no attention (e.g. an RNN with ``rnn_attention=none``).
    """
    src, src_mask = _sources(src_ids, device)
    tokens, n = _inputs(hyp_ids, bos, device)
    memory = model.encode(src, src_mask)
    _, _, attention = model.decode_step(tokens, memory, None, need_attention=True)
    if attention is None:
        return None
    assert attention.dim() == 5 and attention.size(0) == 1, f"decode_step attention {tuple(attention.shape)}"
    weights = attention[0].float().cpu()  # (L, H, n + 1, S)
    return weights if eos else weights[:, :, :n]


@torch.no_grad()
def copy_attention(model, src_ids: Sequence[int], hyp_ids: Sequence[int], *, bos: int = BOS,
                   device: torch.device | str = "cpu") -> tuple[Tensor, Tensor] | None:
    """A pointer-generator's copy attention for one (source, hypothesis) pair, by forced decoding.

    Returns (T, S) weights and (T,) p_gen (the probability of generating rather than copying) on the
    CPU, one row per hypothesis token plus the step that chose EOS, or None when the model has no
    copy head (it offers no ``copy_attention`` method, or ``model.copy`` is off).
    """
    method = getattr(model, "copy_attention", None)
    if method is None or getattr(model, "copy", None) is None:
        return None
    src, src_mask = _sources(src_ids, device)
    tokens, _ = _inputs(hyp_ids, bos, device)
    weights, p_gen = method(src, src_mask, tokens)
    return weights[0].float().cpu(), p_gen[0].float().cpu()


@torch.no_grad()
def encoder_attention(model, src_ids: Sequence[int], *, device: torch.device | str = "cpu") -> Tensor | None:
    """(L, H, S, S) self-attention of the model's encoder over one source, or None if it has none.

    Uses ``model.encoder_attention(src, src_mask) -> (B, L, H, S, S)`` when the model
    offers it; otherwise an ``model.encoder`` whose call takes ``need_weights`` and
    returns ``(states, per-layer weights)`` (the Transformer's). An RNN encoder has
    no attention: None.
    """
    src, src_mask = _sources(src_ids, device)
    method = getattr(model, "encoder_attention", None)
    if callable(method):
        return method(src, src_mask)[0].float().cpu()
    encoder = getattr(model, "encoder", None)
    if encoder is None or "need_weights" not in inspect.signature(encoder.forward).parameters:
        return None
    _, weights = encoder(src, src_mask, need_weights=True)
    if not weights or any(w is None for w in weights):
        return None
    return torch.stack(weights, dim=1)[0].float().cpu()  # (L, H, S, S)


@torch.no_grad()
def decoder_self_attention(model, src_ids: Sequence[int] | None, hyp_ids: Sequence[int], *, bos: int = BOS,
                           device: torch.device | str = "cpu") -> Tensor:
    """(L, H, T, T) causal self-attention of the decoder over BOS + hypothesis (T = n + 1).

    A decoder-only model (``src_ids=None``) returns its self-attention from
    ``decode_step``. An encoder-decoder model offers
    ``model.decoder_self_attention(src, src_mask, tgt) -> (B, L, H, T, T)`` (the Transformer
    does); the protocol's ``decode_step`` returns cross-attention only, so a model without
    that method (the RNN encoder-decoder, whose decoder is recurrent) raises ``NoAttentionError``.
    """
    if src_ids is None:
        weights = forced_attention(model, None, hyp_ids, bos=bos, device=device)
        if weights is None:
            raise NoAttentionError("this decoder-only model returned no self-attention from decode_step")
        return weights
    method = getattr(model, "decoder_self_attention", None)
    if not callable(method):
        raise NoAttentionError(
            f"{type(model).__name__} has no decoder self-attention (its decoder is not a stack of "
            "self-attention layers); plot the cross-attention or the encoder self-attention instead")
    src, src_mask = _sources(src_ids, device)
    tokens, _ = _inputs(hyp_ids, bos, device)
    return method(src, src_mask, tokens)[0].float().cpu()


def align(weights: Tensor, layer: int = -1) -> list[int]:
    """For each output token, the source position it attends to most.

    Args:
        weights: (L, H, T, S) from ``forced_attention``, or (T, S) for one map.
        layer: which layer of an (L, H, T, S) input; its heads are averaged.

    Returns:
        T source positions (ties go to the earlier position).
    """
    weights = torch.as_tensor(weights)
    if weights.dim() == 4:
        n_layers = weights.size(0)
        if not -n_layers <= layer < n_layers:
            raise ValueError(f"layer {layer} is out of range for {n_layers} layers (use 0..{n_layers - 1} or -1)")
        weights = weights[layer].float().mean(dim=0)  # (T, S)
    elif weights.dim() != 2:
        raise ValueError(f"align needs weights of shape (L, H, T, S) or (T, S), got {tuple(weights.shape)}")
    if weights.size(1) == 0:
        raise ValueError("align needs at least one source position")
    return weights.argmax(dim=-1).tolist()


def alignment_lines(src_pieces: Sequence[str], tgt_pieces: Sequence[str], positions: Sequence[int]) -> list[str]:
    """One line per output token: ``target_piece -> source_piece (position)``."""
    if len(tgt_pieces) != len(positions):
        raise ValueError(f"{len(tgt_pieces)} target pieces but {len(positions)} positions; "
                         "pass the pieces of the rows that were aligned (add '</s>' for an EOS row)")
    lines = []
    for piece, j in zip(tgt_pieces, positions):
        if not 0 <= j < len(src_pieces):
            raise ValueError(f"source position {j} is outside the {len(src_pieces)} source pieces")
        lines.append(f"{piece} -> {src_pieces[j]} ({j})")
    return lines


def moses_pairs(positions: Sequence[int]) -> str:
    """Moses / fast_align style pairs ``j-i``: source position j aligned to output position i (0-based)."""
    return " ".join(f"{j}-{i}" for i, j in enumerate(positions))


class Alignment(NamedTuple):
    """The alignment of one translation (output tokens only, EOS left out).

    Attributes:
        positions: per output token, the source position it attends to most.
        lines: ``target -> source (position)`` per output token (``alignment_lines``).
        pairs: the Moses-style ``j-i`` string (``moses_pairs``).
    """

    positions: list[int]
    lines: list[str]
    pairs: str


def align_sentence(model, src_tok: Tokenizer, tgt_tok: Tokenizer, src_text: str, hyp_ids: Sequence[int], *,
                   layer: int = -1, device: torch.device | str = "cpu") -> Alignment | None:
    """Align a translation to its source (for ``seqmap translate --align``); None for a model without attention.

    Source pieces are the surface tokens of ``src_text`` (``Tokenizer.tokens``), output
    pieces the vocabulary pieces of ``hyp_ids``.
    """
    hyp = [int(i) for i in hyp_ids]
    if hyp and hyp[-1] == EOS:
        hyp = hyp[:-1]
    weights = forced_attention(model, src_tok.encode(src_text), hyp, eos=False, device=device)
    if weights is None:
        return None
    src_pieces = src_tok.tokens(src_text) or src_tok.pieces([EOS])  # an empty source reads one EOS
    positions = align(weights, layer) if hyp else []
    return Alignment(positions, alignment_lines(src_pieces, tgt_tok.pieces(hyp), positions), moses_pairs(positions))
