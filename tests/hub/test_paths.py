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
