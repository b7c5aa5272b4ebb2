"""A tiny MarianMT (OPUS-MT's architecture, briefly trained) saved by ``transformers`` imports with one call, gives
the same logits and translates greedily exactly as ``transformers`` does.

Beam search is compared in ``test_beam_parity.py``: with seqmap's default ranking (GNMT's length penalty
((5 + len) / 6) ** alpha) the beams can pick other hypotheses than ``transformers`` (len ** alpha and its own
stopping rule); ``decode.beam_ranking: hf``, which ``seqmap import hf`` sets, gives the same outputs."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")
spm = pytest.importorskip("sentencepiece")

from seqmap.config import DecodeConfig  # noqa: E402
from seqmap.decoding.text import translate_ids  # noqa: E402
from seqmap.hub import HubError, import_hf  # noqa: E402
from seqmap.runs import load_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
SOURCE = ["the cat sat on the mat", "a dog met a cat", "where is the station", "the dog is on the log"] * 10
TARGET = ["die katze sass auf der matte", "ein hund traf eine katze", "wo ist der bahnhof",
          "der hund ist auf dem baum"] * 10


def _spm(path, lines):
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(path), vocab_size=24,
                                   model_type="unigram", character_coverage=1.0, bos_id=-1, eos_id=-1,
                                   unk_id=0, pad_id=-1, minloglevel=2)
    return path.with_suffix(".model")


def tiny_marian(directory, seed: int = 0, tied: bool = True):
    """source.spm / target.spm, one vocab.json over both (</s> 0, <unk> 1, ..., <pad> last), a random MarianMT
    (``tied=False``: an output layer ``lm_head`` of its own, ``tie_word_embeddings: false``; ``transformers`` 5
    then ties nothing, and encoder and decoder are given one table, as a converted OPUS-MT model has)."""
    directory.mkdir(parents=True, exist_ok=True)
    src_model = _spm(directory / "src", SOURCE)
    tgt_model = _spm(directory / "tgt", TARGET)
    pieces = []
    for model in (src_model, tgt_model):
        sp = spm.SentencePieceProcessor(model_file=str(model))
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.id_to_piece(i) != "<unk>"]
    vocab = {"</s>": 0, "<unk>": 1}
    for p in pieces:
        vocab.setdefault(p, len(vocab))
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab))
    tok = transformers.MarianTokenizer(str(src_model), str(tgt_model), str(directory / "vocab.json"))
    torch.manual_seed(seed)
    config = transformers.MarianConfig(vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2,
                                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                       decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=len(vocab) - 1,
                                       eos_token_id=0, decoder_start_token_id=len(vocab) - 1,
                                       activation_function="swish", scale_embedding=True, dropout=0.0,
                                       attention_dropout=0.0, activation_dropout=0.0, tie_word_embeddings=tied)
    model = transformers.MarianMTModel(config)
    if not tied:  # one table for encoder and decoder while it trains; its own copy in each when saved
        model.model.encoder.embed_tokens = model.model.decoder.embed_tokens = model.model.shared
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)  # a little training: outputs that depend on the source
    batch = tok(SOURCE[:4], text_target=TARGET[:4], padding=True, return_tensors="pt")
    for _ in range(60):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.1)  # a bias of its own, so its mapping is tested
    if not tied:
        for side in (model.model.encoder, model.model.decoder):
            side.embed_tokens = torch.nn.Embedding.from_pretrained(model.model.shared.weight.detach().clone(),
                                                                   freeze=False, padding_idx=config.pad_token_id)
    out = directory / "hf"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return model, tok


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    root = tmp_path_factory.mktemp("marian")
    hf, tok = tiny_marian(root)
    return hf, tok, root


@pytest.fixture(scope="module")
def imported(marian):
    hf, tok, root = marian
    import_hf(root / "hf", root / "run")
    return hf, tok, load_run(root / "run")


def test_tokenizers_agree(imported):
    _, tok, run = imported
    for text in ["the cat sat on the mat", "where is the dog"]:
        ids = run.src_tok.encode(text)
        assert [run.src_tok.to_hf(i) for i in ids] == tok(text)["input_ids"]  # ends with </s>
    hf_ids = tok(text_target="die katze sass")["input_ids"][:-1]
    ours = run.tgt_tok.encode("die katze sass")
    assert [run.tgt_tok.to_hf(i) for i in ours] == hf_ids
    assert run.tgt_tok.decode(ours) == tok.decode(hf_ids, skip_special_tokens=True)


def test_greedy_translations_are_the_same_as_transformers(imported):
    beam = 1
    hf, tok, run = imported
    pad, unk = hf.config.pad_token_id, tok.convert_tokens_to_ids("<unk>")
    for text in ["the cat sat on the mat", "a dog met a cat", "where is the log"]:
        src = tok(text)["input_ids"]
        with torch.no_grad():
            theirs = hf.generate(torch.tensor([src]), num_beams=beam, do_sample=False, max_new_tokens=12,
                                 length_penalty=1.0, bad_words_ids=[[pad], [unk]],
                                 forced_eos_token_id=None)[0, 1:].tolist()  # seqmap forces no EOS at the limit
        theirs = [t for t in theirs if t not in (0, pad)]
        ours = translate_ids(run.model, [run.src_tok.encode(text)], DecodeConfig(
            beam_size=beam, max_len_a=0.0, max_len_b=12, length_penalty=1.0))[0]
        assert [run.tgt_tok.to_hf(i) for i in ours] == theirs, (text, beam)


def test_logits_agree(imported):
    hf, tok, run = imported
    src = tok("the cat sat")["input_ids"]
    tgt = [hf.config.decoder_start_token_id, *tok(text_target="die katze")["input_ids"][:-1]]
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([tgt])).logits[0]
        ours = run.model(torch.tensor([run.src_tok.encode("the cat sat")]), None,
                         torch.tensor([[1, *run.tgt_tok.encode("die katze")]]))[0]
    hf_of = run.tgt_tok.hf_ids()
    keep = [i for i, h in enumerate(hf_of) if h is not None]
    torch.testing.assert_close(ours[:, keep], theirs[:, [hf_of[i] for i in keep]], rtol=0, atol=1e-4)


def test_an_untied_output_layer_is_imported_as_its_own(tmp_path):
    """``tie_word_embeddings: false``: the logits come from ``lm_head``, not from the embedding table, and greedy
    translations are those of ``transformers``."""
    hf, tok = tiny_marian(tmp_path, seed=2, tied=False)
    assert not torch.equal(hf.lm_head.weight, hf.model.shared.weight)
    import_hf(tmp_path / "hf", tmp_path / "run")
    run = load_run(tmp_path / "run")
    assert run.cfg.model.tie_embeddings is False and run.cfg.model.share_vocab is True
    src = tok("the cat sat")["input_ids"]
    tgt = [hf.config.decoder_start_token_id, *tok(text_target="die katze")["input_ids"][:-1]]
    hf_of = run.tgt_tok.hf_ids()
    keep = [i for i, h in enumerate(hf_of) if h is not None]
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([tgt])).logits[0]
        ours = run.model(torch.tensor([run.src_tok.encode("the cat sat")]), None,
                         torch.tensor([[1, *run.tgt_tok.encode("die katze")]]))[0]
    torch.testing.assert_close(ours[:, keep], theirs[:, [hf_of[i] for i in keep]], rtol=0, atol=1e-4)
    pad, unk = hf.config.pad_token_id, tok.convert_tokens_to_ids("<unk>")
    for text in ["the cat sat on the mat", "a dog met a cat", "where is the log"]:
        with torch.no_grad():
            out = hf.generate(torch.tensor([tok(text)["input_ids"]]), do_sample=False, max_new_tokens=12,
                              bad_words_ids=[[pad], [unk]], forced_eos_token_id=None)[0, 1:].tolist()
        mine = translate_ids(run.model, [run.src_tok.encode(text)], DecodeConfig(max_len_a=0.0, max_len_b=12))[0]
        assert [run.tgt_tok.to_hf(i) for i in mine] == [t for t in out if t not in (0, pad)], text


def test_an_untied_marian_whose_encoder_and_decoder_tables_differ_is_one_line(tmp_path):
    from safetensors.torch import load_file, save_file

    tiny_marian(tmp_path, seed=3, tied=False)
    path = tmp_path / "hf" / "model.safetensors"
    weights = load_file(str(path))
    weights["model.decoder.embed_tokens.weight"] = weights["model.decoder.embed_tokens.weight"] + 1.0
    save_file(weights, str(path), metadata={"format": "pt"})
    with pytest.raises(HubError, match="encoder.embed_tokens and decoder.embed_tokens differ"):
        import_hf(tmp_path / "hf", tmp_path / "run")


def test_missing_marian_files_are_one_line(tmp_path):
    tiny_marian(tmp_path, seed=1)
    (tmp_path / "hf" / "vocab.json").unlink()
    with pytest.raises(HubError, match="vocab.json is missing"):
        import_hf(tmp_path / "hf", tmp_path / "run")


@pytest.mark.parametrize("changes, message", [
    ({"tie_word_embeddings": False}, "the weight lm_head.weight is missing (is config.json from the same "
                                     "model?)"),  # once refused; never imported with the shared table as output
    ({"tie_word_embeddings": 0}, "tie_word_embeddings must be true or false, got 0"),
    ({"decoder_attention_heads": 2}, "encoder_attention_heads and decoder_attention_heads differ"),
    ({"decoder_ffn_dim": 32}, "encoder_ffn_dim and decoder_ffn_dim differ"),
    ({"share_encoder_decoder_embeddings": False}, "separate source and target vocabularies are not supported"),
    ({"activation_function": "tanh"}, "activation_function 'tanh' has no seqmap equivalent"),
    ({"normalize_before": True}, "pre-LN / embedding-norm Marian variants are not supported"),
    ({"d_model": 0}, "d_model must be a positive integer, got 0"),
    ({"eos_token_id": None}, "eos_token_id must be an integer id"),
    ({"decoder_start_token_id": 0}, "decoder_start_token_id differs from pad_token_id"),
    ({"vocab_size": 99, "decoder_vocab_size": 99}, "but config.json's vocab_size is 99: the tokenizer does not "
                                                    "belong to this model"),
])
def test_a_marian_config_seqmap_cannot_map_is_one_line_naming_the_field(marian, tmp_path, changes, message):
    import re
    import shutil

    source = tmp_path / "hf"
    shutil.copytree(marian[2] / "hf", source)
    config = json.loads((source / "config.json").read_text()) | changes
    (source / "config.json").write_text(json.dumps(config))
    with pytest.raises(HubError, match=re.escape(message)) as e:
        import_hf(source, tmp_path / "run")
    assert str(e.value).startswith(str(source)) and "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()
