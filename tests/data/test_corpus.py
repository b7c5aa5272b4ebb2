"""Corpus reading: errors that name file, key and line; counted filters; the token cache."""

import gzip
import re
from pathlib import Path

import pytest

from seqmap.data.corpus import (
    DataError,
    FilterReport,
    cached_encode,
    filter_pairs,
    pair_lengths,
    read_lines,
    read_parallel,
    read_tsv,
)
from seqmap.data.tokenizers import CharTokenizer, train_tokenizer

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def test_read_lines_strips_only_line_endings(tmp_path):
    path = write(tmp_path / "a.txt", "\ufeffone \n two\r\n\tthree\r\n\nlast\u2028line")
    assert read_lines(path) == ["one ", " two", "\tthree", "", "last\u2028line"]


def test_read_lines_gzip(tmp_path):
    path = tmp_path / "a.de.gz"
    path.write_bytes(gzip.compress("Ein Hund läuft.\n狗在跑。\n".encode()))
    assert read_lines(path, "data.train_src") == ["Ein Hund läuft.", "狗在跑。"]


def test_not_gzip_despite_suffix(tmp_path):
    path = write(tmp_path / "a.gz", "plain text\n")
    with pytest.raises(DataError, match=re.escape(f"data.train: {path}: not a complete gzip file")):
        read_lines(path, "data.train")


def test_missing_file_names_key_and_path(tmp_path):
    path = tmp_path / "y.de"
    with pytest.raises(DataError, match=re.escape(f"data.train_src: file not found: {path}")):
        read_lines(path, "data.train_src")


def test_empty_file_is_an_error(tmp_path):
    with pytest.raises(DataError, match="data.valid: .*empty"):
        read_lines(write(tmp_path / "e.txt", ""), "data.valid")


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("fine\nalso fine\nso caf\xe9 here\n".encode("latin-1"))
    with pytest.raises(DataError, match=re.escape(f"data.train_tgt: {path}: line 3 is not valid UTF-8")):
        read_lines(path, "data.train_tgt")


def test_read_parallel_pairs_lines(tmp_path):
    src = write(tmp_path / "s.en", "a dog\na cat\n")
    tgt = write(tmp_path / "t.de", "ein Hund\neine Katze\n")
    assert read_parallel(src, tgt, "data.train_src", "data.train_tgt") == [("a dog", "ein Hund"),
                                                                          ("a cat", "eine Katze")]


def test_mismatched_counts_name_both_files_and_counts(tmp_path):
    src = write(tmp_path / "s.en", "a\nb\nc\n")
    tgt = write(tmp_path / "t.de", "a\nb\n")
    with pytest.raises(DataError) as err:
        read_parallel(src, tgt, "data.train_src", "data.train_tgt")
    message = str(err.value)
    assert f"data.train_src: {src} has 3 lines" in message
    assert f"data.train_tgt: {tgt} has 2" in message


def test_read_tsv_columns(tmp_path):
    path = write(tmp_path / "p.tsv", "Hi.\t嗨。\tCC-BY\nRun.\t跑。\tCC-BY\n\n")
    assert read_tsv(path, "data.train") == [("Hi.", "嗨。"), ("Run.", "跑。"), ("", "")]
    assert read_tsv(path, "data.train", src_column=1, tgt_column=0)[0] == ("嗨。", "Hi.")
    assert read_tsv(path, "data.train", tgt_column=2)[1] == ("Run.", "CC-BY")


def test_read_tsv_too_few_columns_names_the_line(tmp_path):
    path = write(tmp_path / "p.tsv", "a\tb\nc\td\nonly one column\n")
    with pytest.raises(DataError, match=re.escape(f"data.train: {path}: line 3 has 1 tab-separated column(s), need 2")):
        read_tsv(path, "data.train")
    with pytest.raises(DataError, match="line 1 has 2 .* need 3"):
        read_tsv(path, "data.train", tgt_column=2)
    with pytest.raises(DataError, match="columns count from 0"):
        read_tsv(path, "data.train", src_column=-1)


def test_filter_pairs_counts_empty_and_long():
    pairs = [("a b", "x y"), ("", "x"), ("a", "   "), ("a b c d", "x"), ("a", "x y z w v"), ("a", "x")]
    lengths = lambda s, t: (len(s.split()), len(t.split()))  # noqa: E731
    kept, report = filter_pairs(pairs, max_len=3, lengths=lengths)
    assert kept == [("a b", "x y"), ("a", "x")]
    assert (report.total, report.kept, report.empty, report.too_long) == (6, 2, 2, 2)
    assert report.empty_lines == [2, 3] and report.too_long_lines == [4, 5]
    assert report.summary("train") == ("train: kept 2 of 6 pairs; dropped 2 empty (lines 2, 3), "
                                       "2 longer than 3 tokens (lines 4, 5)")


def test_filter_pairs_without_length_limit_and_summary_elision():
    pairs = [("", "x")] * 7 + [("a", "b")]
    kept, report = filter_pairs(pairs)
    assert kept == [("a", "b")] and report.empty == 7 and report.too_long == 0
    assert "7 empty (lines 1, 2, 3, 4, 5, ...)" in report.summary()
    assert FilterReport(total=1, kept=1).summary("valid") == "valid: kept 1 of 1 pairs; dropped none"
    with pytest.raises(ValueError, match="pass lengths="):
        filter_pairs(pairs, max_len=5)


def test_filter_pairs_counts_tokens_with_the_tokenizer():
    tok = train_tokenizer("char", ["abcdef"])
    kept, report = filter_pairs([("abc", "abcd"), ("ab", "ab")], max_len=3, lengths=pair_lengths(tok))
    assert kept == [("ab", "ab")] and report.too_long == 1


class CountingTokenizer(CharTokenizer):
    """A char tokenizer that counts its encode calls."""

    def __init__(self, pieces):
        super().__init__(pieces)
        self.calls = 0

    def encode(self, text):
        self.calls += 1
        return super().encode(text)


@pytest.fixture
def counting():
    return CountingTokenizer.train(["the dog runs 狗在跑"])


def test_cache_hit_does_not_tokenize(tmp_path, counting):
    lines = ["the dog", "", "狗在跑"]
    first = cached_encode(lines, counting, tmp_path, name="train")
    assert counting.calls == 3
    assert first == [counting.encode(x) for x in lines] and first[1] == []
    counting.calls = 0
    assert cached_encode(lines, counting, tmp_path, name="train") == first
    assert counting.calls == 0
    assert len(list(tmp_path.glob("train-*.npz"))) == 1


def test_cache_pairs_with_two_tokenizers(tmp_path, counting):
    other = train_tokenizer("char", ["狗在跑 the"])
    pairs = [("the dog", "狗在跑"), ("runs", "")]
    ids = cached_encode(pairs, (counting, other), tmp_path, name="train")
    assert ids == [(counting.encode("the dog"), other.encode("狗在跑")), (counting.encode("runs"), [])]
    counting.calls = 0
    assert cached_encode(pairs, (counting, other), tmp_path, name="train") == ids and counting.calls == 0


def test_cache_is_rebuilt_when_the_file_or_tokenizer_changes(tmp_path, counting):
    data = write(tmp_path / "train.txt", "the dog\nruns\n")
    cache = tmp_path / "cache"
    cached_encode(read_lines(data), counting, cache, [data], name="train")
    write(data, "the dog\nrun\n")  # same line count, new content
    counting.calls = 0
    ids = cached_encode(read_lines(data), counting, cache, [data], name="train")
    assert counting.calls == 2 and ids[1] == counting.encode("run")
    assert len(list(cache.glob("train-*.npz"))) == 1, "the stale cache file is replaced"

    other = CountingTokenizer.train(["the dog run"])  # a different vocabulary
    ids = cached_encode(read_lines(data), other, cache, [data], name="train")
    assert other.calls == 2 and ids == [CharTokenizer.encode(other, "the dog"), CharTokenizer.encode(other, "run")]


def test_cache_names_keep_datasets_apart(tmp_path, counting):
    cached_encode(["the"], counting, tmp_path, name="train")
    cached_encode(["dog"], counting, tmp_path, name="train-lm")
    cached_encode(["dog runs"], counting, tmp_path, name="train")
    assert len(list(tmp_path.glob("train-lm-*.npz"))) == 1
    assert len(list(tmp_path.glob("*.npz"))) == 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary files left behind"


def test_corrupt_cache_is_rebuilt(tmp_path, counting):
    cached_encode(["the dog"], counting, tmp_path, name="train")
    (path,) = tmp_path.glob("train-*.npz")
    path.write_bytes(b"not a zip")
    counting.calls = 0
    assert cached_encode(["the dog"], counting, tmp_path, name="train") == [counting.encode("the dog")]
    assert counting.calls == 2


@pytest.mark.skipif(not (SHARED_DATA / "multi30k").is_dir(), reason=f"shared corpora absent: {SHARED_DATA}")
def test_real_multi30k_gzip_parallel():
    pairs = read_parallel(SHARED_DATA / "multi30k" / "val.en.gz", SHARED_DATA / "multi30k" / "val.de.gz",
                          "data.valid_src", "data.valid_tgt")
    assert len(pairs) == 1014
    assert pairs[0][1].startswith("Eine Gruppe von Männern")


@pytest.mark.skipif(not (SHARED_DATA / "tatoeba_cmn_eng").is_dir(), reason=f"shared corpora absent: {SHARED_DATA}")
def test_real_tatoeba_tsv():
    pairs = read_tsv(SHARED_DATA / "tatoeba_cmn_eng" / "cmn.txt", "data.train")
    assert len(pairs) == 23610
    assert pairs[0] == ("Hi.", "嗨。")
    kept, report = filter_pairs(pairs)
    assert report.total == 23610 and report.kept + report.empty == report.total

