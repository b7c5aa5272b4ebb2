"""``decode_loop`` with prompts of unequal length (a list): each is read alone, the states are stacked,
and every row decodes as it does alone, for both language-model families."""

import pytest
import torch

from seqmap.config import ModelConfig
from seqmap.decoding.greedy import decode_loop, greedy, prefill_each
from seqmap.models.builder import build_model
from seqmap.models.protocol import Memory

V, BOS, EOS, PAD = 13, 1, 2, 0
PROMPTS = [[5, 6, 7], [8], [9, 10, 11, 12, 5, 6], [7, 7]]


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster


def make(**overrides) -> torch.nn.Module:
    cfg = dict(family="lm", tgt_vocab=V, src_vocab=V, d_model=32, n_heads=4, d_ff=64, enc_layers=1, dec_layers=2,
               dropout=0.0, max_len=8, emb_size=6, hidden_size=8)
    cfg.update(overrides)
    torch.manual_seed(0)
    return build_model(ModelConfig(**cfg)).eval()


def decode(model, prompt, **kwargs):
    return decode_loop(model, None, None, bos=BOS, eos=EOS, max_len=10, pad=PAD, prompt=prompt, **kwargs)


@pytest.mark.parametrize("model_cfg", [dict(positional="learned"), dict(positional="alibi"),
                                       dict(positional="sinusoidal"), dict(positional="relative_cp"),
                                       dict(family="rnn_lm")])
def test_prompts_of_unequal_length_decode_together_as_each_alone(model_cfg):
    model = make(**model_cfg)
    need_attention = model_cfg.get("family") != "rnn_lm"
    together = decode(model, [torch.tensor(p) for p in PROMPTS], need_attention=need_attention)
    for b, p in enumerate(PROMPTS):
        own = decode(model, torch.tensor([p]), need_attention=need_attention)  # the (1, P) tensor path
        n = int(own.lengths[0])
        assert int(together.lengths[b]) == n
        assert together.tokens[b, :n].tolist() == own.tokens[0, :n].tolist()
        assert torch.all(together.tokens[b, n:] == PAD)
        torch.testing.assert_close(together.scores[b], own.scores[0], atol=1e-5, rtol=1e-5)
        if need_attention:
            keys = own.attention.size(-1)
            torch.testing.assert_close(together.attention[b, :, :, :n, :keys], own.attention[0], atol=1e-5,
                                       rtol=1e-5)
            assert torch.all(together.attention[b, :, :, :, keys:] == 0)


def test_sampling_draws_each_row_from_its_own_generator():
    model = make(positional="rope")
    generators = [torch.Generator().manual_seed(b) for b in range(len(PROMPTS))]

    def per_row(log_probs):  # row b draws with generators[b]
        tokens = torch.cat([torch.multinomial(log_probs[b:b + 1].exp(), 1, generator=g)
                            for b, g in enumerate(generators)]).squeeze(-1)
        return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)

    together = decode(model, [torch.tensor(p) for p in PROMPTS], choose=per_row)
    for b, p in enumerate(PROMPTS):
        g = torch.Generator().manual_seed(b)

        def own_row(log_probs, g=g):
            tokens = torch.multinomial(log_probs.exp(), 1, generator=g).squeeze(-1)
            return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)

        own = decode(model, torch.tensor([p]), choose=own_row)
        n = int(own.lengths[0])
        assert together.tokens[b, :n].tolist() == own.tokens[0, :n].tolist()


def test_a_model_whose_state_cannot_stack_asks_for_prompts_of_one_length():
    model = make(family="transformer")
    memory = model.encode(torch.tensor([[5, 6], [7, 8]]), None)
    with pytest.raises(ValueError, match="group them by length"):
        prefill_each(model, memory, [torch.tensor([BOS]), torch.tensor([BOS, 5])])


def test_bad_prompt_lists_are_refused():
    model = make()
    with pytest.raises(ValueError, match="empty list"):
        greedy(model, None, None, bos=BOS, eos=EOS, max_len=3, prompt=[])
    with pytest.raises(ValueError, match="non-empty"):
        prefill_each(model, Memory(), [torch.tensor([5]), torch.tensor([], dtype=torch.long)])
