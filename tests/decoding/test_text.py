"""Text in, text out: the same outputs as the decoding functions, under any token budget, in input order."""

import pytest
import torch

from seqmap.config import ConfigError, DecodeConfig, ModelConfig
from seqmap.data.tokenizers import BOS, EOS, NEVER_GENERATED, PAD, train_tokenizer
from seqmap.decoding.beam import beam_search
from seqmap.decoding.greedy import greedy
from seqmap.decoding.text import (
    Scored,
    batch_budget,
    budget_batches,
    generate_texts,
    strip_output,
    translate_ids,
    translate_texts,
)
from seqmap.models.builder import build_model

WORDS = "a b c d e f g"
TOK = train_tokenizer("word", [WORDS])
SOURCES = ["a b c", "d", "e f g a b c d", "b b", "", "g f e d c b"]


def make(family="transformer"):
    torch.manual_seed(0)
    cfg = ModelConfig(family=family, src_vocab=TOK.vocab_size, tgt_vocab=TOK.vocab_size, d_model=16, n_heads=2,
                      d_ff=32, enc_layers=1, dec_layers=1, dropout=0.0, emb_size=8, hidden_size=16)
    return build_model(cfg).eval()


def ids(texts):
    return [TOK.encode(t) for t in texts]


def alone(i, source):
    """Sentence ``source`` as a batch of one, with the per-sentence maximum length of the default config."""
    src = torch.tensor([source or [EOS]])
    d = DecodeConfig()
    return src, torch.ones_like(src, dtype=torch.bool), int(d.max_len_a * src.size(1) + d.max_len_b)


def test_greedy_by_default_equals_greedy_on_each_sentence():
    model = make()
    out = translate_ids(model, ids(SOURCES))
    for i, source in enumerate(ids(SOURCES)):
        src, mask, max_len = alone(i, source)
        expected = greedy(model, src, mask, bos=BOS, eos=EOS, max_len=max_len, banned=NEVER_GENERATED)
        assert out[i] == (strip_output(expected.tokens[0].tolist()) if source else [])  # empty: not decoded


class Spy:
    """Passes the protocol through and records the shape of every encoded batch."""

    def __init__(self, model):
        self.model, self.batches = model, []

    def encode(self, src, src_mask):
        self.batches.append(tuple(src.shape))
        return self.model.encode(src, src_mask)

    def decode_step(self, *args, **kw):
        return self.model.decode_step(*args, **kw)


@pytest.mark.parametrize("family", ["transformer", "rnn", "convs2s"])
def test_beam_equals_beam_search_per_sentence_under_any_token_budget(family):
    model = make(family)
    sources = ids(SOURCES * 3)
    big = translate_ids(model, sources, beam_size=3, length_penalty=1.0, max_tokens=100_000)
    spy = Spy(model)
    small = translate_ids(spy, sources, beam_size=3, length_penalty=1.0, max_tokens=30)
    assert small == big
    assert len(spy.batches) > 3
    for rows, width in spy.batches:  # beam-expanded tokens within the budget (a lone long row may exceed it)
        assert rows * 3 * (width + 1) <= 30 or rows == 1
    for i, source in enumerate(sources[:len(SOURCES)]):
        src, mask, max_len = alone(i, source)
        expected = beam_search(model, src, mask, beam_size=3, bos=BOS, eos=EOS, max_len=max_len,
                               length_penalty=1.0, banned=NEVER_GENERATED).hypotheses[0][0]
        assert big[i] == (strip_output(expected.tokens) if source else [])


def test_n_best_gives_scored_lists_best_first():
    model = make()
    out = translate_texts(model, TOK, TOK, SOURCES, beam_size=4, n_best=3)
    assert len(out) == len(SOURCES)
    for entries, source in zip(out, SOURCES):  # an empty source: one empty entry
        assert len(entries) == (3 if source else 1)
        assert all(isinstance(e, Scored) and isinstance(e.output, str) for e in entries)
        assert [e.normalized for e in entries] == sorted((e.normalized for e in entries), reverse=True)
    one = translate_texts(model, TOK, TOK, SOURCES, beam_size=4)
    assert one == [entries[0].output for entries in out]
    with pytest.raises(ValueError, match="beam_size"):
        translate_texts(model, TOK, TOK, SOURCES, beam_size=2, n_best=3)
    with pytest.raises(ValueError, match="n_best"):
        translate_texts(model, TOK, TOK, SOURCES, sample=True, n_best=2)


@pytest.mark.parametrize("family", ["transformer", "convs2s"])
def test_sampling_top_k_one_is_greedy_and_a_seed_reproduces(family):
    model = make(family)
    greedy_texts = translate_texts(model, TOK, TOK, SOURCES)
    assert translate_texts(model, TOK, TOK, SOURCES, sample=True, top_k=1, seed=3) == greedy_texts
    hot = dict(sample=True, temperature=3.0, max_tokens=20)
    first = translate_texts(model, TOK, TOK, SOURCES, seed=7, **hot)
    assert translate_texts(model, TOK, TOK, SOURCES, seed=7, **hot) == first
    assert translate_texts(model, TOK, TOK, SOURCES, seed=8, **hot) != first


@pytest.mark.parametrize("family", ["transformer", "lm"])
def test_each_sample_depends_on_its_input_and_seed_only(family):
    """Input i draws from a generator seeded with seed + i: the same text alone with that seed, under any
    token budget (other batches) and beside any other inputs."""
    model = make(family)
    hot = dict(sample=True, temperature=3.0)
    if family == "lm":
        texts = ["a b", "c", "", "d e f g", "a b"]
        drawn = generate_texts(model, TOK, texts, seed=5, max_new_tokens=8, **hot)
        assert drawn == generate_texts(model, TOK, texts, seed=5, max_new_tokens=8, max_tokens=10, **hot)
        for i, text in enumerate(texts):
            assert generate_texts(model, TOK, [text], seed=5 + i, max_new_tokens=8, **hot) == [drawn[i]]
        assert drawn[0] != drawn[4]  # the same prompt, another seed
        return
    drawn = translate_texts(model, TOK, TOK, SOURCES, seed=5, **hot)
    assert drawn == translate_texts(model, TOK, TOK, SOURCES, seed=5, max_tokens=7, **hot)  # other batches
    assert translate_texts(model, TOK, TOK, SOURCES[::-1], seed=5, **hot) != drawn[::-1]  # seeds follow positions
    for i, source in enumerate(SOURCES):
        assert translate_texts(model, TOK, TOK, [source], seed=5 + i, **hot) == [drawn[i]]


def test_prefix_forces_the_start_of_every_translation():
    model = make()
    out = translate_texts(model, TOK, TOK, SOURCES, beam_size=2, prefix="c d")
    assert all(t.split()[:2] == ["c", "d"] if s else t == "" for t, s in zip(out, SOURCES))  # empty: not translated
    prefixes = ["a", "", "b c d", "a", "g g", ""]  # different lengths decode in different batches
    out = translate_texts(model, TOK, TOK, SOURCES, beam_size=2, prefix=prefixes)
    for text, prefix, source in zip(out, prefixes, ids(SOURCES)):
        if not source:
            assert text == ""
            continue
        assert text.split()[: len(prefix.split())] == prefix.split()
        src, mask, max_len = alone(0, source)
        prompt = torch.tensor([[BOS, *TOK.encode(prefix)]])
        best = beam_search(model, src, mask, beam_size=2, bos=BOS, eos=EOS, max_len=max_len, prompt=prompt,
                           length_penalty=DecodeConfig().length_penalty, banned=NEVER_GENERATED).hypotheses[0][0]
        assert text == TOK.decode(TOK.encode(prefix) + strip_output(best.tokens))


def test_generate_continues_prompts_after_an_eos():
    model = make("lm")
    prompts = ["a b", "", "c d e f"]
    out = generate_texts(model, TOK, prompts, max_new_tokens=6)
    for text, prompt in zip(out, prompts):
        ids_ = torch.tensor([[EOS, *TOK.encode(prompt)]])
        expected = strip_output(greedy(model, None, None, bos=BOS, eos=EOS, max_len=6, prompt=ids_).tokens[0].tolist())
        assert text.strip() == TOK.decode(expected)
        assert prompt + text == TOK.decode(TOK.encode(prompt) + expected)  # "a b" + " c d", not "a bc d"
    assert generate_texts(model, TOK, prompts, max_new_tokens=6, sample=True, top_k=1) == out
    nbest = generate_texts(model, TOK, prompts, max_new_tokens=6, beam_size=3, n_best=2)
    assert all(len(entries) == 2 for entries in nbest)


def test_a_continuation_reads_after_its_prompt_with_every_tokenizer():
    from seqmap.decoding.text import continuation

    word, char = TOK, train_tokenizer("char", ["ab c"])
    assert continuation(word, [EOS, *word.encode("a b")], word.encode("c d")) == " c d"
    assert continuation(word, [EOS], word.encode("c d")) == "c d"  # an empty prompt: nothing to follow
    assert continuation(char, char.encode("ab"), char.encode(" c")) == " c"  # characters carry their own spaces
    assert continuation(char, char.encode("a"), char.encode("bc")) == "bc"


def test_an_unknown_option_names_the_nearest():
    with pytest.raises(ConfigError, match="did you mean decode.beam_size"):
        translate_ids(make(), ids(SOURCES), beam_sise=3)


def test_budget_batches_cover_every_row_once_and_keep_long_rows_alone():
    lengths = [3, 50, 1, 4, 4, 2]
    batches = budget_batches(lengths, range(6), 12)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert [1] in batches
    for b in batches:
        assert len(b) * (max(lengths[i] for i in b) + 1) <= 12 or len(b) == 1


def test_the_token_budget_counts_beams_and_sampling_reads_one_row_per_input():
    assert batch_budget(DecodeConfig(max_tokens=100, beam_size=3)) == 33
    assert batch_budget(DecodeConfig(max_tokens=100, beam_size=3), sample=True) == 100
    assert batch_budget(DecodeConfig(max_tokens=4, beam_size=8)) == 1  # never an empty batch


def test_a_long_source_is_read_up_to_max_src_len():
    model = make()
    whole, first_two = (translate_texts(model, TOK, TOK, [text]) for text in ("a b c d e f g", "a b"))
    assert whole != first_two  # so that reading the whole source would show
    assert translate_texts(model, TOK, TOK, ["a b c d e f g"], max_src_len=2) == first_two
    assert translate_texts(model, TOK, TOK, ["a b c d e f g"], max_src_len=0) == whole


def test_pad_and_strip():
    from seqmap.decoding.text import pad_sources

    src, mask = pad_sources([[5, 6], [], [7]])
    assert src.tolist() == [[5, 6], [EOS, PAD], [7, PAD]] and mask.sum(1).tolist() == [2, 1, 1]
    assert strip_output([4, 5, EOS, 6]) == [4, 5]


def test_greedy_without_scores_gives_the_same_outputs_and_no_scores():
    from seqmap.decoding.text import translate_nbest

    model, sources = make(), ids(SOURCES)
    scored = translate_nbest(model, sources, DecodeConfig())
    unscored = translate_nbest(model, sources, DecodeConfig(), scores=False)
    assert [e[0].output for e in unscored] == [e[0].output for e in scored]
    assert all(e[0].score is None and e[0].normalized is None for e in unscored)
    assert all(isinstance(e[0].score, float) and (e[0].score < 0 if s else e[0].score == 0)
               for e, s in zip(scored, sources))
    # beam search and sampling score all the same (they choose by the scores)
    beams = translate_nbest(model, sources, DecodeConfig(beam_size=2), scores=False)
    assert all(isinstance(e[0].score, float) for e in beams)
    drawn = translate_nbest(model, sources, DecodeConfig(), sample=True, scores=False)
    assert all(isinstance(e[0].score, float) for e in drawn)
