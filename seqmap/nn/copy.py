"""The copy mechanism of a pointer-generator (See et al. 2017), for an encoder-decoder.

At every target position t the decoder either generates from the vocabulary or copies a source token:

    a_t      = softmax(q(s_t) . k(h_i) / sqrt(D))                  copy attention over the source (B, t, S)
    c_t      = sum_i a_t,i h_i                                       its context vector (B, t, D)
    p_gen    = sigmoid(w_c . c_t + w_s . s_t + w_x . x_t + b)       (B, t, 1)
    P(w)     = p_gen * P_vocab(w) + (1 - p_gen) * sum_{i: src_i = w} a_t,i

s_t is the decoder's final state, x_t the embedding of its input token, h_i the encoder states. The
copy attention is one head of its own (the decoder's cross-attention heads stay free to do what they
learn); its weights are returned for plots.

Extended vocabulary: a source token the vocabulary does not hold is given an id V, V + 1, ... of its
own source (``seqmap.data.oov``); ``P`` then spans V + (number of such ids), the copy part puts mass
on them, and the vocabulary part gives them none. The model embeds ids >= V as UNK.

The result is returned as log-probabilities in the place of logits: every consumer (the loss's
``log_softmax``, greedy and beam search's ``log_softmax``) maps log P to itself, since P sums to 1.
``FLOOR`` keeps every log-probability finite (label smoothing scores every class): P is computed as
(P + FLOOR) / (1 + V_ext * FLOOR), which still sums to exactly 1.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from seqmap.nn.attention import masked_softmax

FLOOR = 1e-10  # added to every probability before the log (then renormalised): log P stays finite


def mix_copy(vocab_logits: Tensor, copy_weights: Tensor, src_ids: Tensor, p_gen: Tensor,
             extended_size: int | None = None) -> Tensor:
    """The pointer-generator's final distribution, as log-probabilities.

    Args:
        vocab_logits: (B, t, V) the decoder's logits over the vocabulary.
        copy_weights: (B, t, S) attention over the source (rows sum to 1; padding has weight 0).
        src_ids: (B, S) source token ids in the extended vocabulary (ids >= V are source OOVs).
        p_gen: (B, t, 1) probability of generating from the vocabulary.
        extended_size: V_ext >= V, the size of the result (default: V, or max(src_ids) + 1 if larger).

    Returns:
        (B, t, V_ext) log P(w), which sums to 1 over w (see ``FLOOR``).
    """
    b, t, v = vocab_logits.shape
    size = max(v, int(src_ids.max()) + 1) if extended_size is None else extended_size
    if size < v or int(src_ids.max()) >= size:
        raise ValueError(f"extended_size={size} must cover the vocabulary ({v}) and every source id "
                         f"(largest {int(src_ids.max())})")
    vocab = torch.softmax(vocab_logits.float(), dim=-1)
    p_gen = p_gen.float()
    mixed = vocab.new_zeros(b, t, size)
    mixed[..., :v] = p_gen * vocab
    index = src_ids[:, None, :].expand(b, t, src_ids.size(1))
    mixed = mixed.scatter_add(-1, index, (1.0 - p_gen) * copy_weights.float())
    return torch.log(mixed + FLOOR) - math.log1p(size * FLOOR)


class CopyHead(nn.Module):
    """Copy attention and the generation gate p_gen: ready parts for ``mix_copy``."""

    def __init__(self, d_model: int):
        super().__init__()
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.gate = nn.Linear(3 * d_model, 1)  # [context, decoder state, input embedding] -> p_gen logit

    def project_memory(self, states: Tensor) -> Tensor:
        """(B, S, D) encoder states -> (B, S, D) copy keys (once per source when decoding)."""
        return self.key(states)

    def forward(self, features: Tensor, inputs: Tensor, states: Tensor, keys: Tensor,
                src_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """features (B, t, D), input embeddings (B, t, D), encoder states and keys (B, S, D), mask (B, S)
        -> (copy weights (B, t, S), p_gen (B, t, 1))."""
        scores = torch.matmul(self.query(features), keys.transpose(1, 2)) / math.sqrt(keys.size(-1))  # (B, t, S)
        weights = masked_softmax(scores, None if src_mask is None else src_mask[:, None, :])
        context = torch.matmul(weights, states)  # (B, t, D)
        p_gen = torch.sigmoid(self.gate(torch.cat([context, features, inputs], dim=-1)))
        return weights, p_gen
