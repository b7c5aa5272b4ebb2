"""T5 through ``seqmap import hf`` and ``seqmap export hf``, offline, on tiny T5 models built and briefly trained
with ``transformers`` here (their tokenizer a sentencepiece model trained on a few lines, as a ``T5Tokenizer``):

* v1.0 (ReLU, the output layer tied to the embedding table, decoder output rescaled by d_model**-0.5) and v1.1 /
  Flan-T5 (gated GELU, an ``lm_head`` of its own): logits to 1e-4, greedy and beam-4 outputs identical to
  ``generate`` (``<pad>`` and ``<unk>`` banned there as seqmap bans them), the tokenizer's ids;
* heads of their own width (``d_kv`` * heads != d_model, as Flan-T5-small), a ``vocab_size`` padded above the
  tokenizer, and an mT5;
* an import -> export round trip gives back every weight, the tokenizer and the same ``generate`` outputs;
* ``seqmap train --init`` fine-tunes an imported T5 on a toy task (the loss falls) and exports it;
* a CTranslate2 export of v1.0 decodes the same tokens; v1.1 is refused in one line where CTranslate2's converter
  would rescale its output; checkpoints that do not map are refused in one line naming what they have.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")
spm = pytest.importorskip("sentencepiece")
pytest.importorskip("tokenizers")

from seqmap.config import DecodeConfig  # noqa: E402
from seqmap.decoding.text import translate_ids  # noqa: E402
from seqmap.hub import HubError, export_hf, import_hf  # noqa: E402
from seqmap.runs import load_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
SOURCE = ["summarize: the cat sat on the mat and the dog sat on the log", "summarize: a dog met a cat at the station",
          "summarize: where is the station, asked the dog", "summarize: the dog is on the log near the mat"] * 10
TARGET = ["the cat sat", "a dog met a cat", "where is the station", "the dog is on the log"] * 10
TEXTS = ["summarize: the cat sat on the mat and the dog sat on the log", "summarize: a dog met a cat at the station",
         "summarize: where is the log", "summarize: the mat is near the station"]
MAX_NEW = 15  # generated tokens at most, EOS included


def tiny_t5(directory, seed: int = 0, version: str = "1.0", d_kv: int = 8, vocab_pad: int = 0, mt5: bool = False):
    """A T5 saved with its tokenizer in ``directory/hf``; returns (model, tokenizer).

    version "1.0": ReLU, tied and rescaled output; "1.1": gated GELU and an ``lm_head`` of its own (transformers 5
    ties every T5 it builds, so the head is made a Parameter of its own before training). ``vocab_pad``: rows
    above the tokenizer's tokens, as T5's 32128 for 32100. The sentencepiece model numbers pad 0, eos 1, unk 2, as
    T5's does; the tokenizer adds three sentinels."""
    directory.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(sentence_iterator=iter(SOURCE + TARGET), model_prefix=str(directory / "spiece"),
                                   vocab_size=32, model_type="unigram", character_coverage=1.0, pad_id=0, eos_id=1,
                                   unk_id=2, bos_id=-1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(directory / "spiece.model"))
    tok = transformers.T5Tokenizer(vocab=[(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())],
                                   extra_ids=3)
    torch.manual_seed(seed)
    gated = version != "1.0"
    kind = (transformers.MT5Config, transformers.MT5ForConditionalGeneration) if mt5 else \
        (transformers.T5Config, transformers.T5ForConditionalGeneration)
    config = kind[0](vocab_size=len(tok) + vocab_pad, d_model=32, d_kv=d_kv, d_ff=48, num_layers=2,
                     num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=8,
                     relative_attention_max_distance=20, dropout_rate=0.0,
                     feed_forward_proj="gated-gelu" if gated else "relu", tie_word_embeddings=not gated,
                     decoder_start_token_id=0)
    model = kind[1](config)
    if gated:
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight))
        model.config.tie_word_embeddings = False
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)  # a little training: outputs that depend on the source
    batch = tok(SOURCE[:4], text_target=TARGET[:4], padding=True, return_tensors="pt")
    batch["labels"][batch["labels"] == tok.pad_token_id] = -100
    for _ in range(40):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    model.eval()
    model.save_pretrained(directory / "hf")
    tok.save_pretrained(directory / "hf")
    return model, tok


def _generate(hf, tok, text: str, beams: int) -> list[int]:
    """``generate`` as seqmap decodes: <pad> and <unk> banned, no early stop, length penalty 1; no start, no EOS."""
    banned = [[tok.pad_token_id], [tok.unk_token_id]] + [[i] for i in range(len(tok), hf.config.vocab_size)]
    with torch.no_grad():
        out = hf.generate(torch.tensor([tok(text)["input_ids"]]), num_beams=beams, do_sample=False,
                          max_length=MAX_NEW + 1, bad_words_ids=banned, length_penalty=1.0,
                          early_stopping=False)[0, 1:].tolist()
    return [t for t in out if t not in (tok.pad_token_id, tok.eos_token_id)]


def _ours(run, text: str, beams: int) -> list[int]:
    decode = dataclasses.replace(run.cfg.decode, beam_size=beams, max_len_a=0.0, max_len_b=MAX_NEW,
                                 length_penalty=1.0, hf_early_stopping=False)
    return [run.tgt_tok.to_hf(i) for i in translate_ids(run.model, [run.src_tok.encode(text)], decode)[0]]


def _logits(hf, tok, run, texts: list[str], target: str) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' and seqmap's logits over a padded batch of ``texts``, on the tokens both vocabularies hold."""
    enc = tok(texts, padding=True, return_tensors="pt")
    tgt = [0, *tok(text_target=target)["input_ids"][:-1]]
    ours_src = [run.src_tok.encode(t) for t in texts]
    width = max(map(len, ours_src))
    src = torch.tensor([s + [0] * (width - len(s)) for s in ours_src])
    with torch.no_grad():
        theirs = hf(**enc, decoder_input_ids=torch.tensor([tgt] * len(texts))).logits
        ours = run.model(src, src != 0, torch.tensor([[1, *run.tgt_tok.encode(target)]] * len(texts)))
    hf_of = run.tgt_tok.hf_ids()
    keep = [i for i, h in enumerate(hf_of) if h is not None]
    return ours[..., keep], theirs[..., [hf_of[i] for i in keep]]


@pytest.fixture(scope="module", params=["1.0", "1.1"])
def imported(tmp_path_factory, request):
    root = tmp_path_factory.mktemp(f"t5_{request.param}")
    hf, tok = tiny_t5(root, seed=5, version=request.param)
    import_hf(root / "hf", root / "run")
    return hf, tok, load_run(root / "run"), root


def test_the_mapping_uses_t5s_options(imported):
    hf, _, run, _ = imported
    m, v10 = run.cfg.model, hf.config.feed_forward_proj == "relu"
    assert (m.family, m.positional, m.norm, m.norm_position) == ("transformer", "t5", "rmsnorm", "pre")
    assert m.norm_eps == 1e-6
    assert (m.linear_bias, m.scale_attention, m.scale_embeddings, m.share_vocab) == (False, False, False, True)
    assert (m.t5_buckets, m.t5_max_distance, m.head_dim) == (8, 20, None)
    assert (m.activation, m.tie_embeddings, m.scale_output) == (("relu", True, True) if v10 else
                                                                ("geglu_tanh", False, False))
    assert run.cfg.decode.beam_ranking == "hf" and run.cfg.decode.absent_ids == [1]  # T5 has no BOS of its own
    assert (run.model.decoder.output.weight is run.model.decoder.embedding.table.weight) == v10


def test_the_tokenizer_gives_t5s_ids(imported):
    hf, tok, run, root = imported
    sp = spm.SentencePieceProcessor(model_file=str(root / "spiece.model"))
    for text in TEXTS:
        ids = tok(text)["input_ids"]
        assert ids == [*sp.encode(text), 1]  # the sentencepiece model's pieces, then </s>
        assert [run.src_tok.to_hf(i) for i in run.src_tok.encode(text)] == ids
        target = run.tgt_tok.encode(text)
        assert [run.tgt_tok.to_hf(i) for i in target] == ids[:-1]
        assert run.tgt_tok.decode(target) == tok.decode(ids, skip_special_tokens=True)
    assert run.tgt_tok.to_hf(0) == 0 and run.tgt_tok.to_hf(2) == 1 and run.tgt_tok.to_hf(3) == 2  # pad, eos, unk
    assert run.tgt_tok.to_hf(1) is None and run.tgt_tok.vocab_size == len(tok) + 1


def test_logits_agree_on_a_padded_batch(imported):
    hf, tok, run, _ = imported
    ours, theirs = _logits(hf, tok, run, TEXTS[:3], "the cat sat on")
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)


@pytest.mark.parametrize("beams", [1, 4])
def test_greedy_and_beam_4_outputs_are_generates(imported, beams):
    hf, tok, run, _ = imported
    outputs = []
    for text in TEXTS:
        theirs = _generate(hf, tok, text, beams)
        assert _ours(run, text, beams) == theirs, (text, beams)
        outputs.append(theirs)
    assert len(set(map(tuple, outputs))) > 1  # the outputs depend on the source


def test_heads_of_their_own_width_and_a_padded_vocabulary(tmp_path):
    """d_kv * num_heads = 24 for d_model 32 (Flan-T5-small has 6 * 64 for 512); 5 rows above the tokenizer are
    trimmed, and the export writes the tokenizer's size."""
    hf, tok = tiny_t5(tmp_path, seed=6, version="1.1", d_kv=6, vocab_pad=5)
    import_hf(tmp_path / "hf", tmp_path / "run")
    run = load_run(tmp_path / "run")
    assert run.cfg.model.head_dim == 6 and run.cfg.model.tgt_vocab == len(tok) + 1 < hf.config.vocab_size
    ours, theirs = _logits(hf, tok, run, TEXTS[:2], "a dog met")
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)
    for text in TEXTS:
        assert _ours(run, text, 1) == _generate(hf, tok, text, 1), text
    export_hf(run, tmp_path / "back")
    back = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "back").eval()
    assert (back.config.d_kv, back.config.vocab_size) == (6, len(tok))
    torch.testing.assert_close(back.lm_head.weight, hf.lm_head.weight[:len(tok)], rtol=0, atol=0)


def test_an_mt5_imports_as_a_t5(tmp_path):
    hf, tok = tiny_t5(tmp_path, seed=7, version="1.1", mt5=True)
    assert hf.config.model_type == "mt5"
    import_hf(tmp_path / "hf", tmp_path / "run")
    run = load_run(tmp_path / "run")
    assert (run.cfg.model.activation, run.cfg.model.tie_embeddings, run.cfg.model.scale_output) == \
        ("geglu_tanh", False, False)
    ours, theirs = _logits(hf, tok, run, TEXTS[:2], "the dog")
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)
    for text in TEXTS[:2]:
        assert _ours(run, text, 4) == _generate(hf, tok, text, 4), text


# -- export -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def round_trip(imported):
    from seqmap.cli import main

    hf, tok, run, root = imported
    assert main(["export", "hf", str(root / "run"), "--out", str(root / "back")]) == 0
    back = transformers.T5ForConditionalGeneration.from_pretrained(root / "back").eval()
    return hf, tok, back, transformers.AutoTokenizer.from_pretrained(root / "back"), run, root


def test_round_trip_gives_back_the_same_weights(round_trip):
    hf, _, back, _, _, _ = round_trip
    theirs, ours = hf.state_dict(), back.state_dict()
    assert set(theirs) == set(ours)
    for name, tensor in theirs.items():
        torch.testing.assert_close(ours[name], tensor, rtol=0, atol=0, msg=name)
    tied = hf.config.feed_forward_proj == "relu"
    assert (back.lm_head.weight is back.shared.weight) == tied and back.config.scale_decoder_outputs == tied
    config = json.loads((round_trip[5] / "back" / "config.json").read_text())
    assert config["tie_word_embeddings"] == tied  # what transformers 4 reads as "tied and rescaled"


def test_round_trip_gives_back_the_tokenizer_and_the_outputs(round_trip):
    hf, tok, back, back_tok, run, _ = round_trip
    for text in TEXTS:
        assert back_tok(text)["input_ids"] == tok(text)["input_ids"]
        src = torch.tensor([tok(text)["input_ids"]])
        with torch.no_grad():
            torch.testing.assert_close(back(src, decoder_input_ids=src).logits, hf(src, decoder_input_ids=src).logits,
                                       rtol=0, atol=0)
        for beams in (1, 4):
            assert _generate(back, back_tok, text, beams) == _generate(hf, tok, text, beams)
        with torch.no_grad():
            out = back.generate(src, max_length=MAX_NEW + 1)[0, 1:].tolist()  # the exported generation config
        assert _ours(run, text, 1) == [t for t in out if t != tok.eos_token_id]


def test_an_export_imports_back_to_the_same_run(round_trip, tmp_path):
    _, _, _, _, run, root = round_trip
    import_hf(root / "back", tmp_path / "again")
    again = load_run(tmp_path / "again")
    assert again.cfg.model == run.cfg.model
    ours, theirs = run.model.state_dict(), again.model.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_an_imported_t5_fine_tunes_with_init_and_exports(imported, tmp_path, capsys):
    """``seqmap train --init``: a toy task (swap two words after a ``swap: `` prompt); the training loss falls.
    The fine-tuned run (its BOS and PAD rows now differ) exports with greedy outputs equal to seqmap's."""
    import yaml

    from seqmap.cli import main

    hf, _, _, root = imported
    words = ["the", "cat", "dog", "sat", "mat", "log", "a", "met"]
    pairs = [(a, b) for a in words for b in words if a != b]
    (tmp_path / "train.tsv").write_text("".join(f"swap: {a} {b}\t{b} {a}\n" for a, b in pairs * 2))
    (tmp_path / "valid.tsv").write_text("".join(f"swap: {a} {b}\t{b} {a}\n" for a, b in pairs[:6]))
    cfg = {"data": {"train": str(tmp_path / "train.tsv"), "valid": str(tmp_path / "valid.tsv")},
           "train": {"max_steps": 30, "batch_size": 32, "max_tokens": 2000, "lr": 3e-3, "warmup": 0,
                     "schedule": "constant", "valid_every": 30, "log_every": 10, "label_smoothing": 0.0}}
    (tmp_path / "ft.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["train", str(tmp_path / "ft.yaml"), "--init", str(root / "run"), "--run-dir",
                 str(tmp_path / "ft")]) == 0
    metrics = [json.loads(line) for line in (tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()]
    losses = [m["loss"] for m in metrics if m["kind"] == "train"]
    assert losses[-1] < 0.5 * losses[0], losses
    run = load_run(tmp_path / "ft")
    assert run.cfg.model == load_run(root / "run").cfg.model and run.tgt_tok.kind == "hf"
    table = run.model.decoder.embedding.table.weight
    assert not torch.equal(table[0], table[1])  # PAD's row and BOS's (T5's pad as the decoder start) diverged
    export_hf(run, tmp_path / "back")
    back = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "back").eval()
    back_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "back")
    for a, b in pairs[:6]:
        text = f"swap: {a} {b}"
        assert _generate(back, back_tok, text, 1) == _ours(run, text, 1), text
    capsys.readouterr()
    assert main(["translate", str(tmp_path / "ft"), "swap: cat dog", "--decode.beam_size", "1"]) == 0
    assert capsys.readouterr().out.strip()  # a translation, printed


def test_a_seqmap_trained_transformer_with_t5s_options_exports_as_a_t5(tmp_path):
    """seqmap's own ids (0 PAD, 1 BOS = the decoder start, 2 EOS, 3 UNK) in a T5 directory: the same logits and
    greedy outputs in ``transformers``."""
    from .test_marian_export import _trained

    run = _trained(tmp_path, norm_position="pre", norm="rmsnorm", positional="t5", activation="relu",
                   output_bias=False, linear_bias=False, scale_attention=False, scale_embeddings=False,
                   scale_output=True, t5_buckets=8, t5_max_distance=16)
    export_hf(run, tmp_path / "t5")
    hf = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "t5").eval()
    assert (hf.config.pad_token_id, hf.config.eos_token_id, hf.config.decoder_start_token_id) == (0, 2, 1)
    for text in ["a b c", "c a b d"]:
        ids = run.src_tok.encode(text)
        tgt = [1, *run.tgt_tok.encode("c b a")]
        with torch.no_grad():
            theirs = hf(input_ids=torch.tensor([ids]), decoder_input_ids=torch.tensor([tgt])).logits
            torch.testing.assert_close(theirs, run.model(torch.tensor([ids]), None, torch.tensor([tgt])), rtol=0,
                                       atol=1e-5)
            out = hf.generate(torch.tensor([ids]), max_length=9)[0, 1:].tolist()  # its bans: PAD, BOS, UNK
        mine = translate_ids(run.model, [ids], DecodeConfig(max_len_a=0.0, max_len_b=8))[0]
        assert mine == [t for t in out if t not in (0, 2)]


# -- CTranslate2 --------------------------------------------------------------------------------------------


def test_ctranslate2_decodes_a_t5_v1_0_as_seqmap_and_refuses_what_its_converter_rescales(imported, tmp_path):
    """CTranslate2's T5 converter rescales the decoder output where ``tie_word_embeddings`` holds, which
    transformers 5 says of every T5: v1.0 (tied, rescaled) converts and decodes seqmap's tokens; v1.1 is refused
    in one line where this transformers says so."""
    pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed: pip install -e \".[ct2]\"")
    from seqmap.hub.ct2 import check_export, export_ct2, load_translator, translate_ct2

    _, _, run, _ = imported
    converter_rescales_every_t5 = bool(transformers.T5Config(tie_word_embeddings=False).tie_word_embeddings)
    if converter_rescales_every_t5 and not run.cfg.model.scale_output:
        with pytest.raises(HubError, match=r"CTranslate2's T5 converter rescales .*model.scale_output=false") as e:
            export_ct2(run, tmp_path / "ct2")
        assert "\n" not in str(e.value)
        return
    export_ct2(run, tmp_path / "ct2")
    translator = load_translator(tmp_path / "ct2", threads=1)
    check_export(tmp_path / "ct2", translator, run)  # its probe scores as the run's model
    decode = DecodeConfig(max_len_a=0.0, max_len_b=MAX_NEW)
    sources = [run.src_tok.encode(text) for text in TEXTS]
    assert translate_ct2(translator, run.src_tok, run.tgt_tok, sources, decode) == \
        translate_ids(run.model, sources, decode)


# -- what does not map ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("t5_refusals")
    tiny_t5(root, seed=8)
    return root / "hf"


@pytest.mark.parametrize("changes, message", [
    ({"architectures": ["T5EncoderModel"]}, "architectures T5EncoderModel is an encoder alone, without the decoder"),
    ({"architectures": ["T5ForSequenceClassification"]}, "architectures T5ForSequenceClassification is another head"),
    ({"feed_forward_proj": "gated-relu"}, "feed_forward_proj 'gated-relu' has no seqmap equivalent"),
    ({"model_type": "umt5"}, "model_type 'umt5' is not supported: UMT5 gives every layer its own relative-position"),
    ({"model_type": "longt5"}, "model_type 'longt5' is not supported: LongT5's local and transient-global"),
    ({"decoder_start_token_id": 5}, "decoder_start_token_id 5 differs from pad_token_id 0"),
    ({"relative_attention_num_buckets": 2}, "relative_attention_num_buckets 2 and relative_attention_max_distance 20"),
    ({"d_kv": 0}, "d_kv must be a positive integer, got 0"),
    ({"vocab_size": 20}, "has 35 tokens but config.json's vocab_size is 20: the tokenizer does not belong"),
    ({"d_model": 16}, "shared.weight has shape (35, 32), but config.json implies (35, 16)"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false, got 'yes'"),
    ({"tie_word_embeddings": False, "scale_decoder_outputs": False}, "tie_word_embeddings is false but "
                                                                      "model.safetensors has no lm_head.weight"),
])
def test_a_t5_seqmap_cannot_map_is_one_line_naming_what_it_has(source, tmp_path, changes, message):
    copy = tmp_path / "hf"
    shutil.copytree(source, copy)
    config = json.loads((copy / "config.json").read_text()) | changes
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(HubError, match=re.escape(message)) as e:
        import_hf(copy, tmp_path / "run")
    assert str(e.value).startswith(str(copy)) and "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


def test_weights_and_files_that_do_not_map_are_one_line(source, tmp_path):
    from safetensors.torch import load_file, save_file

    for name, change, message in [
        ("later bias", lambda w: w.update({"encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight":
                                           torch.zeros(8, 4)}),
         "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight is a relative-position bias in a "
         "later layer (UMT5's kind)"),
        ("two tables", lambda w: w.update({"decoder.embed_tokens.weight": w["shared.weight"] + 1}),
         "shared.weight and decoder.embed_tokens.weight differ"),
        ("no tokenizer.json", None, "holds spiece.model but no tokenizer.json; seqmap reads T5's tokenizer.json"),
    ]:
        copy = tmp_path / name
        shutil.copytree(source, copy)
        if change is None:
            (copy / "tokenizer.json").unlink()
            shutil.copy(source.parent / "spiece.model", copy)
        else:
            weights = load_file(str(copy / "model.safetensors"))
            change(weights)
            save_file(weights, str(copy / "model.safetensors"), metadata={"format": "pt"})
        with pytest.raises(HubError, match=re.escape(message)) as e:
            import_hf(copy, tmp_path / f"{name} run")
        assert "\n" not in str(e.value), name


def test_a_seqmap_run_t5_cannot_express_is_refused_in_one_line(imported, tmp_path):
    _, _, run, _ = imported
    for key, value in [("norm", "layernorm"), ("linear_bias", True), ("scale_attention", True),
                       ("activation", "geglu"), ("n_kv_heads", 2)]:
        changed = dataclasses.replace(run, cfg=dataclasses.replace(
            run.cfg, model=dataclasses.replace(run.cfg.model, **{key: value})))
        with pytest.raises(HubError, match=f"model.{key}=.* no T5 equivalent"):
            export_hf(changed, tmp_path / key)
