"""``seqmap translate / generate / evaluate`` on awkward input: stdin as a file is read, arguments that are not
UTF-8, an --align-layer the model lacks, an --out that cannot be written. Untrained BPE checkpoints (seconds):
these tests check what reaches the model and what the user reads, not translation quality."""

import io
import shutil
import sys

import pytest
import torch

from seqmap.checkpoints import save_checkpoint
from seqmap.cli import main
from seqmap.config import DataConfig, ModelConfig, RunConfig, TrainConfig, to_dict
from seqmap.data.tokenizers import save_pair, train_pair
from seqmap.models.builder import build_model
from seqmap.runs import load_run

SENTENCES = ["the cat sat on the mat", "a dog ran in the park", "two birds sang a song", "ab ba abba"] * 5


def _checkpoint(root, task: str):
    tok, _ = train_pair("bpe", SENTENCES, SENTENCES, vocab_size=48, joint=True)
    family = "lm" if task == "lm" else "transformer"
    cfg = RunConfig(model=ModelConfig(family=family, src_vocab=tok.vocab_size, tgt_vocab=tok.vocab_size, d_model=16,
                                      n_heads=2, d_ff=32, enc_layers=1, dec_layers=2, dropout=0.0),
                    data=DataConfig(task=task, tokenizer="bpe", vocab_size=48), train=TrainConfig())
    torch.manual_seed(0)
    save_pair(tok, tok, root / "tok")
    return save_checkpoint(root / "ckpt", model=build_model(cfg.model), trainer_state={}, config=to_dict(cfg),
                           tokenizer_dir=root / "tok")


@pytest.fixture(scope="module")
def translation_ckpt(tmp_path_factory):
    return _checkpoint(tmp_path_factory.mktemp("cli_translation"), "translation")


@pytest.fixture(scope="module")
def lm_ckpt(tmp_path_factory):
    return _checkpoint(tmp_path_factory.mktemp("cli_lm"), "lm")


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8",
                                                       errors="surrogateescape"))


def test_stdin_is_read_as_a_file_is(translation_ckpt, monkeypatch, capsys):
    """A BOM and CRLF line ends are not part of the sentences; an empty line still gives one output line."""
    import seqmap.decoding.text as text

    decoded, real = [], text.translate_nbest
    monkeypatch.setattr(text, "translate_nbest", lambda model, sources, *a, **k: decoded.append(sources)
                        or real(model, sources, *a, **k))
    assert main(["translate", str(translation_ckpt), "the cat", "a dog", "", "ab"]) == 0
    expected = capsys.readouterr().out
    assert len(expected.splitlines()) == 4
    _stdin(monkeypatch, b"\xef\xbb\xbfthe cat\r\na dog\r\n\r\nab")
    assert main(["translate", str(translation_ckpt)]) == 0
    assert decoded[1] == decoded[0]  # the same token ids reach the model
    assert capsys.readouterr().out == expected


def test_stdin_that_is_not_utf8_is_one_line_naming_it(translation_ckpt, monkeypatch, capsys):
    _stdin(monkeypatch, b"the cat\na \xff dog\n")
    assert main(["translate", str(translation_ckpt)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("seqmap: error: stdin: line 2 is not valid UTF-8 (byte 3 of the line: b'\\xff do'); "
                            "convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8\n")


def test_arguments_that_are_not_utf8_are_one_line(translation_ckpt, lm_ckpt, capsys):
    """Bytes that are not UTF-8 reach sys.argv as lone surrogates, which SentencePiece cannot take."""
    assert main(["translate", str(translation_ckpt), "the cat", "a \udcff dog"]) == 2
    assert capsys.readouterr().err == ("seqmap: error: TEXT 2 is not valid UTF-8 (character 3 is not text); give it "
                                       "in UTF-8, e.g. convert it with iconv -t utf-8\n")
    assert main(["translate", str(translation_ckpt), "the cat", "--prefix", "\udcff"]) == 2
    assert "--prefix is not valid UTF-8 (character 1 is not text)" in capsys.readouterr().err
    assert main(["generate", str(lm_ckpt), "--prompt", "the \udcff", "--decode.max_new_tokens", "3"]) == 2
    assert "--prompt is not valid UTF-8 (character 5 is not text)" in capsys.readouterr().err


def test_an_align_layer_the_model_lacks_is_refused_before_decoding(translation_ckpt, capsys):
    assert main(["translate", str(translation_ckpt), "the cat", "--align", "--align-layer", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("seqmap: error: --align-layer 2 is out of range: the model has 2 attention layers "
                            "(use 0..1, or -1 for the last)\n")
    assert main(["translate", str(translation_ckpt), "the cat", "--align", "--align-layer", "-2"]) == 0


def test_an_out_that_cannot_be_written_is_refused_before_decoding(translation_ckpt, tmp_path, capsys):
    (tmp_path / "test.src").write_text("the cat\na dog\n")
    (tmp_path / "test.ref").write_text("the cat\na dog\n")
    files = ["--src", str(tmp_path / "test.src"), "--ref", str(tmp_path / "test.ref")]
    assert main(["evaluate", str(translation_ckpt), *files, "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: --out {tmp_path} is a directory; give a file path, e.g. "
                                       f"--out {tmp_path / 'test.hyp'}\n")
    (tmp_path / "a_file").write_text("")
    assert main(["evaluate", str(translation_ckpt), *files, "--out", str(tmp_path / "a_file" / "test.hyp")]) == 2
    assert "cannot write the hypotheses to" in capsys.readouterr().err
    assert main(["evaluate", str(translation_ckpt), *files, "--out", str(tmp_path / "new" / "dir" / "t.hyp")]) == 0
    assert (tmp_path / "new" / "dir" / "t.hyp").read_text().count("\n") == 2


def test_a_reader_that_leaves_the_pipe_early_ends_translate_quietly(translation_ckpt, tmp_path):
    """`seqmap translate ... | head -1`: exit status 141 (128 + SIGPIPE), no traceback."""
    import subprocess

    (tmp_path / "many.src").write_text("the cat sat on the mat\n" * 20000)  # more output than a pipe's buffer
    proc = subprocess.Popen([sys.executable, "-m", "seqmap", "translate", str(translation_ckpt), "--input",
                             str(tmp_path / "many.src"), "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert (proc.wait(timeout=120), err) == (141, "")
    assert first.endswith(b"\n")


def test_a_beam_wider_than_the_vocabulary_is_one_line(translation_ckpt, lm_ckpt, capsys):
    """A beam of 100,000 was killed for memory with no message; no first step can fill more than V beams."""
    assert main(["translate", str(translation_ckpt), "the cat", "--decode.beam_size", "100000"]) == 2
    assert capsys.readouterr().err == ("seqmap: error: decode.beam_size=100000 is larger than the target vocabulary "
                                       "(48 tokens); give --decode.beam_size 48 or less\n")
    assert main(["generate", str(lm_ckpt), "--prompt", "the", "--decode.beam_size", "49", "--greedy"]) == 2
    assert "decode.beam_size=49 is larger than the target vocabulary (48 tokens)" in capsys.readouterr().err
    assert main(["translate", str(translation_ckpt), "the cat", "--decode.beam_size", "48"]) == 0


@pytest.mark.parametrize("device, message", [
    ("foo", "--device 'foo' is not a device; use cpu, cuda or cuda:N\n"),
    ("meta", "--device meta holds no weights; use cpu, cuda or cuda:N\n"),
    ("cuda:99", "--device cuda:99 cannot be used here ("),  # no CUDA in this torch, no GPU, or no GPU 99
])
def test_a_device_this_machine_cannot_use_is_one_line(translation_ckpt, capsys, device, message):
    """`--device cuda` without CUDA, or a misspelt device, ended in a traceback from inside torch."""
    assert main(["translate", str(translation_ckpt), "the cat", "--device", device]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"seqmap: error: {message}")
    if device == "cuda:99":
        assert captured.err.endswith("); use --device cpu\n")


def test_quantize_int8_decodes_and_another_kind_is_one_line(translation_ckpt, capsys):
    assert main(["translate", str(translation_ckpt), "the cat", "a dog", "--quantize", "int8"]) == 0
    assert capsys.readouterr().out.count("\n") == 2
    assert main(["translate", str(translation_ckpt), "the cat", "--quantize", "int4"]) == 2
    assert capsys.readouterr().err == "seqmap: error: --quantize 'int4' is not supported; use one of none, int8\n"


def test_a_run_without_a_checkpoint_or_with_an_outdated_config_is_one_line(translation_ckpt, tmp_path, capsys):
    (tmp_path / "started").mkdir()  # a run that stopped before its first checkpoint
    assert main(["translate", str(tmp_path / "started"), "the cat"]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: {tmp_path / 'started'} holds no checkpoint (looked in "
                                       f"{tmp_path / 'started' / 'checkpoints'}); train first with `seqmap train "
                                       f"CONFIG --run-dir {tmp_path / 'started'}`\n")
    (tmp_path / "ct2").mkdir()
    (tmp_path / "ct2" / "model.bin").write_bytes(b"")  # an export given where its run goes
    assert main(["translate", str(tmp_path / "ct2"), "the cat"]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: {tmp_path / 'ct2'} is a CTranslate2 model, not a run "
                                       f"directory: give the run it came from and this folder as --ct2 "
                                       f"{tmp_path / 'ct2'}\n")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    assert main(["translate", str(tmp_path / "hf"), "the cat"]) == 2
    assert "is a Hugging Face model folder, not a run directory: import it first with `seqmap import hf" in (
        capsys.readouterr().err)
    old = tmp_path / "old"
    shutil.copytree(translation_ckpt, old)
    config = (old / "config.yaml").read_text()
    (old / "config.yaml").write_text(config.replace("decode:\n", "decode:\n  beam_width: 4\n"))  # an option renamed
    assert main(["translate", str(old), "the cat"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"seqmap: error: {old / 'config.yaml'}: unknown option 'decode.beam_width'; did you mean "
                          "decode.beam_size?") and err.count("\n") == 1


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_no_sentences_or_two_sources_of_them_is_one_line(translation_ckpt, tmp_path, monkeypatch, capsys):
    """Without TEXT or --input, stdin is read unless it is the terminal (a user who forgot the input)."""
    monkeypatch.setattr(sys, "stdin", _Terminal())
    assert main(["translate", str(translation_ckpt)]) == 2
    assert capsys.readouterr().err == ("seqmap: error: nothing to translate: give TEXT arguments, --input FILE, or "
                                       "pipe sentences into stdin\n")
    (tmp_path / "in.txt").write_text("the cat\n")
    assert main(["translate", str(translation_ckpt), "a dog", "--input", str(tmp_path / "in.txt")]) == 2
    assert capsys.readouterr().err == "seqmap: error: give sentences as arguments or --input FILE, not both\n"


def test_sentences_that_look_like_options_follow_a_double_dash(translation_ckpt, monkeypatch, capsys):
    """After `--` a token is a sentence, even `-x` or `--decode.beam_size` (an override before it)."""
    import seqmap.decoding.text as text

    decoded, real = [], text.translate_nbest
    monkeypatch.setattr(text, "translate_nbest", lambda model, sources, decode, *a, **k: decoded.append(
        (sources, decode.beam_size)) or real(model, sources, decode, *a, **k))
    assert main(["translate", str(translation_ckpt), "--decode.beam_size", "2", "--", "-the cat",
                 "--decode.beam_size", "3"]) == 0
    assert capsys.readouterr().out.count("\n") == 3
    run = load_run(translation_ckpt)
    (sources, beam), = decoded
    assert beam == 2 and sources == [run.src_tok.encode(t) for t in ("-the cat", "--decode.beam_size", "3")]


def test_evaluate_needs_a_translation_run_and_both_files(translation_ckpt, lm_ckpt, tmp_path, capsys):
    (tmp_path / "a.txt").write_text("the cat\n")
    assert main(["evaluate", str(lm_ckpt), "--src", str(tmp_path / "a.txt"), "--ref", str(tmp_path / "a.txt")]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: --src is for translation runs; {lm_ckpt} is a language "
                                       "model: leave out --src\n")
    assert main(["evaluate", str(translation_ckpt), "--src", str(tmp_path / "a.txt")]) == 2
    assert capsys.readouterr().err == ("seqmap: error: give --src FILE and --ref FILE together, or neither to score "
                                       "the run's own --split (default: test)\n")
