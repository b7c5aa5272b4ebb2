"""Every plot renders to PNG and SVG: a PNG of the pixel size the figure declares, an SVG with its labels as text."""

import json
import math
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch

from seqmap.config import DataConfig, ModelConfig, RunConfig
from seqmap.data.tokenizers import train_tokenizer
from seqmap.decoding.align import NoAttentionError, copy_attention, forced_attention
from seqmap.models.builder import build_model
from seqmap.nn.positional import sinusoidal_table
from seqmap.runs import LoadedRun
from seqmap.visualize import fonts as fonts_module
from seqmap.visualize import plot_attention, plot_curves, plot_positional, plot_run_attention
from seqmap.visualize.attention import MAX_INCHES, MAX_PIXELS, attention_figure_size, label_width
from seqmap.visualize.curves import curves_figure_size, series
from seqmap.visualize.positional import positional_figure_size, rope_angles

SRC = ["ein", "kleines", "Haus", "."]
TGT = ["a", "small", "house", ".", "</s>"]


def png_shape(path: Path) -> tuple[int, int]:
    return matplotlib.image.imread(path).shape[:2]


def expected_pixels(width: float, height: float, dpi: int) -> tuple[int, int]:
    return round(height * dpi), round(width * dpi)


def svg_texts(path: Path) -> list[str]:
    root = ET.parse(path).getroot()  # parses as XML
    return ["".join(el.itertext()) for el in root.iter() if el.tag.endswith("}text")]


def heatmaps(fig) -> list:
    return [ax for ax in fig.axes if ax.get_label() == "attention"]


def random_attention(*shape) -> torch.Tensor:
    return torch.softmax(torch.randn(*shape), dim=-1)


# -- attention ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_one_attention_map_renders(tmp_path, suffix):
    weights = random_attention(len(TGT), len(SRC))
    path = tmp_path / f"attn{suffix}"
    fig = plot_attention(weights, SRC, TGT, path, title="one map")
    assert len(heatmaps(fig)) == 1
    width, height, dpi = attention_figure_size(len(SRC), len(TGT), 1, 1, label_width(SRC), label_width(TGT))
    assert tuple(fig.get_size_inches()) == (width, height) and fig.dpi == dpi
    np.testing.assert_allclose(heatmaps(fig)[0].images[0].get_array(), weights.numpy())
    if suffix == ".png":
        assert png_shape(path) == expected_pixels(width, height, dpi)
    else:
        texts = svg_texts(path)
        assert all(token in texts for token in SRC + TGT) and "one map" in texts


@pytest.mark.parametrize("layer, head, panels", [(None, None, 2 * 3), (1, None, 3), (-1, None, 3), (None, 2, 2),
                                                 (0, 1, 1), (None, "mean", 2)])
def test_attention_grid_has_a_panel_per_layer_and_head(tmp_path, layer, head, panels):
    weights = random_attention(2, 3, len(TGT), len(SRC))  # (L, H, T, S)
    fig = plot_attention(weights, SRC, TGT, tmp_path / "grid.png", layer=layer, head=head)
    assert len(heatmaps(fig)) == panels
    rows = 2 if layer is None else 1
    cols = panels // rows
    width, height, dpi = attention_figure_size(len(SRC), len(TGT), rows, cols, label_width(SRC), label_width(TGT))
    assert png_shape(tmp_path / "grid.png") == expected_pixels(width, height, dpi)
    if layer is not None and head not in (None, "mean"):
        np.testing.assert_allclose(heatmaps(fig)[0].images[0].get_array(), weights[layer, head].numpy())


def test_grid_svg_titles_name_layer_and_head(tmp_path):
    fig = plot_attention(random_attention(2, 3, len(TGT), len(SRC)), SRC, TGT, tmp_path / "grid.svg")
    texts = svg_texts(tmp_path / "grid.svg")
    assert len(heatmaps(fig)) == 6
    assert {f"layer {i} head {h}" for i in range(2) for h in range(3)} <= set(texts)
    assert all(token in texts for token in SRC + TGT)


def test_attention_figure_grows_with_tokens_and_keeps_its_pixel_budget(tmp_path):
    small = attention_figure_size(4, 5)
    large = attention_figure_size(40, 30)
    assert large[0] > small[0] and large[1] > small[1]
    huge = attention_figure_size(300, 200, rows=2, cols=4)
    assert huge[2] < small[2] and max(huge[0], huge[1]) * huge[2] <= MAX_PIXELS
    for width, height, dpi in (small, large, huge):  # whole pixels: quarter inches times a dpi divisible by 4
        assert dpi % 4 == 0 and (width * dpi).is_integer() and (height * dpi).is_integer()


def test_crowded_panels_label_every_kth_token(tmp_path):
    src, tgt = [f"s{i}" for i in range(60)], [f"t{i}" for i in range(4)]
    fig = plot_attention(random_attention(1, 8, 4, 60), src, tgt, tmp_path / "wide.png")  # 8 heads side by side
    width, height, dpi = attention_figure_size(60, 4, 1, 8, 3, 2)
    assert width <= MAX_INCHES and png_shape(tmp_path / "wide.png") == expected_pixels(width, height, dpi)
    shown = [t.get_text() for t in heatmaps(fig)[0].get_xticklabels()]
    assert shown == src[::2]  # about 7 inches per panel: 60 labels would overlap
    fig = plot_attention(random_attention(4, 60), src, tgt, tmp_path / "one.png")
    assert [t.get_text() for t in heatmaps(fig)[0].get_xticklabels()] == src  # 15 inches: every label


def test_labels_stay_literal(tmp_path):
    plot_attention(random_attention(3, 3), ["$x$", " ", "▁the"], ["a", "b", "c"], tmp_path / "labels.svg")
    texts = svg_texts(tmp_path / "labels.svg")
    assert "$x$" in texts and "␣" in texts and "▁the" in texts  # no mathtext; whitespace made visible


def test_attention_input_errors(tmp_path):
    weights = random_attention(len(TGT), len(SRC))
    with pytest.raises(ValueError, match="5 output x 4 source tokens, but 5 output and 3 source labels"):
        plot_attention(weights, SRC[:3], TGT, tmp_path / "a.png")
    with pytest.raises(ValueError, match=r"use one of \.png, \.svg"):
        plot_attention(weights, SRC, TGT, tmp_path / "a.jpg")
    with pytest.raises(ValueError, match="layer 2 is out of range: the attention has 2 layers"):
        plot_attention(random_attention(2, 1, 5, 4), SRC, TGT, tmp_path / "a.png", layer=2)
    with pytest.raises(ValueError, match=r"\(T, S\) or \(L, H, T, S\)"):
        plot_attention(random_attention(2, 5, 4), SRC, TGT, tmp_path / "a.png")
    with pytest.raises(NoAttentionError, match="no attention"):
        plot_attention(None, SRC, TGT, tmp_path / "a.png")
    assert not list(tmp_path.iterdir())


def test_missing_glyphs_warn_once(tmp_path, monkeypatch):
    monkeypatch.setattr(fonts_module, "_families", dict)  # as on a machine without CJK fonts
    monkeypatch.setattr(fonts_module, "_add_new_system_fonts", lambda: False)
    monkeypatch.setattr(fonts_module, "_warned_missing", False)
    weights = random_attention(2, 2)
    with pytest.warns(UserWarning, match="no installed font has the characters '你好'"):
        plot_attention(weights, ["你", "好"], ["a", "b"], tmp_path / "zh.png")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither our warning nor matplotlib's per-glyph ones again
        plot_attention(weights, ["你", "好"], ["a", "b"], tmp_path / "zh2.png")
    assert png_shape(tmp_path / "zh2.png") == expected_pixels(*attention_figure_size(2, 2, 1, 1, 2, 1))


# -- attention of a loaded run -----------------------------------------------------------------------------------

def tiny_run(family="transformer", **overrides) -> LoadedRun:
    tok = train_tokenizer("word", ["ein kleines Haus .", "a small house ."])
    cfg = dict(family=family, src_vocab=tok.vocab_size, tgt_vocab=tok.vocab_size, d_model=16, n_heads=2, d_ff=32,
               enc_layers=1, dec_layers=2, dropout=0.0, emb_size=8, hidden_size=8)
    cfg.update(overrides)
    model_cfg = ModelConfig(**cfg)
    lm = family == "lm"
    run_cfg = RunConfig(model=model_cfg, data=DataConfig(task="lm" if lm else "translation"))
    return LoadedRun(run_cfg, build_model(model_cfg).eval(), None if lm else tok, tok, Path("."), torch.device("cpu"))


def test_run_cross_attention_of_a_given_hypothesis(tmp_path):
    run = tiny_run()
    fig = plot_run_attention(run, "ein kleines Haus .", tmp_path / "run.svg", hypothesis="a small house .", layer=-1)
    assert len(heatmaps(fig)) == 2  # the 2 heads of the last layer
    expected = forced_attention(run.model, run.src_tok.encode("ein kleines Haus ."),
                                run.tgt_tok.encode("a small house ."))[-1, 0]
    np.testing.assert_allclose(heatmaps(fig)[0].images[0].get_array(), expected.numpy())
    texts = svg_texts(tmp_path / "run.svg")
    assert all(token in texts for token in SRC + TGT)


def test_run_cross_attention_of_its_own_translation(tmp_path):
    fig = plot_run_attention(tiny_run(), "ein Haus", tmp_path / "run.png")
    rows = heatmaps(fig)[0].images[0].get_array().shape[0]
    assert len(heatmaps(fig)) == 2 * 2 and rows >= 1  # every layer x head; rows = translation + EOS


def test_run_encoder_and_decoder_self_attention(tmp_path):
    run = tiny_run(enc_layers=2)
    fig = plot_run_attention(run, "ein kleines Haus .", tmp_path / "enc.png", which="encoder")
    assert len(heatmaps(fig)) == 2 * 2 and heatmaps(fig)[0].images[0].get_array().shape == (4, 4)
    fig = plot_run_attention(run, "ein Haus", tmp_path / "dec.svg", hypothesis="a house", which="decoder")
    maps = [ax.images[0].get_array() for ax in heatmaps(fig)]
    assert len(maps) == 2 * 2 and maps[0].shape == (3, 3)  # BOS + "a house": every layer x head, causal
    assert np.all(np.triu(maps[0], k=1) == 0)
    assert {"<s>", "a", "house"} <= set(svg_texts(tmp_path / "dec.svg"))
    with pytest.raises(ValueError, match="choose one of cross, encoder, decoder"):
        plot_run_attention(run, "ein Haus", tmp_path / "x.png", which="self")


def test_run_copy_head_attention_with_p_gen_per_output(tmp_path):
    run = tiny_run(copy=True, share_vocab=True)
    fig = plot_run_attention(run, "ein kleines Haus .", tmp_path / "copy.svg", hypothesis="a small house .",
                             which="copy")
    weights, p_gen = copy_attention(run.model, run.src_tok.encode("ein kleines Haus ."),
                                    run.tgt_tok.encode("a small house ."))
    assert len(heatmaps(fig)) == 1 and weights.shape == (5, 4)  # 4 outputs + EOS over 4 source tokens
    np.testing.assert_allclose(heatmaps(fig)[0].images[0].get_array(), weights.numpy())
    texts = svg_texts(tmp_path / "copy.svg")
    assert f"small ({p_gen[1]:.2f})" in texts and all(token in texts for token in SRC)
    with pytest.raises(NoAttentionError, match="no copy head"):
        plot_run_attention(tiny_run(), "ein Haus", tmp_path / "x.png", hypothesis="a house", which="copy")


def test_run_attention_reads_the_source_up_to_data_max_src_len(tmp_path):
    run = tiny_run()
    run.cfg.data.max_src_len = 2
    fig = plot_run_attention(run, "ein kleines Haus .", tmp_path / "cut.svg", hypothesis="a house", layer=-1)
    assert heatmaps(fig)[0].images[0].get_array().shape == (3, 2)  # "ein kleines" only, as translate reads it
    texts = svg_texts(tmp_path / "cut.svg")
    assert "kleines" in texts and "Haus" not in texts


def test_run_language_model_plots_its_self_attention(tmp_path):
    fig = plot_run_attention(tiny_run("lm", src_vocab=0), "a small house", tmp_path / "lm.svg", head="mean")
    maps = [ax.images[0].get_array() for ax in heatmaps(fig)]
    assert len(maps) == 2 and maps[0].shape == (4, 4)  # BOS + 3 tokens, per layer
    assert np.all(np.triu(maps[0], k=1) == 0)
    assert {"<s>", "a", "small", "house"} <= set(svg_texts(tmp_path / "lm.svg"))


def test_run_classifier_plots_its_self_attention_with_the_class_token(tmp_path):
    """A text classifier has one attention, its encoder's: both kinds plot it with <cls> first and the prediction in
    the title; the text is read up to data.max_len as the classifier reads it; it has no decoder."""
    from seqmap.data.labels import LabelSet
    from seqmap.data.pipeline import classification_ids

    tok = train_tokenizer("word", ["red green blue a b c"])
    model_cfg = ModelConfig(family="classifier", src_vocab=tok.vocab_size, tgt_vocab=tok.vocab_size, d_model=16,
                            n_heads=2, d_ff=32, enc_layers=2, dropout=0.0, n_classes=3)
    torch.manual_seed(0)
    run = LoadedRun(RunConfig(model=model_cfg, data=DataConfig(task="classification", max_len=3)),
                    build_model(model_cfg).eval(), tok, tok, Path("."), torch.device("cpu"),
                    LabelSet(("blue", "green", "red")))
    fig = plot_run_attention(run, "a red b c", tmp_path / "cls.svg", layer=-1, head=0)
    ids = classification_ids(tok, "a red b c", 3)
    assert ids == tok.encode("a red b")  # the first max_len tokens
    expected = run.model.encoder_attention(torch.tensor([ids]), None)[0, -1, 0]
    (panel,) = heatmaps(fig)
    np.testing.assert_allclose(panel.images[0].get_array(), expected.detach().numpy(), rtol=1e-6)
    with torch.no_grad():
        predicted = run.labels.decode(int(run.model(torch.tensor([ids]), None).argmax(-1)))
    assert fig.get_suptitle() == f"self-attention, layer -1, head 0, predicted: {predicted}"
    texts = svg_texts(tmp_path / "cls.svg")
    assert {"<cls>", "a", "red", "b"} <= set(texts) and "c" not in texts
    with pytest.raises(NoAttentionError, match="a classifier has no decoder"):
        plot_run_attention(run, "a red", tmp_path / "x.png", which="decoder")
    with pytest.raises(NoAttentionError, match=r"a language model has no encoder; plot its self-attention"):
        plot_run_attention(tiny_run("lm", src_vocab=0), "a small house", tmp_path / "x.png", which="encoder")


def test_run_convs2s_plots_a_panel_per_decoder_layer(tmp_path):
    """ConvS2S attends to the source in every decoder layer, with one head: a column of panels titled by layer."""
    run = tiny_run("convs2s", dec_layers=3)
    fig = plot_run_attention(run, "ein kleines Haus .", tmp_path / "c.svg", hypothesis="a small house .")
    expected = forced_attention(run.model, run.src_tok.encode("ein kleines Haus ."),
                                run.tgt_tok.encode("a small house ."))  # (L, 1, T, S)
    assert expected.shape == (3, 1, 5, 4) and len(heatmaps(fig)) == 3
    for panel, weights in zip(heatmaps(fig), expected[:, 0], strict=True):
        np.testing.assert_allclose(panel.images[0].get_array(), weights.numpy())
    assert [ax.get_title() for ax in heatmaps(fig)] == ["layer 0", "layer 1", "layer 2"]
    fig = plot_run_attention(run, "ein kleines Haus .", tmp_path / "last.png", hypothesis="a small house .", layer=-1)
    assert len(heatmaps(fig)) == 1
    with pytest.raises(NoAttentionError, match="ConvS2S has no encoder self-attention"):
        plot_run_attention(run, "ein Haus", tmp_path / "x.png", which="encoder")
    with pytest.raises(NoAttentionError, match="ConvS2S has no decoder self-attention"):
        plot_run_attention(run, "ein Haus", tmp_path / "x.png", hypothesis="a house", which="decoder")


def test_the_plot_command_writes_a_convs2s_figure(tmp_path, capsys):
    """`seqmap plot attention` on a ConvS2S checkpoint (its own config and tokenizer) writes the figure."""
    from seqmap.checkpoints import save_checkpoint
    from seqmap.cli import main
    from seqmap.config import to_dict

    run = tiny_run("convs2s", dec_layers=2)
    run.tgt_tok.save(tmp_path / "tok")
    save_checkpoint(tmp_path / "ckpt", model=run.model, trainer_state={}, config=to_dict(run.cfg),
                    tokenizer_dir=tmp_path / "tok")
    out = tmp_path / "attention.png"
    assert main(["plot", "attention", str(tmp_path / "ckpt"), "--text", "ein kleines Haus", "--hyp", "a small house",
                 "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    layout = attention_figure_size(3, 4, 2, 1, label_width(["kleines"]), label_width(["small"]))
    assert png_shape(out) == expected_pixels(*layout)  # a column of 2 panels: 3 source x 4 output tokens each


def test_run_without_attention_says_so(tmp_path):
    run = tiny_run("rnn", rnn_attention="none", enc_layers=1, dec_layers=1)
    with pytest.raises(NoAttentionError, match="the model has no attention to plot"):
        plot_run_attention(run, "ein Haus", tmp_path / "rnn.png", hypothesis="a house")
    with pytest.raises(NoAttentionError, match="no encoder self-attention"):
        plot_run_attention(run, "ein Haus", tmp_path / "rnn.png", which="encoder")


# -- a Vision Transformer's attention over its image -------------------------------------------------------------

def tiny_vit_run(pooling: str = "cls") -> LoadedRun:
    from seqmap.data.labels import LabelSet

    model_cfg = ModelConfig(family="vit", image_channels=1, image_height=8, image_width=8, patch_size=4, n_classes=3,
                            d_model=16, n_heads=2, d_ff=32, enc_layers=2, dropout=0.0, pooling=pooling,
                            positional="learned", max_len=8)
    torch.manual_seed(0)
    return LoadedRun(RunConfig(model=model_cfg, data=DataConfig(task="image")),
                     build_model(model_cfg).eval(), None, None, Path("."), torch.device("cpu"),
                     LabelSet(("left", "middle", "right")))


def write_png(path: Path) -> Path:
    from PIL import Image

    pixels = np.zeros((8, 8), np.uint8)
    pixels[:, 3:5] = 255  # a bright bar in the middle
    Image.fromarray(pixels, mode="L").save(path)
    return path


def test_image_attention_draws_the_image_its_rollout_and_the_last_layer(tmp_path):
    from seqmap.data.images import read_image_file
    from seqmap.visualize import plot_image_attention
    from seqmap.visualize.image_attention import cls_maps

    run = tiny_vit_run()
    image = write_png(tmp_path / "bar.png")
    fig = plot_image_attention(run, image, tmp_path / "a.png", head=1)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["image", "attention rollout", "last layer, CLS row (head 1)"]
    x = read_image_file(image, "L", (8, 8))[None]
    with torch.no_grad():
        probs = run.model(x, None).softmax(-1)[0]
        rolled, last = cls_maps(run.model.encoder_attention(x, None)[0], (2, 2), head=1)
    k = int(probs.argmax())
    assert fig.get_suptitle() == f"bar.png: predicted {run.labels.decode(k)} ({probs[k]:.3f})"
    np.testing.assert_allclose(panels[1].images[1].get_array(), rolled.numpy(), rtol=1e-6)
    np.testing.assert_allclose(panels[2].images[1].get_array(), last.numpy(), rtol=1e-6)
    assert abs(float(rolled.sum()) - 1.0) < 1e-5 and abs(float(last.sum()) - 1.0) < 1e-5
    assert png_shape(tmp_path / "a.png") == (round(fig.get_figheight() * fig.dpi), round(fig.get_figwidth() * fig.dpi))


def test_image_attention_errors_say_what_to_change(tmp_path):
    from seqmap.visualize import plot_image_attention
    from seqmap.visualize.image_attention import cls_maps

    image = write_png(tmp_path / "bar.png")
    with pytest.raises(ValueError, match=r"this run pools by mean \(model.pooling=mean\)"):
        plot_image_attention(tiny_vit_run("mean"), image, tmp_path / "a.png")
    with pytest.raises(ValueError, match="--head must be in 0..1, got 2"):
        plot_image_attention(tiny_vit_run(), image, tmp_path / "a.png", head=2)
    with pytest.raises(ValueError, match=r"expected 4 patches and a class token \(5 positions\), got 6"):
        cls_maps(torch.rand(2, 2, 6, 6), (2, 2))
    assert not (tmp_path / "a.png").exists()


# -- a speech model's alignment over its spectrogram ----------------------------------------------------------------

def test_speech_attention_draws_the_spectrogram_above_the_greedy_alignment(tmp_path):
    """An untrained speech model: the plot shows what greedy decoding attended, token rows, on the audio's seconds."""
    soundfile = pytest.importorskip("soundfile", reason="the speech extra is not installed")
    pytest.importorskip("librosa", reason="the speech extra is not installed")
    from seqmap.config import DecodeConfig
    from seqmap.decoding.speech import transcribe_nbest
    from seqmap.visualize import plot_speech_attention

    tok = train_tokenizer("char", ["one two three"])
    model_cfg = ModelConfig(family="speech", sample_rate=8000, tgt_vocab=tok.vocab_size, d_model=16, n_heads=2,
                            d_ff=32, enc_layers=1, dec_layers=2, n_mels=16, conv_channels=4, dropout=0.0)
    torch.manual_seed(0)
    decode = DecodeConfig(beam_size=4, max_len_a=0.0, max_len_b=5)
    run = LoadedRun(RunConfig(model=model_cfg, data=DataConfig(task="speech"), decode=decode),
                    build_model(model_cfg).eval(), None, tok, Path("."), torch.device("cpu"))
    wave = (0.3 * np.random.default_rng(0).standard_normal(4000)).astype(np.float32)  # half a second
    soundfile.write(tmp_path / "u.wav", wave, 8000, subtype="FLOAT")
    fig = plot_speech_attention(run, tmp_path / "u.wav", tmp_path / "a.png", layer=0, head=1)
    greedy = transcribe_nbest(run.model, [wave], DecodeConfig(beam_size=1, max_len_a=0.0, max_len_b=5),
                              need_attention=True)[0][0]
    spectrogram, alignment = fig.axes[0], fig.axes[1]
    rows = [t.get_text() for t in alignment.get_yticklabels()]
    assert rows == [*tok.pieces(greedy.output), "</s>"][:len(rows)] and len(rows) >= 1
    np.testing.assert_allclose(alignment.images[0].get_array(), greedy.attention[0, 1, :len(rows)].numpy(),
                               rtol=1e-5, atol=1e-6)
    assert alignment.get_xlim() == (0.0, 0.5) and spectrogram.images[0].get_array().shape[0] == 16  # mel bands
    assert fig.get_suptitle() == f'u.wav: "{tok.decode(greedy.output)}" (cross-attention, layer 0, head 1)'
    assert (tmp_path / "a.png").stat().st_size > 0


# -- curves ------------------------------------------------------------------------------------------------------

def metrics_rows(valid: bool = True) -> list[dict]:
    rows = []
    for step in range(1, 101, 10):
        loss = 5 * math.exp(-step / 40) + 1
        rows.append({"kind": "train", "step": step, "loss": loss, "nll": loss, "ppl": math.exp(loss),
                     "lr": 1e-3 * min(1, step / 30)})
        if valid and step % 30 == 1 and step > 1:
            rows.append({"kind": "valid", "step": step, "loss": loss + 0.2, "ppl": math.exp(loss + 0.2),
                         "bleu": step / 5, "chrf": step / 3, "bleu_signature": "nrefs:1"})
    if valid:
        rows.append({"kind": "test", "step": 91, "loss": 1.5, "ppl": 4.5, "bleu": 20.0, "chrf": 40.0})
    return rows


def write_metrics(run_dir: Path, rows: list[dict], tail: str = "") -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows) + tail
    (run_dir / "metrics.jsonl").write_text(text, encoding="utf-8")
    return run_dir


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_curves_with_validation(tmp_path, suffix):
    run_dir = write_metrics(tmp_path / "run", metrics_rows())
    fig = plot_curves(run_dir, tmp_path / f"curves{suffix}")
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss", "learning rate", "perplexity", "BLEU / chrF"]
    width, height, dpi = curves_figure_size(4)
    assert tuple(fig.get_size_inches()) == (width, height)
    if suffix == ".png":
        assert png_shape(tmp_path / "curves.png") == expected_pixels(width, height, dpi)
    else:
        texts = svg_texts(tmp_path / "curves.svg")
        assert {"train loss", "valid loss", "test loss", "valid BLEU", "valid chrF", "test BLEU", "step"} <= set(texts)


def test_curves_without_validation_and_from_rows(tmp_path):
    rows = metrics_rows(valid=False)
    fig = plot_curves(rows, tmp_path / "train_only.png")
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss", "learning rate", "perplexity"]
    assert png_shape(tmp_path / "train_only.png") == expected_pixels(*curves_figure_size(3))
    steps, losses = fig.axes[0].lines[0].get_data()
    np.testing.assert_allclose(steps, [r["step"] for r in rows])
    np.testing.assert_allclose(losses, [r["loss"] for r in rows])


def task_rows(scores: dict[str, float], test: bool = True) -> list[dict]:
    """Train rows as every task logs them, valid rows with loss and ``scores`` (rising with the step), a test row."""
    rows = [{"kind": "train", "step": step, "loss": 2.0, "nll": 2.0, "ppl": math.exp(2.0), "lr": 1e-3}
            for step in (10, 20, 30, 40)]
    for step in (20, 40):
        rows.append({"kind": "valid", "step": step, "loss": 2.1, **{k: v + step for k, v in scores.items()},
                     "train_minutes": 0.5})
    if test:
        rows.append({"kind": "test", "step": 40, "loss": 2.2, **scores})
    return rows


def drawn(ax) -> dict[str, tuple[list, list]]:
    """The lines of a curves panel by legend label: (steps, values)."""
    return {line.get_label(): tuple(np.asarray(data).tolist() for data in line.get_data()) for line in ax.lines}


def test_curves_of_a_speech_run_draw_wer_and_string_accuracy(tmp_path):
    # what the speech task's validate logs: loss, ppl, tokens, wer, string_accuracy; the test row has them too
    rows = task_rows({"ppl": 8.0, "tokens": 300, "wer": 10.0, "string_accuracy": 50.0})
    fig = plot_curves(write_metrics(tmp_path / "asr", rows), tmp_path / "c.svg")
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss", "learning rate", "perplexity", "WER (%)",
                                                    "string accuracy (%)"]
    wer, acc = drawn(fig.axes[3]), drawn(fig.axes[4])
    assert wer == {"valid WER": ([20.0, 40.0], [30.0, 50.0]), "test WER": ([40.0], [10.0])}
    assert acc == {"valid string accuracy": ([20.0, 40.0], [70.0, 90.0]), "test string accuracy": ([40.0], [50.0])}
    assert [t.get_text() for t in fig.axes[3].get_legend().get_texts()] == ["valid WER", "test WER"]
    assert fig.axes[-1].get_xlabel() == "step"


def test_curves_of_a_classifier_draw_accuracy_and_macro_f1(tmp_path):
    # classification_scores(): loss, accuracy, macro_f1, examples, for text, image and graph runs alike
    rows = task_rows({"accuracy": 50.0, "macro_f1": 40.0, "examples": 100})
    fig = plot_curves(rows, tmp_path / "c.png")
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss", "learning rate", "perplexity", "accuracy / macro-F1 (%)"]
    assert drawn(fig.axes[3]) == {"valid accuracy": ([20.0, 40.0], [70.0, 90.0]),
                                  "valid macro-F1": ([20.0, 40.0], [60.0, 80.0]),
                                  "test accuracy": ([40.0], [50.0]), "test macro-F1": ([40.0], [40.0])}


@pytest.mark.parametrize("scores", [{"wer": 10.0, "string_accuracy": 50.0}, {"accuracy": 50.0, "macro_f1": 40.0}])
def test_curves_before_the_first_validation_draw_the_train_rows(tmp_path, scores):
    rows = [row for row in task_rows(scores, test=False) if row["kind"] == "train"]
    fig = plot_curves(write_metrics(tmp_path / "run", rows), tmp_path / "c.png")
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss", "learning rate", "perplexity"]
    assert drawn(fig.axes[0]) == {"train loss": ([10.0, 20.0, 30.0, 40.0], [2.0] * 4)}


def test_curves_of_a_translation_run_draw_no_speech_or_classifier_panel(tmp_path):
    fig = plot_curves(metrics_rows(), tmp_path / "c.png")
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss", "learning rate", "perplexity", "BLEU / chrF"]
    assert set(drawn(fig.axes[3])) == {"valid BLEU", "valid chrF", "test BLEU", "test chrF"}


def test_curves_read_the_metrics_file_robustly(tmp_path):
    rows = metrics_rows() + [{"kind": "train", "step": 1, "loss": 9.0, "ppl": None, "lr": 0.0}]  # resumed: step 1 again
    run_dir = write_metrics(tmp_path / "run", rows, tail='{"kind": "train", "st')  # killed mid-write
    fig = plot_curves(run_dir / "metrics.jsonl", tmp_path / "c.png")
    steps, losses = series(rows, "train", "loss")
    assert steps[0] == 1 and losses[0] == 9.0 and len(steps) == len(set(steps))  # the last row of a step wins
    np.testing.assert_allclose(fig.axes[0].lines[0].get_data()[1], losses)
    assert math.isnan(series(rows, "train", "ppl")[1][0])  # a null value is a gap


def test_curves_errors_name_the_file(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=str(missing / "metrics.jsonl")):
        plot_curves(missing, tmp_path / "c.png")
    empty = write_metrics(tmp_path / "empty", [])
    with pytest.raises(ValueError, match=f"{empty / 'metrics.jsonl'} holds no metrics rows"):
        plot_curves(empty, tmp_path / "c.png")
    broken = write_metrics(tmp_path / "broken", [])
    (broken / "metrics.jsonl").write_text('{"kind": "train"\n{"kind": "train", "step": 1, "loss": 1.0}\n')
    with pytest.raises(ValueError, match=f"{broken / 'metrics.jsonl'}:1: not a JSON object"):
        plot_curves(broken, tmp_path / "c.png")
    test_only = write_metrics(tmp_path / "test_only", [{"kind": "test", "step": 5, "bleu": 3.0}])
    with pytest.raises(ValueError, match="no train or valid rows"):
        plot_curves(test_only, tmp_path / "c.png")
    with pytest.raises(ValueError, match="no train or valid rows with .*wer.*accuracy"):  # names what it draws
        plot_curves([{"kind": "valid", "step": 5, "examples": 3}], tmp_path / "c.png")
    with pytest.raises(ValueError, match="no metrics rows"):
        plot_curves([], tmp_path / "c.png")
    assert not list(tmp_path.glob("c.*"))


# -- positional encodings ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_positional_plot(tmp_path, suffix):
    path = tmp_path / f"pos{suffix}"
    fig = plot_positional(32, 50, path, head_dim=16)
    width, height, dpi = positional_figure_size()
    assert tuple(fig.get_size_inches()) == (width, height)
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), sinusoidal_table(50, 32).numpy())
    if suffix == ".png":
        assert png_shape(path) == expected_pixels(width, height, dpi)
    else:
        texts = svg_texts(path)
        assert {"position", "dimension", "sinusoidal encoding (D = 32)"} <= set(texts)
        assert any(t.startswith("pair 0: 1 rad/pos") for t in texts)


def test_rope_angles_are_position_times_frequency():
    angles = rope_angles(8, 20)  # (20, 4)
    theta = 10000.0 ** (-np.arange(4) * 2 / 8)
    np.testing.assert_allclose(angles, np.mod(np.arange(20)[:, None] * theta, 2 * np.pi), atol=1e-5)


def test_positional_errors_name_the_option(tmp_path):
    with pytest.raises(ValueError, match=r"head_dim \(--head-dim\) must be even"):
        plot_positional(32, 10, tmp_path / "p.png", head_dim=5)
    with pytest.raises(ValueError, match=r"length \(--length\) must be a positive integer"):
        plot_positional(32, 0, tmp_path / "p.png")
    with pytest.raises(ValueError, match=r"d_model \(--d-model\)"):
        plot_positional(-4, 10, tmp_path / "p.png")
    assert not list(tmp_path.iterdir())


def test_an_odd_d_model_names_it_as_the_rope_width(tmp_path):
    with pytest.raises(ValueError) as info:
        plot_positional(7, 10, tmp_path / "p.png")
    assert str(info.value) == ("RoPE rotates pairs of dimensions: head_dim (--head-dim) must be even, got 7 from "
                               "d_model (--d-model, its default); give an even --d-model or --head-dim")
