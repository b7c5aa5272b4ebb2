"""``seqmap.hub.marian_names``: the one name map of the Marian import and export covers every layer weight of
both models, each name once, with the shapes the models have."""

from __future__ import annotations

import pytest

from seqmap.config import ModelConfig
from seqmap.hub.marian_names import all_layer_names, weight_shape
from seqmap.models.builder import build_model

D, FF, ENC, DEC = 16, 24, 2, 3  # FF differs from D, and the stacks in depth, so a swapped name shows


def _seqmap_model():
    return build_model(ModelConfig(family="transformer", src_vocab=20, tgt_vocab=20, d_model=D, n_heads=2, d_ff=FF,
                                   enc_layers=ENC, dec_layers=DEC, dropout=0.0, activation="silu",
                                   positional="sinusoidal", sinusoidal_layout="split", norm_position="post",
                                   share_vocab=True, output_bias=True))


def test_every_seqmap_layer_weight_is_named_once():
    names = all_layer_names(ENC, DEC)
    ours = [name for name, _ in names]
    assert len(ours) == len(set(ours))
    state = _seqmap_model().state_dict()
    assert set(ours) == {k for k in state if ".layers." in k}
    for name, theirs in names:  # the Marian weights it concatenates add up to it, row by row
        shapes = [weight_shape(n, D, FF) for n in theirs]
        assert sum(s[0] for s in shapes) == state[name].shape[0] and all(s[1:] == state[name].shape[1:]
                                                                         for s in shapes), name


def test_every_marian_layer_weight_is_named_once_with_its_shape():
    transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")
    config = transformers.MarianConfig(vocab_size=20, d_model=D, encoder_layers=ENC, decoder_layers=DEC,
                                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=FF,
                                       decoder_ffn_dim=FF, max_position_embeddings=32, pad_token_id=19)
    state = transformers.MarianMTModel(config).state_dict()
    theirs = [f"model.{n}" for _, names in all_layer_names(ENC, DEC) for n in names]
    assert len(theirs) == len(set(theirs))
    assert set(theirs) == {k for k in state if ".layers." in k}
    for name in theirs:
        assert tuple(state[name].shape) == weight_shape(name, D, FF), name
