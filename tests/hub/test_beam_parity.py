"""``decode.beam_ranking: hf`` reproduces ``transformers``' beam search (``generate(num_beams=5)``): the same
outputs for an imported Marian and an imported GPT-2, with each early_stopping rule and several length penalties.
``seqmap import hf`` sets the option and the model's generation defaults in the run's config."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")
pytest.importorskip("sentencepiece")
pytest.importorskip("tokenizers")

from seqmap.decoding.text import generate_nbest, lm_prompt, translate_ids  # noqa: E402
from seqmap.hub import HubError, import_hf  # noqa: E402
from seqmap.runs import load_run  # noqa: E402

from .test_gpt2 import tiny_gpt2  # noqa: E402
from .test_marian import tiny_marian  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
RULES = [(False, 1.0), (True, 1.0), ("never", 1.0), (False, 0.0), (False, 2.0), ("never", 0.6)]
SOURCES = ["the cat sat on the mat", "a dog met a cat", "where is the log", "the dog is on the mat",
           "where is the cat", "a cat sat on the log"]
PROMPTS = ["the cat", "a dog met", "on the mat. the", "the log", "a cat and"]


def _set_generation(directory, **values):
    path = directory / "generation_config.json"
    gen = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**gen, **values}))


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    root = tmp_path_factory.mktemp("marian_beam")
    hf, tok = tiny_marian(root, seed=7)
    _set_generation(root / "hf", num_beams=5, length_penalty=1.0, max_length=31, early_stopping=False)
    import_hf(root / "hf", root / "run")
    return hf, tok, load_run(root / "run")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt2_beam")
    hf, fast = tiny_gpt2(root / "hf", seed=7)
    _set_generation(root / "hf", num_beams=5, length_penalty=1.0, max_length=20, early_stopping="never")
    import_hf(root / "hf", root / "run")
    return hf, fast, load_run(root / "run")


def test_import_sets_the_generation_defaults(marian, gpt2):
    d = marian[2].cfg.decode
    assert (d.beam_ranking, d.beam_size, d.length_penalty, d.hf_early_stopping) == ("hf", 5, 1.0, False)
    assert (d.max_len_a, d.max_len_b, d.absent_ids) == (0.0, 30, [1])  # Marian has no BOS of its own
    d = gpt2[2].cfg.decode
    assert (d.beam_ranking, d.beam_size, d.hf_early_stopping, d.max_new_tokens) == ("hf", 5, "never", 20)
    assert d.absent_ids == [0, 1, 3]  # GPT-2 has only <|endoftext|>: seqmap's EOS


@pytest.mark.parametrize("early_stopping, alpha", RULES)
def test_marian_beam_5_is_the_same_as_transformers(marian, early_stopping, alpha):
    hf, tok, run = marian
    decode = dataclasses.replace(run.cfg.decode, hf_early_stopping=early_stopping, length_penalty=alpha)
    pad, unk = hf.config.pad_token_id, tok.convert_tokens_to_ids("<unk>")
    for text in SOURCES:
        with torch.no_grad():
            out = hf.generate(torch.tensor([tok(text)["input_ids"]]), num_beams=5, do_sample=False,
                              early_stopping=early_stopping, length_penalty=alpha, max_length=decode.max_len_b + 1,
                              bad_words_ids=[[pad], [unk]], forced_eos_token_id=None)[0, 1:].tolist()
        theirs = [t for t in out if t not in (pad, hf.config.eos_token_id)]
        ours = translate_ids(run.model, [run.src_tok.encode(text)], decode)[0]
        assert [run.tgt_tok.to_hf(i) for i in ours] == theirs, (text, early_stopping, alpha)


@pytest.mark.parametrize("early_stopping, alpha", RULES)
def test_gpt2_beam_5_is_the_same_as_transformers(gpt2, early_stopping, alpha):
    hf, fast, run = gpt2
    decode = dataclasses.replace(run.cfg.decode, hf_early_stopping=early_stopping, length_penalty=alpha,
                                 max_new_tokens=10)
    for prompt in PROMPTS:
        ids = fast(prompt)["input_ids"]
        with torch.no_grad():
            out = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                              num_beams=5, do_sample=False, early_stopping=early_stopping, length_penalty=alpha,
                              max_new_tokens=10, pad_token_id=fast.eos_token_id)[0, len(ids):].tolist()
        theirs = [t for t in out if t != fast.eos_token_id]
        ours = generate_nbest(run.model, [lm_prompt(run.tgt_tok, prompt)], decode)[0][0].output
        assert [run.tgt_tok.to_hf(i) for i in ours] == theirs, (prompt, early_stopping, alpha)


@pytest.mark.parametrize("beams", [1, 5])
def test_marian_no_repeat_ngram_is_the_same_as_transformers(marian, beams):
    """``decode.no_repeat_ngram`` is ``generate``'s no_repeat_ngram_size: the same outputs, greedy and beam."""
    hf, tok, run = marian
    decode = dataclasses.replace(run.cfg.decode, beam_size=beams, no_repeat_ngram=2)
    pad, unk = hf.config.pad_token_id, tok.convert_tokens_to_ids("<unk>")
    changed = 0
    for text in SOURCES:
        with torch.no_grad():
            out = hf.generate(torch.tensor([tok(text)["input_ids"]]), num_beams=beams, do_sample=False,
                              early_stopping=False, length_penalty=1.0, max_length=decode.max_len_b + 1,
                              no_repeat_ngram_size=2, bad_words_ids=[[pad], [unk]],
                              forced_eos_token_id=None)[0, 1:].tolist()
        theirs = [t for t in out if t not in (pad, hf.config.eos_token_id)]
        source = [run.src_tok.encode(text)]
        ours = translate_ids(run.model, source, decode)[0]
        assert [run.tgt_tok.to_hf(i) for i in ours] == theirs, (text, beams)
        changed += ours != translate_ids(run.model, source, decode, no_repeat_ngram=0)[0]
    assert changed  # the ban mattered on some sentence of this model


def test_import_and_export_carry_no_repeat_ngram(tmp_path):
    from seqmap.hub.export import _generation_config

    tiny_gpt2(tmp_path / "hf", seed=8)
    _set_generation(tmp_path / "hf", no_repeat_ngram_size=3)
    import_hf(tmp_path / "hf", tmp_path / "run")
    run = load_run(tmp_path / "run")
    assert run.cfg.decode.no_repeat_ngram == 3
    model = types.SimpleNamespace(generation_config=transformers.GenerationConfig())
    _generation_config(model, dataclasses.replace(run.cfg.decode, no_repeat_ngram=4), "lm")
    assert model.generation_config.no_repeat_ngram_size == 4


def test_the_ranking_option_matters_and_gnmt_stays_the_default(marian):
    from seqmap.config import DecodeConfig

    assert DecodeConfig().beam_ranking == "gnmt"
    _, _, run = marian
    sources = [run.src_tok.encode(t) for t in SOURCES]
    hf_rank = dataclasses.replace(run.cfg.decode, length_penalty=2.0)
    gnmt = dataclasses.replace(hf_rank, beam_ranking="gnmt")
    ours, theirs = translate_ids(run.model, sources, gnmt), translate_ids(run.model, sources, hf_rank)
    assert ours != theirs  # on this model GNMT's ranking picks other translations (the hf one: transformers')


def test_a_length_penalty_outside_seqmaps_range_is_one_line(tmp_path):
    tiny_gpt2(tmp_path / "hf", seed=8)
    _set_generation(tmp_path / "hf", num_beams=4, length_penalty=-1.0)
    with pytest.raises(HubError, match="generation_config.json: length_penalty -1.0 is outside"):
        import_hf(tmp_path / "hf", tmp_path / "run")
    _set_generation(tmp_path / "hf", length_penalty=1.0, early_stopping="sometimes")
    with pytest.raises(HubError, match="generation_config.json: decode.hf_early_stopping must be"):
        import_hf(tmp_path / "hf", tmp_path / "run")
