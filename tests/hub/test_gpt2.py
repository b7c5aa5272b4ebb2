"""A tiny random GPT-2 saved by ``transformers`` imports with one call and generates exactly as it does."""

from __future__ import annotations

import dataclasses

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")
tokenizers = pytest.importorskip("tokenizers", reason="the hf extra is not installed: pip install -e \".[hf]\"")

from seqmap.config import DecodeConfig  # noqa: E402
from seqmap.decoding.text import generate_nbest, lm_prompt  # noqa: E402
from seqmap.hub import HubError, export_hf, import_hf  # noqa: E402
from seqmap.runs import load_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
TEXT = ("the cat sat on the mat. the dog sat on the log. a cat and a dog met on a mat by the log.\n" * 20)


def tiny_gpt2(directory, seed: int = 0, tied: bool = True, pad_to: int = 1):
    """A byte-level BPE trained on a few lines, and a random 2-layer GPT-2 over it, saved as transformers saves
    (``tied=False``: an output layer ``lm_head`` of its own, ``tie_word_embeddings: false``; ``pad_to``: a
    ``vocab_size`` padded up to a multiple of it, with rows past the tokenizer's last id)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT.splitlines(), trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    eos = tok.token_to_id("<|endoftext|>")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                                bos_token="<|endoftext|>", unk_token="<|endoftext|>")
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=-(-tok.get_vocab_size() // pad_to) * pad_to, n_embd=32, n_layer=2,
                                     n_head=4, n_positions=64, bos_token_id=eos, eos_token_id=eos,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=tied)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # a random model's logits are nearly flat; sharpen them so generation is not a coin toss
        model.transformer.wte.weight.mul_(8.0)
    model.save_pretrained(directory)
    fast.save_pretrained(directory)
    return model, fast


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt2")
    hf, fast = tiny_gpt2(root / "hf")
    import_hf(root / "hf", root / "run")
    return hf, fast, load_run(root / "run")


def test_logits_agree(imported):
    hf, fast, run = imported
    text = "the cat sat on the log"
    hf_ids = fast(text)["input_ids"]
    ids = run.tgt_tok.encode(text)
    assert [run.tgt_tok.to_hf(i) for i in ids] == hf_ids
    with torch.no_grad():
        theirs = hf(torch.tensor([hf_ids])).logits[0]  # (T, V_hf)
        mem = run.model(None, None, torch.tensor([ids]))  # (1, T, V)
    hf_of = run.tgt_tok.hf_ids()
    keep = [i for i, h in enumerate(hf_of) if h is not None]
    torch.testing.assert_close(mem[0][:, keep], theirs[:, [hf_of[i] for i in keep]], rtol=0, atol=1e-5)


@pytest.mark.parametrize("beam", [1, 5])
def test_generation_is_the_same_as_transformers(imported, beam):
    hf, fast, run = imported
    for prompt in ["the cat", "a dog met", "on the mat. the"]:
        hf_ids = fast(prompt)["input_ids"]
        with torch.no_grad():
            out = hf.generate(torch.tensor([hf_ids]), attention_mask=torch.ones(1, len(hf_ids), dtype=torch.long),
                              do_sample=False, num_beams=beam, max_new_tokens=12, length_penalty=1.0,
                              pad_token_id=fast.eos_token_id)[0, len(hf_ids):].tolist()
        ours = generate_nbest(run.model, [lm_prompt(run.tgt_tok, prompt)],
                              DecodeConfig(beam_size=beam, max_new_tokens=12, length_penalty=1.0), sample=False)
        hyp = [run.tgt_tok.to_hf(i) for i in ours[0][0].output]
        theirs = [t for t in out if t != fast.eos_token_id]
        assert hyp == theirs[:len(hyp)] and len(hyp) == len(theirs), (prompt, hyp, out)


def test_tokenizer_round_trip_and_specials(imported):
    _, fast, run = imported
    tok = run.tgt_tok
    assert tok.kind == "hf" and tok.to_seqmap(fast.eos_token_id) == 2  # <|endoftext|> is seqmap's EOS
    for text in ["the cat sat", "a dog, met!", "zebra"]:
        assert tok.decode(tok.encode(text)) == fast.decode(fast(text)["input_ids"]) == text
    assert all(tok.to_seqmap(tok.to_hf(i)) == i for i in range(4, tok.vocab_size))


def test_bad_sources_are_one_line(tmp_path, imported):
    with pytest.raises(HubError, match="no such directory"):
        import_hf(tmp_path / "none" / "x" / "y", tmp_path / "out")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(HubError, match="model_type 'llama' is not supported"):
        import_hf(tmp_path / "m", tmp_path / "out")
    (tmp_path / "m" / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(HubError, match="config.json: hidden_size must be a positive integer, got None"):
        import_hf(tmp_path / "m", tmp_path / "out")


def test_the_command_line_imports_and_generates(tmp_path, capsys):
    from seqmap.cli import main

    tiny_gpt2(tmp_path / "hf", seed=1)
    assert main(["import", "hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    assert "imported" in capsys.readouterr().out
    assert main(["generate", str(tmp_path / "run"), "--prompt", "the cat", "--greedy"]) == 0
    assert capsys.readouterr().out.startswith("the cat")
    assert main(["import", "hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 2
    assert "already holds checkpoints" in capsys.readouterr().err
    (tmp_path / "hf" / "model.safetensors").unlink()
    assert main(["import", "hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run2")]) == 2
    assert "has no model.safetensors" in capsys.readouterr().err


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt2_source")
    tiny_gpt2(root / "hf", seed=3)
    return root / "hf"


@pytest.mark.parametrize("changes, message", [
    ({"n_head": 0}, "n_head must be a positive integer, got 0"),
    ({"n_embd": "32"}, "n_embd must be a positive integer, got '32'"),
    ({"activation_function": "quick_gelu"}, "activation_function 'quick_gelu' has no seqmap equivalent"),
    ({"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon 1e-06 differs from seqmap's 1e-5"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not "
                                                "supported"),
    ({"reorder_and_upcast_attn": True}, "are not supported"),
    ({"eos_token_id": None}, "eos_token_id must be an integer id"),
    ({"tie_word_embeddings": "no"}, "tie_word_embeddings must be true or false, got 'no'"),
    ({"tie_word_embeddings": False}, r"the weight lm_head.weight is missing \(is config.json from the same model\?\)"),
    ({"n_positions": 32}, r"wpe.weight has shape \(64, 32\), but config.json implies \(32, 32\)"),
])
def test_a_gpt2_config_seqmap_cannot_map_is_one_line_naming_the_field(gpt2_dir, tmp_path, changes, message):
    """Options that would change what the model computes are refused, not ignored; nothing is written."""
    import json
    import shutil

    source = tmp_path / "hf"
    shutil.copytree(gpt2_dir, source)
    config = json.loads((source / "config.json").read_text()) | changes
    (source / "config.json").write_text(json.dumps(config))
    with pytest.raises(HubError, match=message) as e:
        import_hf(source, tmp_path / "run")
    assert str(e.value).startswith(str(source)) and "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()


def test_a_tokenizer_of_another_model_is_one_line(tmp_path):
    import json

    tiny_gpt2(tmp_path / "hf", seed=2)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    config["vocab_size"] -= 1  # the tokenizer's last id has no row (more rows than tokens is padding: imported)
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    with pytest.raises(HubError, match="have no embedding row: the tokenizer does not belong to this model"):
        import_hf(tmp_path / "hf", tmp_path / "run")
    config["vocab_size"] += 2  # rows the weights do not have
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    with pytest.raises(HubError, match=r"wte.weight has shape \(\d+, 32\), but config.json implies"):
        import_hf(tmp_path / "hf", tmp_path / "run")


@pytest.mark.parametrize("tied", [True, False])
def test_a_vocabulary_padded_past_the_tokenizer_is_trimmed(tmp_path, tied):
    """``vocab_size`` padded to a multiple of 64 (once refused as another model's tokenizer): the rows no token has
    are dropped, so nothing the tokenizer cannot decode is generated; the other logits are the model's, greedy
    generation is ``transformers``' with the padding suppressed, beam search too when it renormalises (the rows
    leave the softmax), and the export is the trimmed model."""
    hf, fast = tiny_gpt2(tmp_path / "hf", seed=6, tied=tied, pad_to=64)
    n, padded = len(fast), hf.config.vocab_size
    assert padded % 64 == 0 and padded - n > 10
    import_hf(tmp_path / "hf", tmp_path / "run")
    run = load_run(tmp_path / "run")
    tok = run.tgt_tok
    assert run.cfg.model.tgt_vocab == tok.vocab_size == n + 3  # PAD, BOS, UNK, EOS reserved; <|endoftext|> is EOS
    assert run.model.output.weight.shape[0] == tok.vocab_size and max(tok.hf_ids()[4:]) == n - 1
    text = "the cat sat on the log"
    hf_ids = fast(text)["input_ids"]
    columns = [i for i in range(tok.vocab_size) if tok.to_hf(i) is not None]
    with torch.no_grad():
        logits = hf(torch.tensor([hf_ids])).logits  # (1, T, V padded)
        ours = run.model(None, None, torch.tensor([tok.encode(text)]))[0]
    torch.testing.assert_close(ours[:, columns], logits[0][:, [tok.to_hf(i) for i in columns]], rtol=0, atol=1e-5)
    for beam in (1, 5):
        for prompt in ["the cat", "a dog met"]:
            ids = fast(prompt)["input_ids"]
            with torch.no_grad():
                out = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                  do_sample=False, num_beams=beam, max_new_tokens=12, length_penalty=1.0,
                                  pad_token_id=fast.eos_token_id, suppress_tokens=list(range(n, padded)),
                                  renormalize_logits=True)[0, len(ids):].tolist()
            decode = dataclasses.replace(run.cfg.decode, beam_size=beam, max_new_tokens=12, length_penalty=1.0)
            mine = generate_nbest(run.model, [lm_prompt(tok, prompt)], decode, sample=False)[0][0].output
            theirs = [t for t in out if t != fast.eos_token_id]
            assert [tok.to_hf(i) for i in mine] == theirs, (prompt, beam)
    export_hf(run, tmp_path / "back")
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "back").eval()
    assert back.config.vocab_size == n and back.config.tie_word_embeddings is tied
    with torch.no_grad():
        torch.testing.assert_close(back(torch.tensor([hf_ids])).logits, logits[..., :n], rtol=0, atol=1e-5)


def test_an_imported_model_fine_tunes_on_your_text(tmp_path, capsys):
    import json

    import yaml

    from seqmap.cli import main

    tiny_gpt2(tmp_path / "hf", seed=3)
    assert main(["import", "hf", str(tmp_path / "hf"), "--out", str(tmp_path / "gpt2")]) == 0
    (tmp_path / "train.txt").write_text("the cat sat on the mat.\n" * 50)
    (tmp_path / "valid.txt").write_text("the cat sat on the mat.\n" * 5)
    cfg = {"data": {"task": "lm", "train": str(tmp_path / "train.txt"), "valid": str(tmp_path / "valid.txt"),
                    "context": 16},
           "train": {"max_steps": 30, "batch_size": 8, "lr": 3e-3, "warmup": 0, "schedule": "constant",
                     "valid_every": 30, "log_every": 10, "label_smoothing": 0.0}}
    (tmp_path / "ft.yaml").write_text(yaml.safe_dump(cfg))
    capsys.readouterr()
    assert main(["train", str(tmp_path / "ft.yaml"), "--init", str(tmp_path / "gpt2"), "--run-dir",
                 str(tmp_path / "ft")]) == 0
    metrics = [json.loads(line) for line in (tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()]
    train_losses = [m["loss"] for m in metrics if m["kind"] == "train"]
    assert train_losses and train_losses[-1] < 0.5 * train_losses[0]  # it learns the one line
    run = load_run(tmp_path / "ft")
    assert run.tgt_tok.kind == "hf" and run.cfg.model.activation == "gelu_tanh"
    capsys.readouterr()
    assert main(["generate", str(tmp_path / "ft"), "--prompt", "the cat", "--greedy",
                 "--decode.max_new_tokens", "6"]) == 0
    assert capsys.readouterr().out.startswith("the cat sat on the mat")


def test_import_then_export_gives_back_the_same_model(tmp_path, capsys):
    from seqmap.cli import main

    hf, fast = tiny_gpt2(tmp_path / "hf", seed=4)
    assert main(["import", "hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    assert main(["export", "hf", str(tmp_path / "run"), "--out", str(tmp_path / "back")]) == 0
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "back").eval()
    back_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "back")
    ids = fast("the dog sat on a mat")["input_ids"]
    assert back_tok("the dog sat on a mat")["input_ids"] == ids
    with torch.no_grad():
        torch.testing.assert_close(back(torch.tensor([ids])).logits, hf(torch.tensor([ids])).logits, rtol=0,
                                   atol=1e-5)
        for beam in (1, 5):
            kw = dict(do_sample=False, num_beams=beam, max_new_tokens=10, pad_token_id=fast.eos_token_id)
            assert back.generate(torch.tensor([ids]), **kw).tolist() == hf.generate(torch.tensor([ids]), **kw).tolist()


def test_an_untied_output_layer_is_imported_and_exported_as_its_own(tmp_path):
    """``tie_word_embeddings: false``: the logits come from ``lm_head``, not from the embedding table (once they
    silently did), and the export writes ``lm_head`` back."""
    hf, fast = tiny_gpt2(tmp_path / "hf", seed=5, tied=False)
    assert hf.lm_head.weight.data_ptr() != hf.transformer.wte.weight.data_ptr()
    import_hf(tmp_path / "hf", tmp_path / "run")
    run = load_run(tmp_path / "run")
    assert run.cfg.model.tie_embeddings is False
    text = "the dog met a cat"
    ids, hf_ids = run.tgt_tok.encode(text), fast(text)["input_ids"]
    columns = [i for i in range(run.tgt_tok.vocab_size) if run.tgt_tok.to_hf(i) is not None]
    with torch.no_grad():
        theirs = hf(torch.tensor([hf_ids])).logits[0]
        ours = run.model(None, None, torch.tensor([ids]))[0]
        torch.testing.assert_close(ours[:, columns], theirs[:, [run.tgt_tok.to_hf(i) for i in columns]], rtol=0,
                                   atol=1e-5)
    export_hf(run, tmp_path / "back")
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "back").eval()
    assert back.config.tie_word_embeddings is False
    torch.testing.assert_close(back.lm_head.weight, hf.lm_head.weight, rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(back(torch.tensor([hf_ids])).logits, hf(torch.tensor([hf_ids])).logits, rtol=0,
                                   atol=1e-5)


def test_a_seqmap_trained_language_model_exports_to_gpt2(tmp_path):
    from seqmap.config import RunConfig, from_dict
    from seqmap.hub import export_hf
    from seqmap.training.run_trainer import train

    (tmp_path / "train.txt").write_text("the cat sat on the mat .\\na dog met a cat .\\n" * 30)
    (tmp_path / "valid.txt").write_text("the cat sat on the mat .\\n")
    cfg = from_dict(RunConfig, {
        "model": {"family": "lm", "d_model": 16, "n_heads": 2, "d_ff": 32, "dec_layers": 2, "dropout": 0.0,
                  "positional": "learned", "max_len": 32, "activation": "gelu_tanh", "scale_embeddings": False},
        "data": {"task": "lm", "tokenizer": "word", "train": str(tmp_path / "train.txt"),
                 "valid": str(tmp_path / "valid.txt"), "context": 16},
        "train": {"max_steps": 20, "batch_size": 4, "lr": 3e-3, "warmup": 0, "schedule": "constant",
                  "valid_every": 20}})
    import io

    train(cfg, tmp_path / "run", stream=io.StringIO())
    run = load_run(tmp_path / "run")
    export_hf(run, tmp_path / "gpt2")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "gpt2").eval()
    fast = transformers.AutoTokenizer.from_pretrained(tmp_path / "gpt2")
    ids = run.tgt_tok.encode("a dog sat on the cat")
    assert fast("a dog sat on the cat")["input_ids"] == ids
    with torch.no_grad():
        torch.testing.assert_close(hf(torch.tensor([ids])).logits[0], run.model(None, None, torch.tensor([ids]))[0],
                                   rtol=0, atol=1e-5)
        theirs = hf.generate(torch.tensor([[2, *ids]]), do_sample=False, max_new_tokens=8)[0, len(ids) + 1:].tolist()
    ours = generate_nbest(run.model, [[2, *ids]], DecodeConfig(max_new_tokens=8), sample=False)[0][0].output
    assert ours == [t for t in theirs if t != 2][:len(ours)]
    scaled = dataclasses.replace(run, cfg=dataclasses.replace(
        run.cfg, model=dataclasses.replace(run.cfg.model, scale_embeddings=True)))
    with pytest.raises(HubError, match="model.scale_embeddings=True .* no GPT-2 equivalent"):
        export_hf(scaled, tmp_path / "x")
