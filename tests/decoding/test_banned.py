"""PAD, BOS and UNK are never generated: greedy, beam and sampling mask them, and text-level decoding bans them."""

import pytest
import torch

from seqmap.config import DecodeConfig
from seqmap.data.tokenizers import BOS, EOS, NEVER_GENERATED, PAD, UNK, train_tokenizer
from seqmap.decoding.beam import beam_search
from seqmap.decoding.greedy import greedy
from seqmap.decoding.sampling import sample
from seqmap.decoding.steps import next_log_probs
from seqmap.decoding.text import translate_texts
from seqmap.models.protocol import Memory

V = 10


class FavoursSpecials:
    """Prefers UNK, then BOS, then PAD at every step, then token 5 and EOS (after three real tokens)."""

    def encode(self, src, src_mask):
        return Memory(states=None if src is None else src.float()[..., None], mask=src_mask)

    def decode_step(self, tokens, memory, state=None, *, need_attention=False):
        position = (0 if state is None else state) + tokens.size(1)
        logits = torch.full((tokens.size(0), tokens.size(1), V), -4.0)
        logits[..., UNK], logits[..., BOS], logits[..., PAD] = 6.0, 5.0, 4.0
        logits[..., 5] = 3.0
        logits[..., EOS] = 3.5 if position > 3 else -4.0
        return logits, position, None


class _State(int):
    def reorder(self, index, *, same_sources=False):
        return None


class FavoursSpecialsWithState(FavoursSpecials):
    def decode_step(self, tokens, memory, state=None, *, need_attention=False):
        logits, position, attn = super().decode_step(tokens, memory, state, need_attention=need_attention)
        return logits, _State(position), attn


def _src():
    return torch.full((2, 3), 4), torch.ones(2, 3, dtype=torch.bool)


def test_next_log_probs_gives_banned_ids_minus_inf_and_renormalizes():
    logits = torch.tensor([[[1.0, 2.0, 0.5, 3.0, 0.0]]])
    lp = next_log_probs(logits, (0, 3))
    assert torch.isinf(lp[0, 0]) and torch.isinf(lp[0, 3]) and lp[0, 0] < 0
    torch.testing.assert_close(lp[0].exp().sum(), torch.tensor(1.0))
    torch.testing.assert_close(lp[0, [1, 2, 4]], torch.log_softmax(torch.tensor([2.0, 0.5, 0.0]), 0))
    torch.testing.assert_close(next_log_probs(logits), torch.log_softmax(logits[:, -1], -1))


def test_greedy_emits_specials_unless_banned():
    model = FavoursSpecials()
    assert greedy(model, *_src(), bos=BOS, eos=EOS, max_len=4).tokens[0, 0].item() == UNK
    out = greedy(model, *_src(), bos=BOS, eos=EOS, max_len=8, banned=NEVER_GENERATED)
    assert out.tokens[0].tolist() == [5, 5, 5, EOS]


def test_beam_never_emits_banned_ids():
    model = FavoursSpecialsWithState()
    free = beam_search(model, *_src(), beam_size=3, bos=BOS, eos=EOS, max_len=6)
    assert any(set(h.tokens) & set(NEVER_GENERATED) for hyps in free.hypotheses for h in hyps)
    out = beam_search(model, *_src(), beam_size=3, bos=BOS, eos=EOS, max_len=6, n_best=3, banned=NEVER_GENERATED)
    for hyps in out.hypotheses:
        for h in hyps:
            assert not set(h.tokens) & set(NEVER_GENERATED), h.tokens


def test_sampling_never_draws_banned_ids_even_when_they_hold_most_mass():
    g = torch.Generator().manual_seed(0)
    model = FavoursSpecials()
    drawn = sample(model, *_src(), bos=BOS, eos=EOS, max_len=30, temperature=2.0, generator=g).tokens
    assert set(drawn.flatten().tolist()) & {UNK, BOS}  # unbanned, the specials are drawn
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        out = sample(model, *_src(), bos=BOS, eos=EOS, max_len=30, temperature=2.0, generator=g,
                     banned=NEVER_GENERATED)
        for row, length in zip(out.tokens.tolist(), out.lengths.tolist()):
            assert not set(row[:length]) & set(NEVER_GENERATED)


def test_text_decoding_never_writes_the_unk_surface():
    tok = train_tokenizer("char", ["abcdef"])  # 4 specials + 6 characters: the fake model's 10 ids
    assert tok.vocab_size == V
    for beam in (1, 3):
        outs = translate_texts(FavoursSpecialsWithState(), tok, tok, ["abc", "ca"], DecodeConfig(beam_size=beam))
        assert outs == [tok.decode([5, 5, 5])] * 2, outs
    sampled = translate_texts(FavoursSpecialsWithState(), tok, tok, ["abc"], DecodeConfig(temperature=3.0),
                              sample=True, seed=1)
    assert "\u2047" not in sampled[0]


def test_hf_ranking_masks_banned_ids_after_the_softmax_and_absent_ones_before():
    logits = torch.randn(2, 1, V)
    log_probs = next_log_probs(logits, NEVER_GENERATED, absent=[BOS])  # transformers' way (beam_ranking hf)
    assert torch.isinf(log_probs[:, list(NEVER_GENERATED)]).all()
    kept = torch.log_softmax(logits[:, -1].index_fill(-1, torch.tensor([BOS]), float("-inf")), -1)
    real = [i for i in range(V) if i not in NEVER_GENERATED]
    torch.testing.assert_close(log_probs[:, real], kept[:, real])  # PAD and UNK keep their mass: no renormalizing
    assert float(log_probs[:, real].exp().sum(-1).max()) < 1.0


def test_beam_with_hf_ranking_never_emits_banned_ids():
    result = beam_search(FavoursSpecialsWithState(), *_src(), beam_size=3, bos=BOS, eos=EOS, max_len=6,
                         banned=NEVER_GENERATED, ranking="hf", absent=[BOS], n_best=3)
    for nbest in result.hypotheses:
        assert nbest and all(not set(h.tokens) & set(NEVER_GENERATED) for h in nbest)


@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_banned_ids_outside_the_vocabulary_or_covering_it_are_refused(search):
    """A negative id used to ban V + id silently, one past V to fail deep in torch, and banning all V ids to
    emit PAD (greedy), no hypothesis at all (beam) or an index error (sampling)."""
    model = FavoursSpecialsWithState()
    run = {"greedy": lambda banned: greedy(model, *_src(), bos=BOS, eos=EOS, max_len=4, banned=banned),
           "beam": lambda banned: beam_search(model, *_src(), beam_size=2, bos=BOS, eos=EOS, max_len=4, banned=banned),
           "sample": lambda banned: sample(model, *_src(), bos=BOS, eos=EOS, max_len=4, banned=banned)}[search]
    for outside in ([-1], [V], [PAD, V + 5]):
        with pytest.raises(ValueError, match=rf"banned ids must be in \[0, {V}\)"):
            run(outside)
    with pytest.raises(ValueError, match=f"banned holds every id of the {V}-token vocabulary"):
        run(list(range(V)))
    assert run([i for i in range(V) if i != 5]) is not None  # one id left is enough
