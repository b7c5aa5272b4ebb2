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


# -- mistakes in the command line and the config ----------------------------------------------------

@pytest.mark.parametrize("argv, usage, hint", [
    (["translate", "RUN", "--beam", "5"], "usage: seqmap translate ", "--beam; did you mean --decode.beam_size?"),
    (["evaluate", "RUN", "--nbst", "2"], "usage: seqmap evaluate ", "--nbst 2; did you mean --nbest?"),
    (["train", "c.yaml", "--max-steps", "3"], "usage: seqmap train ", "--max-steps 3; did you mean --train.max_steps?"),
    (["serve", "RUN", "--prot", "1"], "usage: seqmap serve ", "--prot 1; did you mean --port?"),
    (["translate", "RUN", "--zzz"], "usage: seqmap translate ", "unrecognized arguments: --zzz\n"),
], ids=["translate", "evaluate", "train", "serve", "nothing near"])
def test_an_unknown_option_prints_its_commands_usage_and_the_nearest_option(capsys, argv, usage, hint):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and f"seqmap {argv[0]}: error: unrecognized arguments: " in err
    assert err.endswith(hint if hint.endswith("\n") else hint + "\n")  # no guess when nothing is near


def test_a_misspelt_choice_in_the_config_names_the_nearest(tmp_path, capsys):
    from seqmap.config import ConfigError

    with pytest.raises(ConfigError, match=r"model.family = 'transfomer' is not valid; did you mean 'transformer'\? "
                                          r"choose one of \['transformer', 'lm', "):
        from_dict(RunConfig, {"model": {"family": "transfomer"}})
    with pytest.raises(ConfigError, match=r"train.schedule = 'zigzag' is not valid; choose one of"):
        from_dict(RunConfig, {"train": {"schedule": "zigzag"}})  # nothing near: no guess
    (tmp_path / "c.yaml").write_text("model:\n  family: transfomer\n")
    assert main(["train", str(tmp_path / "c.yaml"), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'transformer'?" in err


def test_a_run_dir_that_does_not_exist_is_called_so(ckpt, tmp_path, capsys, monkeypatch):
    assert main(["translate", str(tmp_path / "nowhere"), "a b"]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: {tmp_path / 'nowhere'} does not exist; give a run directory "
                                       "or a checkpoint directory\n")
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "runs/gone"]) == 2
    assert capsys.readouterr().err == ("seqmap: error: runs/gone does not exist; give a run directory or a "
                                       f"checkpoint directory (relative paths start at {tmp_path})\n")
    (tmp_path / "notes.txt").write_text("a file\n")
    assert main(["translate", "notes.txt", "a b"]) == 2
    assert "notes.txt is not a run directory or a checkpoint directory" in capsys.readouterr().err
    assert main(["train", "--resume", "runs/gone"]) == 2
    assert capsys.readouterr().err == ("seqmap: error: --resume runs/gone does not exist; give the run directory to "
                                       "continue\n")
    assert main(["translate", str(ckpt), "a b"]) == 0  # an existing run still loads


def test_plot_says_in_one_line_which_package_draws_chinese(ckpt, capsys, monkeypatch, tmp_path):
    from seqmap.visualize import fonts

    monkeypatch.setattr(fonts, "_families", dict)  # as on a machine without CJK fonts
    monkeypatch.setattr(fonts, "_add_new_system_fonts", lambda: False)
    monkeypatch.setattr(fonts, "_warned_missing", False)
    assert main(["plot", "attention", str(ckpt), "--text", "a 你 b", "--out", str(tmp_path / "zh.png")]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"wrote {tmp_path / 'zh.png'}\n"
    assert captured.err == ("seqmap: warning: no installed font has the characters '你', so they are drawn as boxes; "
                            "install a CJK font (Debian/Ubuntu: sudo apt install fonts-noto-cjk) and plot again\n")
