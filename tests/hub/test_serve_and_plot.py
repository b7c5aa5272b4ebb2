"""An imported model serves (``seqmap.serve``: /translate with its attention, /generate) and plots its attention
(``seqmap plot attention``), as a trained run does; checked with the serve and visualize tests' own helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")
pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e \".[serve]\"")
pytest.importorskip("httpx", reason="the serve extra is not installed: pip install -e \".[serve]\"")
pytest.importorskip("sentencepiece")

from fastapi.testclient import TestClient  # noqa: E402

from seqmap.decoding.align import forced_attention  # noqa: E402
from seqmap.decoding.text import generate_texts, translate_texts  # noqa: E402
from seqmap.hub import import_hf  # noqa: E402
from seqmap.runs import load_run  # noqa: E402
from seqmap.serve.app import create_app  # noqa: E402
from seqmap.visualize import plot_run_attention  # noqa: E402

from ..serve.test_api import LIMITS  # noqa: E402
from ..visualize.test_plots import heatmaps, png_shape, svg_texts  # noqa: E402
from .test_gpt2 import tiny_gpt2  # noqa: E402
from .test_marian import tiny_marian  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def marian_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve_marian")
    tiny_marian(root, seed=11)
    import_hf(root / "hf", root / "run")
    return root / "run", load_run(root / "run")


@pytest.fixture(scope="module")
def gpt2_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve_gpt2")
    tiny_gpt2(root / "hf", seed=11)
    import_hf(root / "hf", root / "run")
    return root / "run", load_run(root / "run")


def test_an_imported_marian_translates_with_its_attention_over_http(marian_run):
    _, run = marian_run
    text = "the cat sat on the mat"
    with TestClient(create_app(run, limits=LIMITS, max_batch=4, wait_ms=2)) as client:
        info = client.get("/info").json()
        assert info["family"] == "transformer"
        (result,) = client.post("/translate", json={"text": text, "attention": True}).json()["translations"]
        (beam,) = client.post("/translate", json={"text": text, "beam_size": 4}).json()["translations"]
    assert result["translation"] == translate_texts(run.model, run.src_tok, run.tgt_tok, [text],
                                                    run.cfg.decode, beam_size=1)[0]
    assert beam["translation"] == translate_texts(run.model, run.src_tok, run.tgt_tok, [text], run.cfg.decode,
                                                  beam_size=4)[0]  # the imported run's hf beam ranking
    attention = result["attention"]
    src = run.src_tok.encode(text)
    assert attention["source_tokens"] == run.src_tok.pieces(src)  # sentencepiece pieces, ending with </s>
    hyp = run.tgt_tok.encode(result["translation"])
    weights = torch.tensor(attention["weights"], dtype=torch.float64)
    assert weights.shape == (2, 4, len(hyp) + 1, len(src))
    assert torch.allclose(weights, forced_attention(run.model, src, hyp).double(), atol=1e-4)


def test_an_imported_gpt2_generates_over_http(gpt2_run):
    _, run = gpt2_run
    with TestClient(create_app(run, limits=LIMITS, max_batch=4, wait_ms=2)) as client:
        greedy = client.post("/generate", json={"prompt": "the cat", "max_new_tokens": 8, "sample": False,
                                                "attention": True}).json()
        sampled = client.post("/generate", json={"prompt": "the cat", "max_new_tokens": 8, "seed": 3}).json()
    (expected,) = generate_texts(run.model, run.tgt_tok, ["the cat"], run.cfg.decode, max_new_tokens=8)
    assert greedy["prompt"] == "the cat" and greedy["text"] == expected
    assert greedy["attention"]["layers"] == 2 and greedy["attention"]["heads"] == 4
    (drawn,) = generate_texts(run.model, run.tgt_tok, ["the cat"], run.cfg.decode, max_new_tokens=8, sample=True,
                              seed=3)
    assert sampled["text"] == drawn


def test_seqmap_plot_attention_draws_an_imported_marian(marian_run, tmp_path, capsys):
    from seqmap.cli import main

    run_dir, run = marian_run
    fig = plot_run_attention(run, "a dog met a cat", tmp_path / "cross.svg", layer=-1)
    assert len(heatmaps(fig)) == 4  # the 4 heads of the last layer
    texts = svg_texts(tmp_path / "cross.svg")
    assert all(piece in texts for piece in run.src_tok.pieces(run.src_tok.encode("a dog met a cat")))
    assert main(["plot", "attention", str(run_dir), "--text", "a dog met a cat", "--out",
                 str(tmp_path / "attn.png")]) == 0
    assert min(png_shape(tmp_path / "attn.png")) > 100


def test_seqmap_plot_attention_draws_an_imported_gpt2(gpt2_run, tmp_path):
    from seqmap.cli import main

    run_dir, run = gpt2_run
    fig = plot_run_attention(run, "the cat sat", tmp_path / "lm.svg", head="mean")
    maps = [ax.images[0].get_array() for ax in heatmaps(fig)]
    assert len(maps) == 2 and np.all(np.triu(maps[0], k=1) == 0)  # per layer, causal
    assert main(["plot", "attention", str(run_dir), "--text", "the cat sat", "--out", str(tmp_path / "lm.png")]) == 0
