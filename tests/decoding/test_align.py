"""Attention by forced decoding, and alignments read from it.

Forced decoding (BOS + hypothesis in one ``decode_step`` call) must give the
attention the search saw step by step; ``align`` is the argmax of the head mean.
"""

import pytest
import torch

from seqmap.config import ModelConfig
from seqmap.data.tokenizers import BOS, EOS, train_tokenizer
from seqmap.decoding.align import (
    Alignment,
    NoAttentionError,
    align,
    align_sentence,
    alignment_lines,
    decoder_self_attention,
    encoder_attention,
    forced_attention,
    moses_pairs,
)
from seqmap.models.builder import build_model

SRC_V, TGT_V = 13, 11
SRC = [5, 6, 7, 8, 9]
HYP = [4, 10, 6, 7]


def tiny(family="transformer", **overrides):
    cfg = dict(family=family, src_vocab=SRC_V, tgt_vocab=TGT_V, d_model=16, n_heads=2, d_ff=32, enc_layers=1,
               dec_layers=2, dropout=0.0)
    if family == "rnn":
        cfg.update(emb_size=8, hidden_size=8, enc_layers=1, dec_layers=1)
    cfg.update(overrides)
    return build_model(ModelConfig(**cfg)).eval()


@torch.no_grad()
def stepwise_attention(model, src_ids, hyp_ids):
    """(L, H, T, S) collected one decode_step at a time, as greedy and beam search run."""
    src = None if src_ids is None else torch.tensor([src_ids])
    memory = model.encode(src, None if src is None else torch.ones_like(src, dtype=torch.bool))
    state, rows = None, []
    for token in [BOS, *hyp_ids]:
        _, state, attention = model.decode_step(torch.tensor([[token]]), memory, state, need_attention=True)
        rows.append(attention[0])  # (L, H, 1, S) over the keys seen so far
    width = rows[-1].size(-1)
    return torch.cat([torch.nn.functional.pad(r, (0, width - r.size(-1))) for r in rows], dim=2)


# -- align, lines, pairs on constructed weights ------------------------------------------------------------------

def test_align_returns_the_argmax_source_position_of_each_row():
    weights = torch.tensor([[0.1, 0.7, 0.2],
                            [0.6, 0.3, 0.1],
                            [0.2, 0.2, 0.6],
                            [0.1, 0.8, 0.1]])
    assert align(weights) == [1, 0, 2, 1]


def test_align_averages_the_heads_of_the_chosen_layer():
    # layer 0: head 0 says position 0 (0.55), head 1 says 2 (0.9): the mean picks 2 (0.45 + ...), not head 0's argmax
    layer0 = torch.tensor([[[0.55, 0.0, 0.45]], [[0.1, 0.0, 0.9]]])  # (H=2, T=1, S=3)
    layer1 = torch.tensor([[[0.0, 1.0, 0.0]], [[0.0, 1.0, 0.0]]])
    weights = torch.stack([layer0, layer1])  # (L=2, H=2, T=1, S=3)
    assert align(weights, layer=0) == [2]
    assert align(weights, layer=1) == align(weights) == [1]  # default: the last layer
    with pytest.raises(ValueError, match="layer 2 is out of range"):
        align(weights, layer=2)
    with pytest.raises(ValueError, match=r"\(L, H, T, S\) or \(T, S\)"):
        align(weights[0])


def test_alignment_lines_and_moses_pairs():
    src, tgt = ["ein", "Haus", "."], ["a", "house", "."]
    assert alignment_lines(src, tgt, [0, 1, 2]) == ["a -> ein (0)", "house -> Haus (1)", ". -> . (2)"]
    assert moses_pairs([0, 1, 1, 2]) == "0-0 1-1 1-2 2-3"  # source-target, 0-based
    assert moses_pairs([]) == ""
    with pytest.raises(ValueError, match="3 target pieces but 2 positions"):
        alignment_lines(src, tgt, [0, 1])
    with pytest.raises(ValueError, match="source position 3 is outside the 3 source pieces"):
        alignment_lines(src, tgt, [0, 1, 3])


# -- forced decoding ---------------------------------------------------------------------------------------------

def test_transformer_forced_attention_equals_step_by_step_decoding():
    model = tiny()
    weights = forced_attention(model, SRC, HYP)
    assert weights.shape == (2, 2, len(HYP) + 1, len(SRC))  # (L, H, T, S): T = hypothesis + the EOS step
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, len(HYP) + 1))
    torch.testing.assert_close(weights, stepwise_attention(model, SRC, HYP), atol=1e-6, rtol=1e-5)


def test_forced_attention_without_the_eos_row_and_with_a_trailing_eos():
    model = tiny()
    full = forced_attention(model, SRC, HYP)
    torch.testing.assert_close(forced_attention(model, SRC, HYP, eos=False), full[:, :, : len(HYP)])
    torch.testing.assert_close(forced_attention(model, SRC, [*HYP, EOS]), full)  # EOS is never an input


@pytest.mark.parametrize("attention", ["bahdanau", "general"])
def test_rnn_forced_attention_equals_step_by_step_decoding(attention):
    model = tiny("rnn", rnn_attention=attention)
    weights = forced_attention(model, SRC, HYP)
    assert weights.shape == (1, 1, len(HYP) + 1, len(SRC))  # RNN: L = H = 1
    torch.testing.assert_close(weights, stepwise_attention(model, SRC, HYP), atol=1e-6, rtol=1e-5)


def test_convs2s_forced_attention_equals_step_by_step_decoding_with_a_map_per_decoder_layer():
    model = tiny("convs2s", emb_size=8, hidden_size=8, dec_layers=3)
    weights = forced_attention(model, SRC, HYP)
    assert weights.shape == (3, 1, len(HYP) + 1, len(SRC))  # (L_dec, H = 1, T, S): every layer attends
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 1, len(HYP) + 1))
    torch.testing.assert_close(weights, stepwise_attention(model, SRC, HYP), atol=1e-6, rtol=1e-5)
    assert encoder_attention(model, SRC) is None  # a convolutional encoder has no self-attention


def test_rnn_without_attention_gives_none():
    model = tiny("rnn", rnn_attention="none")
    assert forced_attention(model, SRC, HYP) is None
    assert encoder_attention(model, SRC) is None
    src_tok = tgt_tok = train_tokenizer("word", ["a b c d e f g h i"])
    assert align_sentence(model, src_tok, tgt_tok, "a b c", [4, 5]) is None


def test_language_model_forced_attention_is_causal_self_attention():
    model = tiny("lm", src_vocab=0)
    weights = forced_attention(model, None, HYP)
    n = len(HYP) + 1
    assert weights.shape == (2, 2, n, n)
    assert torch.all(weights.triu(diagonal=1) == 0)  # no query looks at a later token
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, n))
    torch.testing.assert_close(weights, stepwise_attention(model, None, HYP), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(decoder_self_attention(model, None, HYP), weights)


# -- self-attention ----------------------------------------------------------------------------------------------

def test_transformer_encoder_self_attention():
    model = tiny(enc_layers=2)
    weights = encoder_attention(model, SRC)
    assert weights.shape == (2, 2, len(SRC), len(SRC))  # (L_enc, H, S, S)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, len(SRC)))
    # the weights of the encoder that encode() runs, layer by layer
    _, per_layer = model.encoder(torch.tensor([SRC]), None, need_weights=True)
    torch.testing.assert_close(weights, torch.stack(per_layer, 1)[0])


def test_transformer_decoder_self_attention_is_causal_and_equals_incremental_decoding():
    model = tiny(dec_layers=2)
    weights = decoder_self_attention(model, SRC, HYP)
    n = len(HYP) + 1  # BOS + hypothesis
    assert weights.shape == (2, 2, n, n)  # (L_dec, H, T, T)
    assert torch.all(weights.triu(diagonal=1) == 0)  # no query looks at a later token
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, n))
    # the same rows, one cached decoder step at a time, as greedy and beam search run it
    src = torch.tensor([SRC])
    memory = model.encode(src, torch.ones_like(src, dtype=torch.bool))
    state, rows = model.decoder.init_state(memory), []
    for token in [BOS, *HYP]:
        _, w = model.decoder(torch.tensor([[token]]), memory, state, need_attention=True, which="self")
        rows.append(torch.nn.functional.pad(w[0], (0, n - w.size(-1))))  # (L, H, 1, keys so far)
    torch.testing.assert_close(weights, torch.cat(rows, dim=2), atol=1e-6, rtol=1e-5)
    # and the cross-attention of the same pass is unchanged by asking for it
    torch.testing.assert_close(forced_attention(model, SRC, HYP), stepwise_attention(model, SRC, HYP),
                               atol=1e-6, rtol=1e-5)


def test_decoder_self_attention_needs_a_model_method():
    model = tiny("rnn", rnn_attention="bahdanau")  # a recurrent decoder has no self-attention
    with pytest.raises(NoAttentionError, match="RNNSeq2Seq has no decoder self-attention"):
        decoder_self_attention(model, SRC, HYP)

    class Exposing:  # a model offering the proposed method: it is called with BOS + hypothesis
        def decoder_self_attention(self, src, src_mask, tgt):
            assert tgt.tolist() == [[BOS, *HYP]] and src.tolist() == [SRC] and bool(src_mask.all())
            t = tgt.size(1)
            return torch.full((1, 3, 2, t, t), 1.0 / t)

    assert decoder_self_attention(Exposing(), SRC, HYP).shape == (3, 2, len(HYP) + 1, len(HYP) + 1)


# -- text level --------------------------------------------------------------------------------------------------

def test_align_sentence_lines_and_pairs_match_the_forced_attention():
    tok = train_tokenizer("word", ["ein Haus ist gross", "a house is big"])
    model = tiny(src_vocab=tok.vocab_size, tgt_vocab=tok.vocab_size)
    text, hyp = "ein Haus ist", tok.encode("a house is big")
    result = align_sentence(model, tok, tok, text, [*hyp, EOS])
    assert isinstance(result, Alignment)
    expected = align(forced_attention(model, tok.encode(text), hyp, eos=False))
    assert result.positions == expected and len(expected) == len(hyp)
    assert result.lines == [f"{t} -> {text.split()[j]} ({j})" for t, j in zip("a house is big".split(), expected)]
    assert result.pairs == " ".join(f"{j}-{i}" for i, j in enumerate(expected))


@torch.no_grad()
def test_copy_attention_by_forced_decoding_is_the_copy_the_search_saw_step_by_step():
    """``seqmap plot attention --copy`` forces the hypothesis in one call; its copy weights must be those that
    ``decode_step`` mixed in at each step. With the gate closed (p_gen ~ 0) a source word's probability at a step
    is its copy weight, so the two can be compared exactly."""
    from seqmap.decoding.align import copy_attention

    torch.manual_seed(0)
    model = tiny(src_vocab=SRC_V, tgt_vocab=SRC_V, copy=True, share_vocab=True)
    assert copy_attention(tiny(), SRC, HYP) is None  # no copy head
    weights, p_gen = copy_attention(model, SRC, [*HYP, EOS])  # a final EOS is no input: T = len(HYP) + 1
    assert weights.shape == (len(HYP) + 1, len(SRC)) and p_gen.shape == (len(HYP) + 1,)
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(HYP) + 1))
    assert bool(((p_gen > 0) & (p_gen < 1)).all())
    model.copy.gate.bias.fill_(-30.0)  # copy only
    weights, p_gen = copy_attention(model, SRC, HYP)
    assert float(p_gen.max()) < 1e-9
    memory, state = model.encode(torch.tensor([SRC]), torch.ones(1, len(SRC), dtype=torch.bool)), None
    for t, token in enumerate([BOS, *HYP]):
        log_p, state, _ = model.decode_step(torch.tensor([[token]]), memory, state)
        torch.testing.assert_close(log_p[0, -1, SRC].exp(), weights[t], atol=1e-6, rtol=1e-5)
