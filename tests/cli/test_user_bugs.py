"""What a new user hit: an empty line is translated as empty, in its place, by every path of ``seqmap translate``
(arguments, stdin, --input, beam, n-best, sampling, a prefix, --align, --ct2). A tiny reverse-the-words run
trained for seconds: it writes something for an empty source when asked to decode one."""

from __future__ import annotations

import io
import random
import sys

import pytest
import torch

from seqmap.cli import main
from seqmap.config import RunConfig, from_dict
from seqmap.training.run_trainer import train

TEXTS = ["a b c", "", "d e", "   ", "f a"]  # an empty and a blank line between sentences


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("user_bugs")
    rng = random.Random(0)
    rows = []
    for _ in range(200):
        words = [rng.choice("abcdef") for _ in range(rng.randint(2, 5))]
        rows.append(f"{' '.join(words)}\t{' '.join(reversed(words))}\n")
    (root / "train.tsv").write_text("".join(rows))
    (root / "valid.tsv").write_text("a b c\tc b a\n")
    cfg = from_dict(RunConfig, {
        "model": {"family": "transformer", "d_model": 16, "n_heads": 2, "d_ff": 32, "enc_layers": 1,
                  "dec_layers": 1, "dropout": 0.0},
        "data": {"tokenizer": "word", "train": str(root / "train.tsv"), "valid": str(root / "valid.tsv")},
        "train": {"max_steps": 40, "max_tokens": 300, "lr": 5e-3, "warmup": 5, "schedule": "constant",
                  "valid_every": 40, "valid_bleu": False}})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(cfg, root / "run", stream=io.StringIO())
    finally:
        torch.set_num_threads(threads)
    return root / "run"


def _translate(capsys, ckpt, *args) -> list[str]:
    assert main(["translate", str(ckpt), "--threads", "1", *args]) == 0, capsys.readouterr().err
    return capsys.readouterr().out.splitlines()


OPTIONS = {"greedy": [], "beam": ["--decode.beam_size", "3"], "sampling": ["--sample", "--seed", "4"],
           "prefix": ["--prefix", "the"]}


@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
def test_an_empty_line_translates_as_empty_in_its_place(ckpt, capsys, options):
    alone = [_translate(capsys, ckpt, text, *options)[0] for text in ("a b c", "f a")]
    assert all(alone)
    assert _translate(capsys, ckpt, "", *options) == [""]
    lines = _translate(capsys, ckpt, *TEXTS, *options)
    assert len(lines) == len(TEXTS) and lines[1] == lines[3] == ""
    assert lines[0] == alone[0] and lines[4] == alone[1] or "--sample" in options  # a sample's seed is its place


def test_empty_lines_of_stdin_and_of_a_file_keep_their_place(ckpt, capsys, monkeypatch, tmp_path):
    expected = _translate(capsys, ckpt, *TEXTS)
    data = "".join(t + "\n" for t in TEXTS) + "\n"  # a last empty line too
    (tmp_path / "in.txt").write_text(data)
    assert _translate(capsys, ckpt, "--input", str(tmp_path / "in.txt")) == [*expected, ""]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    assert _translate(capsys, ckpt) == [*expected, ""]


def test_an_empty_lines_nbest_list_is_one_empty_entry(ckpt, capsys):
    lines = _translate(capsys, ckpt, "a b c", "", "f a", "--nbest", "2", "--decode.beam_size", "2")
    assert [line.split(" ||| ")[0] for line in lines] == ["0", "0", "1", "2", "2"]
    assert lines[2] == "1 |||  ||| 0.0000"


def test_an_empty_line_aligns_to_nothing(ckpt, capsys):
    lines = _translate(capsys, ckpt, "", "--align")
    assert lines == ["", "  alignment: "]


def test_an_empty_line_is_not_given_to_ctranslate2(ckpt, capsys, tmp_path):
    pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed: pip install -e \".[ct2]\"")
    assert main(["export", "ct2", str(ckpt), "--out", str(tmp_path / "ct2")]) == 0, capsys.readouterr().err
    capsys.readouterr()
    ct2 = ["--ct2", str(tmp_path / "ct2")]
    assert _translate(capsys, ckpt, *TEXTS, *ct2) == _translate(capsys, ckpt, *TEXTS)
    nbest = ["--nbest", "2", "--decode.beam_size", "2"]
    lines = _translate(capsys, ckpt, *TEXTS, *nbest, *ct2)
    assert [line for line in lines if line.startswith(("1 ", "3 "))] == ["1 |||  ||| 0.0000", "3 |||  ||| 0.0000"]


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("stream, shown", [(Terminal, True), (io.StringIO, False)], ids=["terminal", "file"])
def test_evaluate_shows_its_decoding_progress_on_a_terminal_only(ckpt, capsys, monkeypatch, tmp_path, stream, shown):
    (tmp_path / "src").write_text("a b c\nd e\nf a\n")
    (tmp_path / "ref").write_text("c b a\ne d\na f\n")
    err = stream()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["evaluate", str(ckpt), "--src", str(tmp_path / "src"), "--ref", str(tmp_path / "ref"),
                 "--out", str(tmp_path / "hyp"), "--threads", "1"]) == 0
    assert "3 hypotheses written" in capsys.readouterr().out
    assert ("decoding:" in err.getvalue() and "/3 [" in err.getvalue()) == shown
