"""``wmt14-en-de``, the Transformer-base recipe's data: its download route over a loopback mirror, a local copy
through ``seqmap data prepare``, line alignment checked (no checksums are recorded for these files), and the
recipe's config training on the prepared layout (a tiny model, two steps)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from seqmap.data import datasets as ds
from seqmap.data.dataset_files import DatasetError

from .test_datasets import SHARED, serve  # noqa: F401  (serve: the loopback server fixture)

TOY = SHARED / "opennmt_wmt_ende_toy"  # a real WMT English-German sample, when the shared corpora are here


def stanford_layout(folder, lines=200):
    """The recipe's six files: from the shared WMT sample when present, else a small made-up pair."""
    folder.mkdir(parents=True, exist_ok=True)
    if TOY.is_dir():
        for name, source in (("train", "train"), ("newstest2013", "val"), ("newstest2014", "val")):
            for lang, side in (("en", "src"), ("de", "tgt")):
                text = (TOY / f"{side}-{source}.txt").read_text(encoding="utf-8").splitlines()[:lines]
                (folder / f"{name}.{lang}").write_text("\n".join(text) + "\n", encoding="utf-8")
        return folder
    words = ("the house is small", "das Haus ist klein"), ("a red car", "ein rotes Auto"), ("I see it", "ich sehe es")
    for name in ("train", "newstest2013", "newstest2014"):
        for lang, side in (("en", 0), ("de", 1)):
            rows = [words[i % 3][side] for i in range(lines)]
            (folder / f"{name}.{lang}").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def test_download_and_prepare_check_line_alignment(serve, tmp_path):  # noqa: F811
    mirror = stanford_layout(tmp_path / "mirror")
    out = ds.download("wmt14-en-de", tmp_path / "wmt14", base_url=serve(mirror))
    assert (out / "train.en").read_bytes() == (mirror / "train.en").read_bytes()
    assert (out / "newstest2014.de").is_file()
    local = ds.prepare("wmt14-en-de", mirror, tmp_path / "local")
    assert (local / "newstest2013.en").read_bytes() == (mirror / "newstest2013.en").read_bytes()
    with open(mirror / "train.de", "a") as f:
        f.write("eine Zeile mehr\n")
    with pytest.raises(DatasetError, match=r"train.en has 200 lines but train.de has 201: .* line-aligned"):
        ds.prepare("wmt14-en-de", mirror, tmp_path / "other")


def test_the_transformer_base_recipe_trains_on_the_prepared_layout(tmp_path, monkeypatch):
    from seqmap.cli import main

    stanford_layout(tmp_path / "copy")
    ds.prepare("wmt14-en-de", tmp_path / "copy", tmp_path / "data" / "wmt14-en-de")
    shutil.rmtree(tmp_path / "copy")
    monkeypatch.chdir(tmp_path)
    config = Path(__file__).resolve().parents[2] / "configs" / "wmt14_en_de_transformer_base.yaml"
    tiny = ["--model.d_model", "32", "--model.n_heads", "2", "--model.d_ff", "64", "--model.enc_layers", "1",
            "--model.dec_layers", "1", "--data.vocab_size", "600", "--train.max_steps", "2", "--train.max_tokens",
            "2000", "--train.valid_every", "2", "--train.valid_bleu", "false", "--train.early_stopping", "loss",
            "--train.device", "cpu", "--decode.beam_size", "1"]
    assert main(["train", str(config), "--run-dir", "run", *tiny]) == 0
    assert any((tmp_path / "data" / "wmt14-en-de" / "prepared").iterdir())  # the shared prepared corpus
