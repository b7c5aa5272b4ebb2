"""What import and export do with the paths they are given: a truncated or corrupt safetensors file, an --out
that is a file or an earlier export, each one line; a char-level run's exported tokenizer decodes as seqmap does."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")

from seqmap.cli import main  # noqa: E402
from seqmap.hub import HubError, export_ct2, export_hf, import_hf  # noqa: E402

from .test_ct2_lm import _trained_lm  # noqa: E402
from .test_gpt2 import tiny_gpt2  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
GPT2_LIKE = {"positional": "learned", "max_len": 48, "activation": "gelu", "scale_embeddings": False}


@pytest.fixture(scope="module")
def char_lm(tmp_path_factory):
    return _trained_lm(tmp_path_factory.mktemp("char_lm"), tokenizer="char", **GPT2_LIKE)


@pytest.mark.parametrize("cut", [0, 7, 300, -100])
def test_a_truncated_safetensors_file_is_one_line(tmp_path, cut):
    tiny_gpt2(tmp_path / "hf")
    weights = tmp_path / "hf" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:cut])
    with pytest.raises(HubError, match=r"model.safetensors is not a readable safetensors file \(.*\); it is "
                                       "truncated or corrupt"):
        import_hf(tmp_path / "hf", tmp_path / "run")


def test_import_into_a_file_is_one_line(tmp_path):
    tiny_gpt2(tmp_path / "hf")
    (tmp_path / "out").write_text("")
    with pytest.raises(HubError, match="out is a file; choose another --out directory"):
        import_hf(tmp_path / "hf", tmp_path / "out")


def test_export_into_a_file_or_an_earlier_export_is_one_line(char_lm, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    for export in (export_hf, export_ct2):
        with pytest.raises(HubError, match="file is a file; choose another --out directory"):
            export(char_lm, tmp_path / "file")
    export_hf(char_lm, tmp_path / "hf")
    with pytest.raises(HubError, match="hf exists and is not empty; choose another --out directory"):
        export_hf(char_lm, tmp_path / "hf")
    assert main(["export", "hf", str(char_lm.checkpoint), "--out", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err.strip().endswith("file is a file; choose another --out directory")
    (tmp_path / "empty").mkdir()
    export_hf(char_lm, tmp_path / "empty")  # an empty directory is fine
    assert (tmp_path / "empty" / "config.json").is_file()


def test_a_char_level_tokenizer_decodes_without_spaces_after_export(char_lm, tmp_path):
    export_hf(char_lm, tmp_path / "hf")
    fast = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = "the cat sat"
    ids = fast(text)["input_ids"]
    assert ids == char_lm.tgt_tok.encode(text)
    assert fast.decode(ids) == text


def test_a_mistyped_local_path_that_looks_like_a_hub_name_says_there_is_no_such_directory(tmp_path, monkeypatch):
    hub = pytest.importorskip("huggingface_hub")

    def offline(*args, **kwargs):
        raise OSError("no connection")

    monkeypatch.setattr(hub, "snapshot_download", offline)
    with pytest.raises(HubError, match=r"^no local directory bad/nope, and it cannot be fetched from the Hugging "
                                       r"Face Hub \(OSError: no connection\)"):
        import_hf("bad/nope", tmp_path / "run")


def test_a_sharded_checkpoint_imports_as_the_whole_one(tmp_path):
    """``save_pretrained(max_shard_size=...)`` writes shards and an index: every shard is read; a missing one is
    one line naming it."""
    import torch

    from seqmap.runs import load_run

    hf, fast = tiny_gpt2(tmp_path / "whole", seed=6)
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    fast.save_pretrained(tmp_path / "sharded")
    shards = sorted(p.name for p in (tmp_path / "sharded").glob("model-*.safetensors"))
    assert len(shards) >= 2 and not (tmp_path / "sharded" / "model.safetensors").exists()
    import_hf(tmp_path / "whole", tmp_path / "run_whole")
    import_hf(tmp_path / "sharded", tmp_path / "run_sharded")
    whole, sharded = (load_run(tmp_path / f"run_{n}").model.state_dict() for n in ("whole", "sharded"))
    assert whole.keys() == sharded.keys()
    for name in whole:
        assert torch.equal(whole[name], sharded[name]), name
    (tmp_path / "sharded" / shards[-1]).unlink()
    with pytest.raises(HubError, match=rf"{shards[-1]} is missing \(model.safetensors.index.json names it\); copy "
                                       "every shard the index lists"):
        import_hf(tmp_path / "sharded", tmp_path / "run_broken")


def test_sources_seqmap_cannot_read_are_one_line(tmp_path):
    tiny_gpt2(tmp_path / "hf")
    with pytest.raises(HubError, match="config.json is a file; give the directory that save_pretrained wrote"):
        import_hf(tmp_path / "hf" / "config.json", tmp_path / "run")
    weights = tmp_path / "hf" / "model.safetensors"
    weights.rename(tmp_path / "hf" / "pytorch_model.bin")  # what an old save_pretrained (a pickle) leaves
    with pytest.raises(HubError, match=r"holds pytorch_model.bin \(a pickle\), which seqmap does not load; save it "
                                       r"again with save_pretrained\(dir, safe_serialization=True\)"):
        import_hf(tmp_path / "hf", tmp_path / "run")
    config = tmp_path / "hf" / "config.json"
    config.write_text('{"model_type": "gpt2",')
    with pytest.raises(HubError, match=r"config.json is not valid JSON \("):
        import_hf(tmp_path / "hf", tmp_path / "run")
    config.write_text('["gpt2"]')
    with pytest.raises(HubError, match="config.json must hold a JSON object"):
        import_hf(tmp_path / "hf", tmp_path / "run")
    config.unlink()
    with pytest.raises(HubError, match="config.json is missing; a save_pretrained directory holds it"):
        import_hf(tmp_path / "hf", tmp_path / "run")
    assert not (tmp_path / "run").exists()
