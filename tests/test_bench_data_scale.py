"""bench/data_scale.py's corpora and configs: what each task reads, and configs seqmap accepts (no training here)."""

import importlib.util
from pathlib import Path

import pytest

from seqmap.config import load_config

BENCH = Path(__file__).resolve().parent.parent / "bench" / "data_scale.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("data_scale", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_synthetic_pairs_have_10_to_40_words_a_side_and_repeat_with_their_seed(bench, tmp_path):
    path = bench.synthetic_corpus(tmp_path / "train.tsv", 50, seed=3, vocab=500)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 50
    for line in lines:
        src, tgt = line.split("\t")
        assert 10 <= len(src.split()) <= 40 and len(tgt.split()) == len(src.split())
    assert bench.synthetic_corpus(tmp_path / "again.tsv", 50, seed=3, vocab=500).read_text() == path.read_text()


def test_each_task_reads_the_source_side(bench, tmp_path):
    tsv = bench.synthetic_corpus(tmp_path / "train.tsv", 20, seed=1, vocab=500)
    sources = [line.split("\t")[0] for line in tsv.read_text(encoding="utf-8").splitlines()]
    assert bench.as_task(tsv, "translation") == tsv
    assert bench.as_task(tsv, "lm").read_text(encoding="utf-8").splitlines() == sources
    rows = [line.split("\t") for line in bench.as_task(tsv, "classification").read_text().splitlines()]
    assert [text for text, _ in rows] == sources
    assert [label for _, label in rows] == [f"c{len(s.split()[0]) % 10}" for s in sources]


@pytest.mark.parametrize("task", ["translation", "lm", "classification"])
@pytest.mark.parametrize("epoch", [False, True])
def test_the_configs_are_valid_runs(bench, tmp_path, task, epoch):
    text = bench.CONFIGS[task].format(train=tmp_path / "train", valid=tmp_path / "valid", steps=0 if epoch else 20,
                                      log_every=10)
    if epoch:
        text = text.replace("device: cpu}", "max_epochs: 1, device: cpu}")
    (tmp_path / "run.yaml").write_text(text)
    cfg = load_config(tmp_path / "run.yaml")
    assert cfg.data.task == task
    assert (cfg.train.max_epochs, cfg.train.max_steps) == ((1, 0) if epoch else (0, 20))
