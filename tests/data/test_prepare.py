"""Prepared corpora (``seqmap.data.prepare``, ``seqmap.data.token_store``): the training split encoded once into
memory-mapped token columns, reused by later runs when (and only when) the text and tokenizer are the same,
refused in one line when damaged, never left half-written; the rows, filters and streams equal what the
in-memory readers give."""

from __future__ import annotations

import os

import numpy as np
import pytest

from seqmap.config import DataConfig
from seqmap.data import prepare as prep
from seqmap.data.corpus import DataError, filter_pairs, read_tsv
from seqmap.data.token_store import StoreWriter, TokenStore
from seqmap.data.tokenizers import train_tokenizer
from seqmap.tasks.lm import lm_stream, load_lm
from seqmap.tasks.translation import load_translation

WORDS = "the a dog cat sat ran on in mat hat big small red blue".split()


def corpus(path, n=300, seed=0, blank_every=0):
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        src = " ".join(rng.choice(WORDS, int(rng.integers(1, 12))))
        tgt = " ".join(reversed(src.split()))
        lines.append("\t" if blank_every and i % blank_every == 3 else f"{src}\t{tgt}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def data_cfg(tmp_path, **over) -> DataConfig:
    train = tmp_path / "train.tsv"
    if not train.exists():
        corpus(train, blank_every=50)
        corpus(tmp_path / "valid.tsv", n=20, seed=1)
    options = {"train": str(train), "valid": str(tmp_path / "valid.tsv"), "tokenizer": "word", "vocab_size": 40,
               "max_len": 10, "prepared_dir": str(tmp_path / "prepared")}
    return DataConfig(**{**options, **over})


def loaded(cfg, run_dir):
    log = []
    data = load_translation(cfg, run_dir, log.append)
    return data, "\n".join(log)


def rows(data):
    return [(s.tolist(), t.tolist()) for s, t in data.train]


def test_a_second_run_reuses_the_prepared_corpus_and_its_tokenizer(tmp_path):
    cfg = data_cfg(tmp_path)
    first, log = loaded(cfg, tmp_path / "a")
    assert "encoded with" in log
    second, log = loaded(cfg, tmp_path / "b")
    assert "read from memory-mapped files" in log and "encoded with" not in log
    assert second.src_tok.fingerprint() == first.src_tok.fingerprint()
    assert (tmp_path / "b" / "tokenizer_data.yaml").is_file()  # recorded, as for a tokenizer fitted in the run
    assert rows(second) == rows(first)
    resumed, log = loaded(cfg, tmp_path / "a")  # RUN_DIR/tokenizer exists: the same store, found by fingerprint
    assert "read from memory-mapped files" in log and rows(resumed) == rows(first)
    assert len(list((tmp_path / "prepared").iterdir())) == 1


def test_rows_and_filter_report_equal_the_text_readers(tmp_path):
    cfg = data_cfg(tmp_path)
    data, _ = loaded(cfg, tmp_path / "run")
    tok = data.src_tok
    pairs = read_tsv(cfg.train)
    kept, report = filter_pairs(pairs, cfg.max_len, lambda s, t: (len(tok.encode(s)), len(tok.encode(t))))
    assert rows(data) == [(tok.encode(s), tok.encode(t)) for s, t in kept]
    assert data.reports["train"] == report  # the same counts and the same first positions
    assert report.empty and report.too_long
    assert data.train.src_lengths().tolist() == [len(tok.encode(s)) for s, _ in kept]
    truncated, _ = loaded(data_cfg(tmp_path, max_src_len=3), tmp_path / "run")
    assert [s.tolist() for s, _ in truncated.train] == [tok.encode(s)[:3] for s, t in filter_pairs(
        pairs, cfg.max_len, lambda s, t: (0, len(tok.encode(t))))[0]]
    assert truncated.train.src_lengths().max() == 3


def test_changed_text_or_tokenizer_prepares_again_and_a_touched_file_does_not(tmp_path):
    cfg = data_cfg(tmp_path)
    loaded(cfg, tmp_path / "a")
    train = tmp_path / "train.tsv"
    os.utime(train, ns=(1, 1))  # the same content, another time: the recorded hash says it is unchanged
    _, log = loaded(cfg, tmp_path / "b")
    assert "read from memory-mapped files" in log
    text = train.read_text()
    train.write_text(text.replace("dog", "cat", 1))  # the same size, other content
    _, log = loaded(cfg, tmp_path / "c")
    assert f"{train.resolve()} changed since; preparing it again" in log and "encoded with" in log
    train.write_text(text + "big dog\tdog big\n")  # another size: another key
    _, log = loaded(cfg, tmp_path / "d")
    assert "encoded with" in log
    _, log = loaded(data_cfg(tmp_path, vocab_size=30), tmp_path / "e")  # another tokenizer
    assert "encoded with" in log


def test_held_out_validation_is_the_last_pairs_and_comes_back_on_reuse(tmp_path):
    cfg = data_cfg(tmp_path, valid=None, valid_size=25)
    data, _ = loaded(cfg, tmp_path / "a")
    pairs = read_tsv(cfg.train)
    tok = data.src_tok
    expected = filter_pairs(pairs[-25:], cfg.max_len, lambda s, t: (len(tok.encode(s)), len(tok.encode(t))))[0]
    assert data.valid_text == expected
    assert data.reports["train"].total == len(pairs) - 25
    again, log = loaded(cfg, tmp_path / "b")
    assert "read from memory-mapped files" in log and again.valid_text == expected
    with pytest.raises(DataError, match="cannot hold out 400 of 300 pairs"):
        loaded(data_cfg(tmp_path, valid=None, valid_size=400), tmp_path / "c")


def test_a_damaged_store_is_refused_naming_the_file_and_the_rebuild(tmp_path):
    cfg = data_cfg(tmp_path)
    loaded(cfg, tmp_path / "a")
    (store,) = (tmp_path / "prepared").iterdir()
    ids = store / "src.ids"
    ids.write_bytes(ids.read_bytes()[:-2])
    with pytest.raises(DataError, match=rf"{ids} has \d+ bytes, \d+ expected \(a truncated or damaged prepared "
                                        rf"corpus\); delete {store} and rebuild it: seqmap train CONFIG"):
        loaded(cfg, tmp_path / "b")
    (store / "tgt.offsets").unlink()
    ids.unlink()
    with pytest.raises(DataError, match=r"src.ids is missing"):
        TokenStore.open(store, "REBUILD")
    (store / "store.json").write_text("{")
    with pytest.raises(DataError, match=r"store.json cannot be read .*delete .* and rebuild it: REBUILD"):
        TokenStore.open(store, "REBUILD")


def test_a_failed_preparation_leaves_nothing_under_the_final_name(tmp_path, monkeypatch):
    cfg = data_cfg(tmp_path)
    calls = []

    def full_disk(self, column, rows):
        calls.append(column)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(StoreWriter, "add", full_disk)
    with pytest.raises(OSError, match="No space left"):
        loaded(cfg, tmp_path / "a")
    assert calls and list((tmp_path / "prepared").iterdir()) == []  # neither the store nor its temporary folder
    monkeypatch.undo()
    _, log = loaded(cfg, tmp_path / "a")
    assert "encoded with" in log


def test_the_tokenizer_sample_is_seeded_and_logged(tmp_path):
    sp = {"tokenizer": "bpe", "vocab_size": 30, "character_coverage": 1.0, "byte_fallback": False}
    cfg = data_cfg(tmp_path, tokenizer_sample=100, **sp)
    a, log = loaded(cfg, tmp_path / "a")
    assert "trained on a random sample of 100 sentences per side" in log
    b, _ = loaded(data_cfg(tmp_path, tokenizer_sample=100, prepared_dir=str(tmp_path / "other"), **sp),
                  tmp_path / "b")
    assert a.src_tok.fingerprint() == b.src_tok.fingerprint()  # the same sample, the same tokenizer
    _, log = loaded(data_cfg(tmp_path, tokenizer_sample=0, **sp), tmp_path / "c")
    assert "random sample" not in log
    sample = prep._samples(((str(i), str(-i)) for i in range(1000)), 10)
    assert len(sample[0]) == 10 and sample[0] == sorted(sample[0], key=int)  # in file order
    assert prep._samples(((str(i),) for i in range(5)), 10) == [["0", "1", "2", "3", "4"]]  # all, in order


def test_threaded_batch_encoding_equals_one_at_a_time():
    texts = [" ".join(np.random.default_rng(i).choice(WORDS, 9)) for i in range(500)]
    tok = train_tokenizer("bpe", texts, 40, character_coverage=1.0)
    assert tok.encode_batch(texts, threads=2) == [tok.encode(t) for t in texts]
    word = train_tokenizer("word", texts, 20)
    assert word.encode_batch(texts, threads=2) == [word.encode(t) for t in texts]


@pytest.mark.parametrize("kind", ["word", "char"])
def test_a_language_models_stream_equals_the_in_memory_one(tmp_path, kind):
    text = "".join(f"{' '.join(np.random.default_rng(i).choice(WORDS, 6))}\n" for i in range(200))
    (tmp_path / "train.txt").write_text(text)
    (tmp_path / "valid.txt").write_text(text[:300])
    cfg = DataConfig(task="lm", train=str(tmp_path / "train.txt"), valid=str(tmp_path / "valid.txt"), tokenizer=kind,
                     vocab_size=60)
    data = load_lm(cfg, tmp_path / "run", lambda _: None)
    assert isinstance(data.train, np.ndarray) and not data.train.flags.writeable  # a read-only memory map
    assert data.train.tolist() == lm_stream(text, data.tok)
    again = load_lm(cfg, tmp_path / "run", lambda _: None)
    assert again.train.tolist() == data.train.tolist()


def test_no_training_data_is_one_line(tmp_path):
    with pytest.raises(DataError, match=r"no train data: set data.train \(a TSV file\) or data.train_src"):
        loaded(DataConfig(valid=str(tmp_path / "valid.tsv")), tmp_path / "run")
    with pytest.raises(DataError, match=r"^data.train: file not found: .*missing.tsv \(check the path"):
        loaded(DataConfig(train=str(tmp_path / "missing.tsv"), valid=str(tmp_path / "valid.tsv")), tmp_path / "run")
