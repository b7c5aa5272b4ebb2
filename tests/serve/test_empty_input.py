"""An empty text sent to /translate is not translated: 200 with an empty translation, in its place among the others,
batched or not, with seqmap's search or a CTranslate2 export. An empty /generate prompt is the start of a new line,
as the schema says: a language model writes without input."""

import pytest
from fastapi.testclient import TestClient

from seqmap.data.tokenizers import EOS
from seqmap.decoding.text import generate_texts, translate_ids
from seqmap.serve.app import create_app
from seqmap.serve.engine import Engine, TranslateJob

EMPTY = {"text": "", "score": 0.0, "normalized": 0.0}


@pytest.fixture(scope="module")
def client(translation_run):
    with TestClient(create_app(translation_run, max_batch=8, wait_ms=2)) as c:
        yield c


def _translate(client, **body) -> list[dict]:
    response = client.post("/translate", json=body)
    assert response.status_code == 200, response.text
    return response.json()["translations"]


def test_an_empty_text_is_translated_as_empty(client, translation_run):
    run = translation_run
    assert translate_ids(run.model, [[EOS]], run.cfg.decode)[0]  # decoded, the empty source would say something
    for text in ("", "  \t"):
        (result,) = _translate(client, text=text)
        assert result == {"source": text, "translation": "", "nbest": [EMPTY], "attention": None}


@pytest.mark.parametrize("options", [{}, {"beam_size": 3, "n_best": 2}, {"attention": True}],
                         ids=["greedy", "n-best", "attention"])
def test_empty_texts_keep_their_place_in_a_list(client, options):
    texts = ["a b c", "", "d e f g", " "]
    results = _translate(client, text=texts, **options)
    assert [r["source"] for r in results] == texts
    assert results[1]["nbest"] == results[3]["nbest"] == [EMPTY]
    assert results[1]["attention"] is None and results[3]["attention"] is None
    for i in (0, 2):  # as alone, up to float rounding (the batch differs)
        alone = _translate(client, text=texts[i], **options)[0]
        assert [e["text"] for e in results[i]["nbest"]] == [e["text"] for e in alone["nbest"]]
        assert [e["score"] for e in results[i]["nbest"]] == pytest.approx([e["score"] for e in alone["nbest"]],
                                                                          abs=1e-4)
        assert results[i]["translation"] and (results[i]["attention"] is not None) == bool(options.get("attention"))


def test_the_batched_engine_translates_an_empty_text_as_empty(translation_run):
    engine = Engine(translation_run)
    key = engine.translate_key(type("Req", (), {"beam_size": None, "length_penalty": None, "n_best": 1})())
    alone = engine.run_translate(key, [TranslateJob(["b c a"], False)])[0][0]
    batch = engine.run_translate(key, [TranslateJob([""], False), TranslateJob(["b c a", ""], False)])
    assert [[r["translation"] for r in job] for job in batch] == [[""], [alone["translation"], ""]]


def test_a_ctranslate2_export_is_not_given_an_empty_text(translation_run, tmp_path):
    pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed: pip install -e \".[ct2]\"")
    from seqmap.hub.ct2 import export_ct2, load_translator

    export_ct2(translation_run, tmp_path / "ct2")
    translator = load_translator(tmp_path / "ct2", threads=1)
    with TestClient(create_app(translation_run, ct2=translator, decoder="CTranslate2", wait_ms=2)) as client:
        results = _translate(client, text=["", "a b", " "], beam_size=2, n_best=2)
        assert results[0]["nbest"] == results[2]["nbest"] == [EMPTY] and results[1]["translation"]


def test_an_empty_prompt_starts_a_new_line(lm_run):
    with TestClient(create_app(lm_run, wait_ms=2)) as client:
        described = client.get("/openapi.json").json()["components"]["schemas"]["GenerateRequest"]
        assert "Empty is a prompt too: the model writes from the start of a new line" in \
            described["properties"]["prompt"]["description"]
        empty = client.post("/generate", json={"prompt": "", "sample": False})
        assert empty.status_code == 200, empty.text
        assert empty.json()["text"] == client.post("/generate", json={"prompt": "\n", "sample": False}).json()["text"]
        assert empty.json()["text"] == generate_texts(lm_run.model, lm_run.tgt_tok, [""], lm_run.cfg.decode,
                                                      sample=False)[0] != ""
        assert client.post("/generate", json={}).json() == client.post("/generate", json={"prompt": ""}).json()
