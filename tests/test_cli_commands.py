"""The `data` and `plot` commands through the CLI entry point (the training commands: tests/training)."""

from pathlib import Path

import pytest
from matplotlib.image import imread

from seqmap.cli import main

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def test_data_list_names_every_corpus(capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("multi30k", "ptb", "tatoeba-en-zh", "tinyshakespeare"):
        assert name in out
    assert main(["data", "list", "extra"]) == 2  # was ignored without a word
    assert capsys.readouterr().err == ("seqmap: error: seqmap data list takes no NAME (got 'extra'); it lists every "
                                       "dataset\n")


@pytest.mark.skipif(not (SHARED / "ptb").is_dir(), reason="the shared PTB copy is not next to the repository")
def test_data_prepare_from_a_local_copy(tmp_path, capsys):
    assert main(["data", "prepare", "ptb", "--from", str(SHARED / "ptb"), "--dest", str(tmp_path / "ptb")]) == 0
    assert (tmp_path / "ptb" / "train.txt").read_text().count("\n") == 42068
    assert "ready" in capsys.readouterr().out


def test_data_errors_are_one_line(tmp_path, capsys):
    assert main(["data", "prepare", "ptb", "--from", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err
    assert main(["data", "download", "multi31k"]) == 2
    assert "multi30k" in capsys.readouterr().err  # the nearest name
    assert main(["data", "prepare", "ptb"]) == 2
    assert "--from" in capsys.readouterr().err


def test_plot_positional_writes_an_image(tmp_path):
    out = tmp_path / "positional.png"
    assert main(["plot", "positional", "--d-model", "32", "--length", "40", "--out", str(out)]) == 0
    image = imread(out)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_plot_needs_its_arguments(tmp_path, capsys):
    assert main(["plot", "curves", "--out", str(tmp_path / "c.png")]) == 2
    assert "RUN_DIR" in capsys.readouterr().err
    assert main(["plot", "attention", str(tmp_path), "--out", str(tmp_path / "a.png")]) == 2
    assert capsys.readouterr().err == ("seqmap: error: seqmap plot attention needs --text SENTENCE (an image "
                                       "classifier: --image FILE; a graph run: --node ID; a speech run: --audio "
                                       "FILE)\n")
    # the hypothesis plot attention decodes follows the run's decode config: an override was ignored
    assert main(["plot", "attention", str(tmp_path), "--text", "x", "--decode.beam_size", "4", "--out",
                 str(tmp_path / "a.png")]) == 2
    assert capsys.readouterr().err == ("seqmap: error: seqmap plot takes no --SECTION.KEY options; leave out "
                                       "--decode.beam_size\n")
    assert main(["plot", "curves", str(tmp_path), "--out", str(tmp_path / "c.png")]) == 2
    assert "metrics.jsonl" in capsys.readouterr().err


def test_run_commands_accept_only_decode_overrides(tmp_path, capsys):
    import torch

    from seqmap.checkpoints import save_checkpoint
    from seqmap.config import DataConfig, ModelConfig, RunConfig, TrainConfig, to_dict
    from seqmap.data.tokenizers import train_pair
    from seqmap.models.builder import build_model

    src, tgt = train_pair("char", ["abc"], ["abc"], joint=True)
    cfg = RunConfig(model=ModelConfig(src_vocab=src.vocab_size, tgt_vocab=src.vocab_size, d_model=16, n_heads=2,
                                      d_ff=32, enc_layers=1, dec_layers=1),
                    data=DataConfig(tokenizer="char"), train=TrainConfig())
    torch.manual_seed(0)
    tok_dir = tmp_path / "tok"
    src.save(tok_dir)
    ckpt = save_checkpoint(tmp_path / "ckpt", model=build_model(cfg.model), trainer_state={}, config=to_dict(cfg),
                           tokenizer_dir=tok_dir)
    assert main(["translate", str(ckpt), "abc", "--model.d_model", "8"]) == 2
    assert "only --decode.* options" in capsys.readouterr().err
    assert main(["translate", str(ckpt), "abc", "--decode.beam_sise", "2"]) == 2
    assert "did you mean decode.beam_size" in capsys.readouterr().err
    assert main(["translate", str(ckpt), "abc", "--decode.beam_size", "2", "--decode.max_len_b", "3"]) == 0


@pytest.mark.parametrize("args, message", [
    (["train", "CONFIG", "--init", "A", "--resume", "B"],
     "--init starts a new run from another run's weights; --resume continues a run: give one"),
    (["train", "CONFIG", "--resume", "TMP"], "give either CONFIG or --resume RUN_DIR (a resumed run reads "
                                             "RUN_DIR/config.yaml)"),
    (["train", "--resume", "TMP"], "--resume TMP: no config.yaml there; is it a run directory?"),
    (["train"], "give a CONFIG file to train, or --resume RUN_DIR to continue a run"),
    (["train", "CONFIG", "--threads", "0"], "--threads must be > 0, got 0"),
    (["data", "download"], "seqmap data download needs a dataset NAME (see `seqmap data list`)"),
    (["average", "TMP", "--out", "TMP/avg"], "give at least two checkpoint directories to average"),
])
def test_usage_mistakes_are_one_line_before_any_work(tmp_path, capsys, args, message):
    args = [str(tmp_path) if a == "TMP" else a.replace("TMP", str(tmp_path)) for a in args]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"seqmap: error: {message.replace('TMP', str(tmp_path))}\n"
    assert list(tmp_path.iterdir()) == []
