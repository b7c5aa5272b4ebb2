"""``seqmap export hf`` of an encoder-decoder run: a MarianMTModel directory that ``transformers`` loads with the
same logits and the same greedy translations; an import -> export round trip gives the model back."""

from __future__ import annotations

import dataclasses
import io

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")
pytest.importorskip("sentencepiece")

from seqmap.config import DecodeConfig  # noqa: E402
from seqmap.decoding.text import translate_ids  # noqa: E402
from seqmap.hub import HubError, export_hf  # noqa: E402
from seqmap.runs import load_run  # noqa: E402

from .test_marian import tiny_marian  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = ["the cat sat on the mat", "a dog met a cat", "where is the log"]


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def round_trip(tmp_path_factory, request):
    """A MarianMT imported and exported again; untied: an output layer ``lm_head`` of its own (once refused)."""
    from seqmap.cli import main

    root = tmp_path_factory.mktemp("marian_export")
    hf, tok = tiny_marian(root, seed=5, tied=request.param)
    assert main(["import", "hf", str(root / "hf"), "--out", str(root / "run")]) == 0
    assert main(["export", "hf", str(root / "run"), "--out", str(root / "back")]) == 0
    back = transformers.MarianMTModel.from_pretrained(root / "back").eval()
    assert back.config.tie_word_embeddings is request.param
    back_tok = transformers.MarianTokenizer.from_pretrained(root / "back")
    return hf, tok, back, back_tok, load_run(root / "run")


def test_round_trip_gives_back_the_same_weights(round_trip):
    hf, _, back, _, _ = round_trip
    theirs, ours = hf.state_dict(), back.state_dict()
    assert set(theirs) == set(ours)
    for name, tensor in theirs.items():
        torch.testing.assert_close(ours[name], tensor, rtol=0, atol=1e-6, msg=name)


def test_round_trip_gives_back_the_tokenizer(round_trip):
    _, tok, _, back_tok, _ = round_trip
    for text in TEXTS:
        assert back_tok(text)["input_ids"] == tok(text)["input_ids"]
        assert back_tok(text_target=text)["input_ids"] == tok(text_target=text)["input_ids"]


def test_round_trip_translates_as_the_original(round_trip):
    hf, tok, back, _, run = round_trip
    kw = dict(do_sample=False, max_new_tokens=12, forced_eos_token_id=None,
              bad_words_ids=[[hf.config.pad_token_id], [tok.convert_tokens_to_ids("<unk>")]])
    for text in TEXTS:
        src = torch.tensor([tok(text)["input_ids"]])
        with torch.no_grad():
            for beam in (1, 5):
                assert back.generate(src, num_beams=beam, **kw).tolist() == hf.generate(src, num_beams=beam,
                                                                                         **kw).tolist()
            out = back.generate(src)[0, 1:].tolist()  # the exported generation config: greedy, seqmap's bans
        ours = translate_ids(run.model, [run.src_tok.encode(text)],
                             DecodeConfig(max_len_a=0.0, max_len_b=len(out)))[0]
        assert [run.tgt_tok.to_hf(i) for i in ours] == [t for t in out if t != hf.config.eos_token_id]


def _trained(tmp_path, **model):
    from seqmap.config import RunConfig, from_dict
    from seqmap.training.run_trainer import train

    pairs = "\n".join(f"{s}\t{t}" for s, t in [("a b c", "c b a"), ("b c d", "d c b"), ("c a b", "b a c")] * 20)
    (tmp_path / "train.tsv").write_text(pairs + "\n")
    (tmp_path / "valid.tsv").write_text("a b c\tc b a\n")
    cfg = from_dict(RunConfig, {
        "model": {"family": "transformer", "d_model": 16, "n_heads": 2, "d_ff": 32, "enc_layers": 2,
                  "dec_layers": 2, "dropout": 0.0, "norm_position": "post", "sinusoidal_layout": "split",
                  "activation": "silu", "share_vocab": True, "output_bias": True, **model},
        "data": {"tokenizer": "word", "train": str(tmp_path / "train.tsv"), "valid": str(tmp_path / "valid.tsv")},
        "train": {"max_steps": 30, "max_tokens": 200, "lr": 3e-3, "warmup": 0, "schedule": "constant",
                  "valid_every": 30}})
    train(cfg, tmp_path / "run", stream=io.StringIO())
    return load_run(tmp_path / "run")


@pytest.mark.parametrize("shared", [True, False], ids=["one vocabulary", "separate vocabularies"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_a_seqmap_trained_transformer_exports_to_marian(tmp_path, shared, tied):
    """Untied (``tie_word_embeddings: false``) and separate source and target tables
    (``share_encoder_decoder_embeddings: false``) too, each once refused."""
    run = _trained(tmp_path, tie_embeddings=tied, share_vocab=shared)
    export_hf(run, tmp_path / "marian")
    hf = transformers.MarianMTModel.from_pretrained(tmp_path / "marian").eval()
    assert (hf.config.tie_word_embeddings, hf.config.share_encoder_decoder_embeddings) == (tied, shared)
    torch.testing.assert_close(hf.lm_head.weight, run.model.decoder.output.weight, rtol=0, atol=0)
    torch.testing.assert_close(hf.model.encoder.embed_tokens.weight, run.model.encoder.embedding.table.weight,
                               rtol=0, atol=0)
    assert shared or not torch.equal(hf.model.encoder.embed_tokens.weight, hf.model.decoder.embed_tokens.weight)
    fast = transformers.AutoTokenizer.from_pretrained(tmp_path / "marian")
    for text in ["a b c", "c a b d"]:
        ids = run.src_tok.encode(text)
        assert fast(text, add_special_tokens=False)["input_ids"] == run.tgt_tok.encode(text)  # the target side
        tgt = [1, *run.tgt_tok.encode("c b a")]
        with torch.no_grad():
            theirs = hf(input_ids=torch.tensor([ids]), decoder_input_ids=torch.tensor([tgt])).logits
            ours = run.model(torch.tensor([ids]), None, torch.tensor([tgt]))
            torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-5)
            out = hf.generate(torch.tensor([ids]), max_new_tokens=8)[0, 1:].tolist()
        mine = translate_ids(run.model, [ids], DecodeConfig(max_len_a=0.0, max_len_b=8))[0]
        assert mine == [t for t in out if t not in (0, 2)]


def test_options_marian_lacks_are_refused_in_one_line(tmp_path):
    run = _trained(tmp_path)
    for key, value in [("norm_position", "pre"), ("positional", "rope"), ("sinusoidal_layout", "interleaved"),
                       ("activation", "swiglu"), ("n_kv_heads", 1), ("linear_bias", False),
                       ("scale_attention", False), ("head_dim", 4), ("scale_output", True)]:
        changed = dataclasses.replace(run, cfg=dataclasses.replace(
            run.cfg, model=dataclasses.replace(run.cfg.model, **{key: value})))
        with pytest.raises(HubError, match=f"model.{key}=.* no MarianMT equivalent"):
            export_hf(changed, tmp_path / "x")
    for family in ("rnn", "convs2s"):
        other = dataclasses.replace(run, cfg=dataclasses.replace(run.cfg, model=dataclasses.replace(
            run.cfg.model, family=family)))
        with pytest.raises(HubError, match=f"model.family={family}; seqmap exports") as error:
            export_hf(other, tmp_path / "y")
        assert "\n" not in str(error.value) and not (tmp_path / "y").exists()
