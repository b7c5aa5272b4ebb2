"""POST /classify for a text and an image classifier: answers equal the model's own, attention maps, bad input."""

import base64
import io

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image

from seqmap.data.batching import collate_labels
from seqmap.data.pipeline import classification_ids
from seqmap.nn.rollout import class_token_attention
from seqmap.serve.app import create_app
from seqmap.serve.schemas import Limits

LIMITS = Limits(max_chars=60, max_texts=4, max_body_bytes=20_000, max_image_pixels=64 * 64)


@pytest.fixture(scope="module")
def text_client(text_classifier_run):
    with TestClient(create_app(text_classifier_run, limits=LIMITS, max_batch=8, wait_ms=2)) as c:
        yield c


@pytest.fixture(scope="module")
def image_client(image_classifier_run):
    with TestClient(create_app(image_classifier_run, limits=LIMITS, max_batch=8, wait_ms=2)) as c:
        yield c


def png(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def bar(column: int) -> np.ndarray:
    image = np.full((8, 8), 10, np.uint8)
    image[:, column:column + 2] = 250
    return image


def test_text_classes_and_probabilities_are_the_models(text_client, text_classifier_run):
    run = text_classifier_run
    texts = ["a b red c", "green", "d e f blue g h"]
    answer = text_client.post("/classify", json={"text": texts, "top": 2}).json()["classifications"]
    assert [a["label"] for a in answer] == ["red", "green", "blue"]
    for text, a in zip(texts, answer):
        batch = collate_labels([(run.src_tok.encode(text), 0)])
        with torch.no_grad():
            probs = run.model(batch.src, batch.src_mask).softmax(-1)[0]
        assert len(a["top"]) == 2 and a["top"][0]["label"] == a["label"]
        assert a["probability"] == pytest.approx(float(probs.max()), abs=1e-4)  # batched with others: same answer
    info = text_client.get("/info").json()
    assert info["task"] == "classification" and info["classes"] == ["blue", "green", "red"]


def test_text_attention_is_the_class_tokens(text_client, text_classifier_run):
    run = text_classifier_run
    a = text_client.post("/classify", json={"text": "a b red c", "attention": True}).json()["classifications"][0]
    att = a["attention"]
    assert att["tokens"] == run.src_tok.tokens("a b red c") and att["grid"] is None
    ids = run.src_tok.encode("a b red c")
    weights = run.model.encoder_attention(torch.tensor([ids]), None)[0]
    rollout, last = class_token_attention(weights)
    assert att["rollout"] == pytest.approx(rollout.tolist(), abs=1e-4)
    assert att["last_layer"] == pytest.approx(last.tolist(), abs=1e-4)
    assert sum(att["rollout"]) == pytest.approx(1.0, abs=1e-3)


def test_a_mean_pooled_classifier_refuses_attention_in_one_409_and_still_classifies(text_classifier_run):
    """Attention maps read the class token's row; a model that pools by mean has none: 409 naming the field."""
    import dataclasses

    from seqmap.models.builder import build_model

    run = text_classifier_run
    model_cfg = dataclasses.replace(run.cfg.model, pooling="mean")
    torch.manual_seed(0)
    mean_run = dataclasses.replace(run, cfg=dataclasses.replace(run.cfg, model=model_cfg),
                                   model=build_model(model_cfg).eval())
    with TestClient(create_app(mean_run, limits=LIMITS, max_batch=8, wait_ms=2)) as client:
        refused = client.post("/classify", json={"text": "a b red c", "attention": True})
        answered = client.post("/classify", json={"text": "a b red c"})
        info = client.get("/info").json()
    assert refused.status_code == 409 and refused.json()["field"] == "attention"
    assert refused.json()["detail"] == ("this model pools by mean (model.pooling=mean) and has no class token to read "
                                        "attention from; send attention=false")
    assert answered.status_code == 200, answered.text
    batch = collate_labels([(run.src_tok.encode("a b red c"), 0)])
    with torch.no_grad():
        probs = mean_run.model(batch.src, batch.src_mask).softmax(-1)[0]
    (answer,) = answered.json()["classifications"]
    assert answer["label"] == run.labels.decode(int(probs.argmax()))
    assert answer["probability"] == pytest.approx(float(probs.max()), abs=1e-4)
    assert info["attention"]["available"] is False


def test_images_are_classified_and_their_patches_weighted(image_client, image_classifier_run):
    answer = image_client.post("/classify", json={"image": [png(bar(0)), png(bar(3)), png(bar(6))],
                                                   "attention": True}).json()["classifications"]
    assert [a["label"] for a in answer] == ["left", "middle", "right"]
    att = answer[0]["attention"]
    assert att["grid"] == [4, 4] and len(att["rollout"]) == len(att["last_layer"]) == 16 and att["tokens"] is None
    data_url = "data:image/png;base64," + png(bar(6))  # what a browser's FileReader sends
    assert image_client.post("/classify", json={"image": data_url}).json()["classifications"][0]["label"] == "right"
    big = np.zeros((16, 16), np.uint8)  # another size is resized, as `seqmap classify` does
    big[:, 12:16] = 250
    assert image_client.post("/classify", json={"image": png(big)}).json()["classifications"][0]["label"] == "right"


def test_a_text_longer_than_data_max_len_reads_its_first_tokens_as_in_training(text_client, text_classifier_run):
    run = text_classifier_run  # data.max_len 15: training, evaluate and `seqmap classify` read the first 15 tokens
    text = "red " + "a " * 20
    a = text_client.post("/classify", json={"text": text, "attention": True}).json()["classifications"][0]
    batch = collate_labels([(classification_ids(run.src_tok, text, run.cfg.data.max_len), 0)])
    with torch.no_grad():
        probs = run.model(batch.src, batch.src_mask).softmax(-1)[0]
    assert a["probability"] == pytest.approx(float(probs.max()), abs=1e-4)
    assert len(a["attention"]["tokens"]) == len(a["attention"]["rollout"]) == 15


@pytest.mark.parametrize("body, status, field, words", [
    ({"image": "AAAA"}, 422, "image", "send text, not image"),
    ({}, 422, "text", "text is required"),
    ({"text": []}, 422, "text", "empty list"),
    ({"text": ["a"] * 5}, 422, "text", "at most 4 per request"),
    ({"text": "x" * 61}, 422, "text", "at most 60"),
    ({"text": "a", "top": 0}, 422, "top", "greater than or equal to 1"),
])
def test_bad_text_requests(text_client, body, status, field, words):
    r = text_client.post("/classify", json=body)
    assert r.status_code == status and r.json()["field"] == field and words in r.json()["detail"], r.text


@pytest.mark.parametrize("image, words", [
    ("not base64!", "image is not base64"),
    (base64.b64encode(b"hello").decode(), "cannot read image as an image"),
    ("data:image/png,abc", "without ;base64"),
])
def test_bad_images(image_client, image, words):
    r = image_client.post("/classify", json={"image": image})
    assert r.status_code == 422 and r.json()["field"] == "image" and words in r.json()["detail"], r.text


def test_a_huge_image_is_refused_before_decoding(image_client):
    r = image_client.post("/classify", json={"image": png(np.zeros((100, 100), np.uint8))})
    assert r.status_code == 422 and "100x100 pixels; at most 4096 pixels" in r.json()["detail"]


def test_routes_of_other_tasks_say_where_to_go(text_client, image_client, translation_run):
    r = text_client.post("/translate", json={"text": "a"})
    assert r.status_code == 409 and "holds a text classifier; POST /classify with a text" in r.json()["detail"]
    r = image_client.post("/generate", json={"prompt": "a"})
    assert r.status_code == 409 and "an image classifier; POST /classify with a base64 image" in r.json()["detail"]
    with TestClient(create_app(translation_run, limits=LIMITS)) as client:
        r = client.post("/classify", json={"text": "a"})
        assert r.status_code == 409 and "holds a translation model; POST /translate" in r.json()["detail"]
