"""Round trips through ``seqmap export hf`` and ``seqmap import hf`` that must give back the same model: a
seqmap-trained LM keeps its prompts (EOS, then the text), its ids and its generations."""

from __future__ import annotations

import importlib.util

import pytest

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")

from seqmap.config import DecodeConfig  # noqa: E402
from seqmap.decoding.text import generate_nbest, lm_prompt  # noqa: E402
from seqmap.hub import export_hf, import_hf  # noqa: E402
from seqmap.runs import load_run  # noqa: E402

from .test_ct2_lm import _trained_lm  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
GPT2_LIKE = {"positional": "learned", "max_len": 48, "activation": "gelu", "scale_embeddings": False}


def test_a_seqmap_trained_lm_comes_back_from_its_gpt2_export(tmp_path):
    """The import used to read the export's prompts as GPT-2's (the text alone, no EOS first) and its <pad>, <s>
    and <unk> as ordinary tokens: three more ids, and other generations from the same weights."""
    run = _trained_lm(tmp_path, **GPT2_LIKE)
    export_hf(run, tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "back")
    back = load_run(tmp_path / "back")
    assert back.tgt_tok.vocab_size == run.tgt_tok.vocab_size
    decode = DecodeConfig(max_new_tokens=12)
    for text in ["the cat", "a dog met", ""]:
        ids = lm_prompt(run.tgt_tok, text)
        assert lm_prompt(back.tgt_tok, text) == ids
        ours = generate_nbest(run.model, [ids], decode, sample=False)[0][0].output
        theirs = generate_nbest(back.model, [ids], decode, sample=False)[0][0].output
        assert theirs == ours, text
    export_hf(back, tmp_path / "hf2")  # and again: the second export is the first
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "hf2" / name).read_text() == (tmp_path / "hf" / name).read_text(), name


def test_a_damaged_seqmap_tokenizer_entry_is_one_line(tmp_path):
    import json

    from seqmap.hub import HubError

    run = _trained_lm(tmp_path, **GPT2_LIKE)
    export_hf(run, tmp_path / "hf")
    config = tmp_path / "hf" / "config.json"
    fields = json.loads(config.read_text())
    fields["seqmap_tokenizer"]["prompt"] = "bos"
    config.write_text(json.dumps(fields))
    with pytest.raises(HubError, match=r"config.json: seqmap_tokenizer must be .* as seqmap export hf writes it"):
        import_hf(tmp_path / "hf", tmp_path / "back")


def test_a_seqmap_trained_transformers_marian_export_does_not_import_back_in_one_line(tmp_path):
    """Its tokenizer.json (not Marian's spm files) used to be refused as "decoder_start_token_id differs from
    pad_token_id", which named neither the cause nor the fix."""
    from seqmap.hub import HubError

    from .test_marian_export import _trained

    export_hf(_trained(tmp_path), tmp_path / "marian")
    with pytest.raises(HubError, match=r"marian holds tokenizer.json, not Marian's source.spm, target.spm and "
                                       r"vocab.json \(as seqmap export hf writes a seqmap-trained Transformer\); .* "
                                       "for a seqmap export use the run it came from$"):
        import_hf(tmp_path / "marian", tmp_path / "back")
    assert not (tmp_path / "back").exists()


def test_an_out_under_a_file_is_one_line(tmp_path, capsys):
    """``--out FILE/x`` used to end in a NotADirectoryError (or FileExistsError) traceback."""
    from seqmap.cli import main

    from .test_gpt2 import tiny_gpt2

    tiny_gpt2(tmp_path / "hf")
    (tmp_path / "file").write_text("")
    run = _trained_lm(tmp_path / "lm", **GPT2_LIKE)
    commands = [["import", "hf", str(tmp_path / "hf")], ["export", "hf", str(run.checkpoint)]]
    if importlib.util.find_spec("ctranslate2") is not None:
        commands.append(["export", "ct2", str(run.checkpoint)])
    capsys.readouterr()
    for command in commands:
        out = tmp_path / "file" / "x" / "y"
        assert main([*command, "--out", str(out)]) == 2, command
        assert capsys.readouterr().err == (f"seqmap: error: {tmp_path / 'file'} is a file, so --out {out} cannot be "
                                           "made under it; choose another --out directory\n")


@pytest.mark.parametrize("name", ["config.yaml", "tokenizer"])
def test_an_import_never_writes_over_files_in_out(tmp_path, name):
    """An --out holding a config.yaml (or tokenizer/) but no checkpoints used to have it silently replaced."""
    from seqmap.hub import HubError

    from .test_gpt2 import tiny_gpt2

    tiny_gpt2(tmp_path / "hf")
    mine = tmp_path / "out" / name
    mine.parent.mkdir()
    if name == "tokenizer":
        mine.mkdir()
        (mine / "keep.txt").write_text("mine\n")
    else:
        mine.write_text("mine: 1\n")
    with pytest.raises(HubError, match=f"out already holds {name}; choose another --out directory$"):
        import_hf(tmp_path / "hf", tmp_path / "out")
    kept = [name, "keep.txt"] if name == "tokenizer" else [name]
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == sorted(kept)
