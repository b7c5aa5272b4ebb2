"""User errors and silent mistakes of ``seqmap plot``, ``seqmap toy`` and ``seqmap transcribe``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from seqmap import visualize
from seqmap.cli import main
from seqmap.config import ModelConfig
from seqmap.data.synthetic import SyntheticTask
from seqmap.training.toy import ToyConfig, _with_vocab, framed, train_toy


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1
    return err


@pytest.mark.parametrize("family", ["lm", "rnn_lm"])
def test_toy_decoder_only_families_see_the_source(family):
    # an rnn_lm ignores src: trained on the seq2seq batch it never saw the source it had to reverse
    cfg = ToyConfig(vocab=8, min_len=2, max_len=3)
    batch = SyntheticTask("reverse", 8, 2, 3).batch(4, torch.Generator().manual_seed(0))
    lm_batch = framed(batch, family, cfg.vocab)
    reference = framed(batch, "lm", cfg.vocab)
    assert lm_batch.src is None
    assert torch.equal(lm_batch.tgt_in, reference.tgt_in)
    assert torch.equal(lm_batch.tgt_out, reference.tgt_out)
    assert _with_vocab(ModelConfig(family=family), cfg).tgt_vocab == cfg.vocab + 1  # the separator


def test_toy_rnn_lm_trains_and_decodes_with_a_prompt():
    model = ModelConfig(family="rnn_lm", emb_size=8, hidden_size=8, dec_layers=1, dropout=0.0)
    cfg = ToyConfig(vocab=6, min_len=2, max_len=3, steps=2, batch_size=4, warmup=0, eval_size=5, log_every=0)
    metrics = train_toy(model, cfg, log=None)
    assert metrics["eval_size"] == 5
    assert len(metrics["losses"]) == 2


@pytest.mark.parametrize("out, says", [("adir.png", "adir.png: it is a directory"),
                                       ("afile/x.png", "afile is a file, not a directory"),
                                       ("afile/a/b.svg", "afile is a file, not a directory")])
def test_plot_out_that_cannot_be_a_file_is_one_line(tmp_path, monkeypatch, capsys, out, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir.png").mkdir()
    (tmp_path / "afile").write_text("keep me")
    assert main(["plot", "positional", "--d-model", "8", "--length", "4", "--out", out]) != 0
    assert says in _error(capsys)
    assert (tmp_path / "afile").read_text() == "keep me"


def test_plot_out_in_new_folders_is_written(tmp_path, capsys):
    out = tmp_path / "a" / "b" / "p.png"
    assert main(["plot", "positional", "--d-model", "8", "--length", "4", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("task, options, says", [
    ("speech", ["--audio", "a.wav", "--self", "encoder"], "--self cannot be used with a speech run"),
    ("speech", ["--audio", "a.wav", "--hyp", "mid", "--copy"], "--hyp, --copy cannot be used with a speech run"),
    ("speech", ["--audio", "a.wav", "--text", "hi"], "--text cannot be used with a speech run"),
    ("image", ["--image", "a.png", "--layer", "0"], "--layer cannot be used with an image classifier"),
    ("graph", ["--node", "0", "--hyp", "x"], "--hyp cannot be used with a graph run"),
    ("translation", ["--text", "hi", "--data", "g.npz"], "--data cannot be used with a text run"),
])
def test_plot_attention_rejects_options_it_would_ignore(tmp_path, monkeypatch, capsys, task, options, says):
    import seqmap.runs

    run = SimpleNamespace(cfg=SimpleNamespace(data=SimpleNamespace(task=task)))
    monkeypatch.setattr(seqmap.runs, "load_run", lambda *args: run)
    drawn = []
    for name in ("plot_speech_attention", "plot_image_attention", "plot_node_attention", "plot_run_attention"):
        monkeypatch.setattr(visualize, name, lambda *args, **kwargs: drawn.append(args))
    monkeypatch.setattr("seqmap.cli.plot.load_run_graph", lambda *args: None)
    assert main(["plot", "attention", str(tmp_path), "--out", str(tmp_path / "a.png"), *options]) != 0
    assert says in _error(capsys)
    assert drawn == []


@pytest.mark.parametrize("lines, says", [("a.wav\n\nb.wav\n", "line 2 is empty"), ("\n", "line 1 is empty")])
def test_transcribe_blank_line_in_input_list(tmp_path, capsys, lines, says):
    listing = tmp_path / "files.txt"
    listing.write_text(lines)
    assert main(["transcribe", str(tmp_path), "--input", str(listing)]) != 0
    assert f"--input {listing}: {says}; give one audio path per line" in _error(capsys)


def test_transcribe_empty_audio_argument(tmp_path, capsys):
    assert main(["transcribe", str(tmp_path), "a.wav", ""]) != 0
    assert "an AUDIO argument is empty" in _error(capsys)


def test_transcribe_non_utf8_path(tmp_path, capsys):
    assert main(["transcribe", str(tmp_path), "a\udcff.wav"]) != 0
    assert "audio path 'a\\udcff.wav' is not valid UTF-8" in _error(capsys)


@pytest.mark.parametrize("options, says", [(["--text", "  "], "--text is empty"),
                                           (["--text", "a\udcff"], "--text is not valid UTF-8"),
                                           (["--text", "hi", "--hyp", "\udcff"], "--hyp is not valid UTF-8"),
                                           (["--text", "hi", "--title", "\udcff"], "--title is not valid UTF-8")])
def test_plot_attention_text_that_is_not_text(tmp_path, monkeypatch, capsys, options, says):
    import seqmap.runs

    run = SimpleNamespace(cfg=SimpleNamespace(data=SimpleNamespace(task="translation")))
    monkeypatch.setattr(seqmap.runs, "load_run", lambda *args: run)
    drawn = []
    monkeypatch.setattr(visualize, "plot_run_attention", lambda *args, **kwargs: drawn.append(args))
    assert main(["plot", "attention", str(tmp_path), "--out", str(tmp_path / "a.png"), *options]) != 0
    assert says in _error(capsys)
    assert drawn == []


def test_plot_positional_rejects_a_run_dir(tmp_path, capsys):
    out = tmp_path / "p.png"
    assert main(["plot", "positional", str(tmp_path), "--d-model", "8", "--length", "4", "--out", str(out)]) != 0
    assert "it reads no run directory" in _error(capsys)
    assert not out.exists()


@pytest.mark.parametrize("family", ["transformer", "lm"])
def test_toy_scores_a_generated_pad_as_a_wrong_token(monkeypatch, family):
    # the reference is "a b" (3 4); a hypothesis "a <pad> b" must not be scored as "a b"
    from seqmap.decoding.greedy import GreedyResult
    from seqmap.training import toy

    def fake_greedy(model, src, src_mask, *, bos, eos, max_len, prompt=None):
        rows = (src if prompt is None else prompt).size(0)
        return GreedyResult(torch.tensor([[3, 0, 4, 2, 0]]).repeat(rows, 1), None, None, None)

    monkeypatch.setattr(toy, "greedy", fake_greedy)
    batch = SyntheticTask("copy", 5, 2, 2).batch(1, torch.Generator().manual_seed(0))
    assert toy._decode(None, batch, family, sep=5, max_len=5) == [[3, 0, 4]]
