"""The HTTP API through the ASGI client: every endpoint, every limit, malformed input, wrong endpoints.

Outputs are compared with the library functions the CLI uses (``translate_nbest``,
``generate_texts``, ``forced_attention``), so the server is checked against the same
decoding, not against numbers written down here.
"""

import pytest
import torch
from fastapi.testclient import TestClient

from seqmap.decoding.align import forced_attention
from seqmap.decoding.text import generate_texts, resolve_config, translate_nbest, translate_texts
from seqmap.serve.app import create_app
from seqmap.serve.schemas import Limits

LIMITS = Limits(max_chars=40, max_texts=4, max_beam=4, max_new_tokens=30, max_body_bytes=4000)


@pytest.fixture(scope="module")
def client(translation_run):
    with TestClient(create_app(translation_run, limits=LIMITS, max_batch=8, wait_ms=2)) as c:
        yield c


@pytest.fixture(scope="module")
def lm_client(lm_run):
    with TestClient(create_app(lm_run, limits=LIMITS, max_batch=8, wait_ms=2)) as c:
        yield c


def assert_still_serving(client, body=None):
    assert client.get("/health").json()["status"] == "ok"
    response = client.post("/translate", json=body or {"text": "a b c"})
    assert response.status_code == 200, response.text


# -- endpoints ----------------------------------------------------------------------------------

def test_health_and_info_describe_the_model(client, translation_run):
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["task"] == "translation"
    assert {"batches", "requests", "max_batch_requests", "batch_requests"} <= set(health["batching"])
    info = client.get("/info").json()
    assert info["family"] == "transformer" and info["task"] == "translation"
    assert info["parameters"] == sum(p.numel() for p in translation_run.model.parameters())
    assert info["vocabulary"]["source"] == translation_run.src_tok.vocab_size
    assert info["vocabulary"]["target"] == translation_run.tgt_tok.vocab_size
    assert info["sizes"]["d_model"] == 32 and info["sizes"]["enc_layers"] == 2
    assert info["attention"] == {"available": True, "layers": 2, "heads": 2}
    assert info["step"] == 200 and info["training"]["max_steps"] == 200
    assert info["limits"]["max_beam"] == LIMITS.max_beam and info["batching"]["max_batch"] == 8


def test_openapi_schema_and_docs(client):
    schema = client.get("/openapi.json").json()
    assert {"/translate", "/generate", "/health", "/info"} <= set(schema["paths"])
    request = schema["components"]["schemas"]["TranslateRequest"]["properties"]
    assert {"text", "beam_size", "n_best", "length_penalty", "attention"} <= set(request)
    assert "422" in schema["paths"]["/translate"]["post"]["responses"]
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_page_and_its_files_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and 'id="heatmap"' in page.text and "/static/app.js" in page.text
    assert "http" not in page.text.split("<body>")[0].replace('name="viewport"', "")  # nothing from elsewhere
    for name in ("app.js", "style.css"):
        assert client.get(f"/static/{name}").status_code == 200


def test_translate_one_text_equals_the_library(client, translation_run):
    run = translation_run
    response = client.post("/translate", json={"text": "a b c d"})
    assert response.status_code == 200
    (result,) = response.json()["translations"]
    (expected,) = translate_texts(run.model, run.src_tok, run.tgt_tok, ["a b c d"], run.cfg.decode)
    assert result["source"] == "a b c d" and result["translation"] == expected
    assert len(result["nbest"]) == 1 and result["nbest"][0]["text"] == expected
    assert result["attention"] is None  # only on request


def test_translate_a_list_with_beam_and_nbest(client, translation_run):
    run = translation_run
    texts = ["a b c", "j i h g"]
    body = {"text": texts, "beam_size": 3, "n_best": 3, "length_penalty": 0.6}
    results = client.post("/translate", json=body).json()["translations"]
    decode = resolve_config(run.cfg.decode, {"beam_size": 3, "length_penalty": 0.6})
    expected = translate_nbest(run.model, [run.src_tok.encode(t) for t in texts], decode, n_best=3)
    assert [r["source"] for r in results] == texts
    for result, entries in zip(results, expected):
        assert [h["text"] for h in result["nbest"]] == [run.tgt_tok.decode(e.output) for e in entries]
        assert [h["normalized"] for h in result["nbest"]] == pytest.approx([e.normalized for e in entries], abs=1e-5)
        scores = [h["normalized"] for h in result["nbest"]]
        assert scores == sorted(scores, reverse=True) and result["translation"] == result["nbest"][0]["text"]


def test_attention_is_the_forced_decoding_attention_of_the_best_translation(client, translation_run):
    run = translation_run
    (result,) = client.post("/translate", json={"text": "a b c d e", "attention": True}).json()["translations"]
    attention = result["attention"]
    hyp = run.tgt_tok.encode(result["translation"])
    assert attention["source_tokens"] == ["a", "b", "c", "d", "e"]
    assert attention["output_tokens"] == [*run.tgt_tok.pieces(hyp), "</s>"]
    weights = torch.tensor(attention["weights"], dtype=torch.float64)
    assert weights.shape == (2, 2, len(hyp) + 1, 5) and (attention["layers"], attention["heads"]) == (2, 2)
    expected = forced_attention(run.model, run.src_tok.encode("a b c d e"), hyp)
    assert torch.allclose(weights, expected.double(), atol=1e-4)
    assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1], dtype=weights.dtype), atol=1e-3)


# -- limits and bad input ---------------------------------------------------------------------------

@pytest.mark.parametrize("body, field, words", [
    ({"text": "a " * 30}, "text", ["60 characters", "at most 40"]),
    ({"text": ["a", "b " * 30]}, "text[1]", ["at most 40"]),
    ({"text": ["a"] * 5}, "text", ["5 sentences", "at most 4"]),
    ({"text": []}, "text", ["empty list"]),
    ({"text": "a", "beam_size": 5}, "beam_size", ["limit of 4"]),
    ({"text": "a", "beam_size": 2, "n_best": 3}, "n_best", ["beam_size >= 3"]),
    ({"text": "a", "n_best": 2}, "n_best", ["beam_size >= 2"]),  # the run's default beam is 1
    ({"text": "a", "beam_size": 0}, "beam_size", ["greater than or equal to 1"]),
    ({"text": "a", "length_penalty": -1}, "length_penalty", ["greater than or equal to 0"]),
])
def test_each_limit_is_a_422_naming_the_field(client, body, field, words):
    response = client.post("/translate", json=body)
    assert response.status_code == 422, response.text
    error = response.json()
    assert error["field"] == field
    for word in words:
        assert word in error["detail"]
    assert_still_serving(client)


@pytest.mark.parametrize("content, field, words", [
    ('{"text": "a b"', "body", ["not valid JSON"]),
    ("[1, 2]", "body", ["JSON object"]),
    ('{"txt": "a b"}', "txt", ["unknown field 'txt'", "did you mean 'text'"]),
    ('{"text": "a", "beam_sise": 2}', "beam_sise", ["did you mean 'beam_size'"]),
    ("{}", "text", ["text is required"]),
    ('{"text": 5}', "text", ["a string or a list of strings", "got 5"]),
    ('{"text": ["a", 3]}', "text", ["text[1] must be a string"]),
    ('{"text": "a", "beam_size": "wide"}', "beam_size", ["valid integer", "'wide'"]),
    ('{"text": "a", "attention": "maybe"}', "attention", ["valid boolean"]),
    ('{"text": "a", "beam_size": "3"}', "beam_size", ["valid integer", "'3'"]),  # no coercion from strings,
    ('{"text": "a", "beam_size": true}', "beam_size", ["valid integer", "True"]),  # booleans
    ('{"text": "a", "beam_size": 2.0}', "beam_size", ["valid integer", "2.0"]),  # or floats
    ('{"text": "a", "attention": "yes"}', "attention", ["valid boolean", "'yes'"]),
    ('{"text": "a", "attention": 1}', "attention", ["valid boolean"]),
    ("", "body", ["body is missing"]),
    ('{"text": "a \\ud800 b"}', "text", ["lone UTF-16 surrogate", "character 2"]),
    ('{"text": ["ok", "\\udfff"]}', "text[1]", ["lone UTF-16 surrogate"]),
])
def test_malformed_requests_get_422_naming_the_field(client, content, field, words):
    response = client.post("/translate", content=content, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    for word in words:
        assert word in response.json()["detail"]
    assert_still_serving(client)


def test_a_body_without_json_content_type_or_too_large(client):
    response = client.post("/translate", content='{"text": "a"}', headers={"content-type": "text/plain"})
    assert response.status_code == 422 and "content-type: application/json" in response.json()["detail"]
    response = client.post("/translate", json={"text": "a" * 5000})
    assert response.status_code == 413 and response.json()["detail"].endswith(
        "bytes; at most 4000: send fewer or smaller inputs per request, or start the server with a larger "
        "--max-body-bytes")
    assert_still_serving(client)


def test_a_chunked_body_is_limited_on_the_bytes_read(client):
    """No Content-Length (chunked transfer encoding): the limit holds on what arrives, not on a header."""
    def chunks(n):
        yield b'{"text": "'
        for _ in range(n):
            yield b"a" * 1000
        yield b'"}'

    response = client.post("/translate", content=chunks(5), headers={"content-type": "application/json"})
    assert response.status_code == 413 and "passed 4000 bytes" in response.json()["detail"], response.text
    response = client.post("/translate", content=chunks(1), headers={"content-type": "application/json"})
    assert response.status_code == 422 and response.json()["field"] == "text"  # under the limit: read and checked
    assert_still_serving(client)


def test_the_wrong_endpoint_for_the_model_names_the_right_one(client, lm_client):
    response = client.post("/generate", json={"prompt": "a"})
    assert response.status_code == 409 and "POST /translate" in response.json()["detail"]
    response = lm_client.post("/translate", json={"text": "to be"})
    assert response.status_code == 409 and "POST /generate" in response.json()["detail"]
    assert client.get("/nowhere").status_code == 404
    assert client.get("/translate").status_code == 405
    assert_still_serving(client)


def test_an_error_inside_decoding_is_a_500_and_the_worker_survives(client, monkeypatch):
    engine = client.app.state.engine
    real = engine.run_translate

    def broken(key, jobs):
        if any("boom" in t for job in jobs for t in job.texts):
            raise RuntimeError("boom")
        return real(key, jobs)

    monkeypatch.setattr(engine, "run_translate", broken)
    tc = TestClient(client.app, raise_server_exceptions=False)
    response = tc.post("/translate", json={"text": "boom"})
    assert response.status_code == 500 and "RuntimeError: boom" in response.json()["detail"]
    assert_still_serving(client)


def test_a_full_queue_is_a_503_with_retry_after(client, monkeypatch):
    from seqmap.serve.batcher import QueueFull

    async def full(*args, **kwargs):
        raise QueueFull(256, retry_after=2)

    monkeypatch.setattr(client.app.state.batcher, "submit", full)
    response = client.post("/translate", json={"text": "a b"})
    assert response.status_code == 503 and response.headers["retry-after"] == "2"
    assert "busy" in response.json()["detail"]
    monkeypatch.undo()
    assert_still_serving(client)


# -- language models ----------------------------------------------------------------------------

def test_generate_equals_seqmap_generate_with_the_same_seed(lm_client, lm_run):
    run = lm_run
    for seed in (0, 7):
        result = lm_client.post("/generate", json={"prompt": "to be", "max_new_tokens": 20, "seed": seed}).json()
        (expected,) = generate_texts(run.model, run.tgt_tok, ["to be"], run.cfg.decode, sample=True, seed=seed,
                                     max_new_tokens=20)
        assert result["prompt"] == "to be" and result["text"] == expected
        assert result["tokens"] == len(run.tgt_tok.encode(expected))
    greedy = lm_client.post("/generate", json={"prompt": "to be", "max_new_tokens": 20, "sample": False}).json()
    (expected,) = generate_texts(run.model, run.tgt_tok, ["to be"], run.cfg.decode, max_new_tokens=20)
    assert greedy["text"] == expected


def test_generate_attention_rows_are_the_generated_tokens(lm_client, lm_run):
    body = {"prompt": "to be", "max_new_tokens": 12, "seed": 3, "attention": True}
    result = lm_client.post("/generate", json=body).json()
    attention = result["attention"]
    rows = result["tokens"] + int(result["finished"])
    assert len(attention["output_tokens"]) == rows
    assert len(attention["source_tokens"]) == len("to be") + result["tokens"]  # a character LM: no EOS before
    weights = torch.tensor(attention["weights"])
    assert weights.shape == (2, 2, rows, len(attention["source_tokens"]))
    # causal: the step that chose generated token j sees the prompt and tokens before j only
    prompt = len("to be")
    for j in range(rows):
        assert weights[..., j, prompt + j:].abs().max() == 0


@pytest.mark.parametrize("body, field", [
    ({"prompt": "a", "max_new_tokens": 31}, "max_new_tokens"),
    ({"prompt": "a" * 41}, "prompt"),
    ({"prompt": "a", "temperature": 0}, "temperature"),
    ({"prompt": "a", "top_p": 1.5}, "top_p"),
    ({"prompt": "a", "top_k": -1}, "top_k"),
    ({"prompt": "a", "seed": "x"}, "seed"),
    ({"prompt": "a", "sample": "no"}, "sample"),  # not coerced to false
    ({"prompt": "a", "max_new_tokens": "3"}, "max_new_tokens"),
    ({"prompt": 3}, "prompt"),
    ('{"prompt": "to \\ud800"}', "prompt"),  # a lone surrogate: valid JSON, not text
])
def test_generate_limits(lm_client, body, field):
    if isinstance(body, str):
        response = lm_client.post("/generate", content=body, headers={"content-type": "application/json"})
    else:
        response = lm_client.post("/generate", json=body)
    assert response.status_code == 422 and response.json()["field"] == field, response.text
    assert lm_client.post("/generate", json={"prompt": "to", "max_new_tokens": 3}).status_code == 200


def test_a_float_field_takes_a_json_integer(client, lm_client):
    """Strict types still take 1 for 1.0: the page sends Number("1"), which JSON writes as 1."""
    assert client.post("/translate", json={"text": "a b", "length_penalty": 1}).status_code == 200
    body = {"prompt": "to", "max_new_tokens": 3, "temperature": 1, "top_p": 1}
    assert lm_client.post("/generate", json=body).status_code == 200


def test_lm_info(lm_client, lm_run):
    info = lm_client.get("/info").json()
    assert info["task"] == "lm" and info["family"] == "lm"
    assert info["vocabulary"]["source"] is None and info["vocabulary"]["target"] == lm_run.tgt_tok.vocab_size
    assert info["sizes"]["enc_layers"] == 0 and info["attention"]["layers"] == 2


def test_a_bpe_run_with_chinese_output(tmp_path):
    """The main job's shape: joint BPE vocabulary, Chinese targets. Pieces label the attention, CJK comes back."""
    from seqmap.config import DataConfig, ModelConfig, RunConfig
    from seqmap.data.tokenizers import train_pair

    english = ["Where is the station?", "I love you.", "Tom is reading a book.", "It is raining today."] * 3
    chinese = ["車站在哪裡？", "我愛你。", "湯姆在讀一本書。", "今天下雨了。"] * 3
    tok, _ = train_pair("bpe", english, chinese, 120, joint=True)
    cfg = RunConfig(model=ModelConfig(src_vocab=tok.vocab_size, tgt_vocab=tok.vocab_size, d_model=16, n_heads=2,
                                      d_ff=32, enc_layers=1, dec_layers=1, share_vocab=True),
                    data=DataConfig(tokenizer="bpe", src_lang="en", tgt_lang="zh"))
    run = _untrained_run(tmp_path, cfg, tok)
    with TestClient(create_app(run)) as client:
        body = {"text": "Where is the station?", "attention": True, "beam_size": 2}
        (result,) = client.post("/translate", json=body).json()["translations"]
        assert client.get("/info").json()["languages"] == {"source": "en", "target": "zh"}
    attention = result["attention"]
    assert attention["source_tokens"] == tok.tokens("Where is the station?") and "▁Where" in attention["source_tokens"]
    decode = resolve_config(run.cfg.decode, {"beam_size": 2})
    (best, *_), = translate_nbest(run.model, [tok.encode("Where is the station?")], decode)
    assert attention["output_tokens"] == [*tok.pieces(best.output), "</s>"]
    assert result["translation"] == tok.decode(best.output)
    with TestClient(create_app(run)) as client:  # Chinese text in and out, as UTF-8 (the joint vocabulary has it)
        response = client.post("/translate", json={"text": "我愛你。", "attention": True})
    (result,) = response.json()["translations"]
    assert result["source"] == "我愛你。" and "我愛你。" in response.content.decode("utf-8")
    assert "".join(result["attention"]["source_tokens"]).lstrip("▁") == "我愛你。"


def test_a_recurrent_lm_generates_and_says_it_has_no_attention(tmp_path):
    from seqmap.config import DataConfig, ModelConfig, RunConfig
    from seqmap.data.tokenizers import train_tokenizer
    from seqmap.decoding.text import generate_texts

    tok = train_tokenizer("char", ["to be or not to be"])
    cfg = RunConfig(model=ModelConfig(family="rnn_lm", tgt_vocab=tok.vocab_size, emb_size=8, hidden_size=8,
                                      dec_layers=1),
                    data=DataConfig(task="lm", tokenizer="char"))
    run = _untrained_run(tmp_path, cfg, tok)
    with TestClient(create_app(run)) as client:
        info = client.get("/info").json()
        assert info["family"] == "rnn_lm" and info["sizes"] == {"rnn_cell": "lstm", "emb_size": 8, "hidden_size": 8,
                                                                 "dec_layers": 1}
        assert info["attention"]["available"] is False
        body = {"prompt": "to", "max_new_tokens": 5, "sample": False}
        response = client.post("/generate", json=body)
        assert response.status_code == 200, response.text
        refused = client.post("/generate", json={**body, "attention": True})
        assert refused.status_code == 409 and "attention" in refused.json()["detail"]
        out = response.json()
        expected = generate_texts(run.model, tok, ["to"], resolve_config(run.cfg.decode, {"max_new_tokens": 5}),
                                  sample=False)
        assert out["text"] == expected[0]


@pytest.mark.parametrize("rnn_attention", ["none", "bahdanau"])
def test_an_rnn_translation_run_is_served_and_says_whether_it_has_attention(tmp_path, rnn_attention):
    """An RNN encoder-decoder: /info gives its recurrent sizes; attention=true is a 409 naming the field when it has
    no attention, else the forced-decoding attention (one layer, one head) of its translation."""
    from seqmap.config import DataConfig, ModelConfig, RunConfig
    from seqmap.data.tokenizers import train_tokenizer

    tok = train_tokenizer("word", ["a b c d e", "e d c b a"])
    cfg = RunConfig(model=ModelConfig(family="rnn", src_vocab=tok.vocab_size, tgt_vocab=tok.vocab_size, emb_size=8,
                                      hidden_size=8, enc_layers=1, dec_layers=1, rnn_cell="gru",
                                      rnn_attention=rnn_attention),
                    data=DataConfig(tokenizer="word"))
    run = _untrained_run(tmp_path, cfg, tok)
    with TestClient(create_app(run)) as client:
        info = client.get("/info").json()
        assert info["family"] == "rnn" and info["sizes"] == {
            "rnn_cell": "gru", "emb_size": 8, "hidden_size": 8, "enc_layers": 1, "dec_layers": 1,
            "bidirectional": cfg.model.bidirectional, "rnn_attention": rnn_attention}
        assert info["attention"]["available"] is (rnn_attention != "none")
        plain = client.post("/translate", json={"text": "a b c"})
        assert plain.status_code == 200, plain.text
        (expected,) = translate_texts(run.model, tok, tok, ["a b c"], run.cfg.decode)
        assert plain.json()["translations"][0]["translation"] == expected
        asked = client.post("/translate", json={"text": "a b c", "attention": True})
    if rnn_attention == "none":
        assert asked.status_code == 409
        assert asked.json()["detail"] == ("this model has no attention (an RNN with rnn_attention=none); send "
                                          "attention=false")
    else:
        assert asked.status_code == 200, asked.text
        (result,) = asked.json()["translations"]
        weights = torch.tensor(result["attention"]["weights"])
        hyp = tok.encode(expected)
        assert weights.shape[-2:] == (len(hyp) + 1, 3)  # output tokens + EOS over "a b c"
        forced = forced_attention(run.model, tok.encode("a b c"), hyp)
        assert torch.allclose(weights.reshape(forced.shape), forced, atol=1e-4)  # the JSON keeps 4 decimals
        assert (result["attention"]["layers"], result["attention"]["heads"]) == (1, 1)


def test_a_convs2s_run_is_served_with_its_sizes_and_an_attention_map_per_decoder_layer(tmp_path):
    from seqmap.config import DataConfig, ModelConfig, RunConfig
    from seqmap.data.tokenizers import train_tokenizer

    tok = train_tokenizer("word", ["a b c d e", "e d c b a"])
    cfg = RunConfig(model=ModelConfig(family="convs2s", src_vocab=tok.vocab_size, tgt_vocab=tok.vocab_size,
                                      emb_size=8, hidden_size=8, enc_layers=1, dec_layers=2, positional="learned"),
                    data=DataConfig(tokenizer="word"))
    run = _untrained_run(tmp_path, cfg, tok)
    with TestClient(create_app(run)) as client:
        info = client.get("/info").json()
        assert info["family"] == "convs2s" and info["sizes"] == {
            "emb_size": 8, "hidden_size": 8, "kernel_size": 3, "enc_layers": 1, "dec_layers": 2,
            "positional": "learned"}
        assert info["attention"] == {"available": True, "layers": 2, "heads": 1}
        asked = client.post("/translate", json={"text": "a b c", "attention": True})
    assert asked.status_code == 200, asked.text
    (result,) = asked.json()["translations"]
    (expected,) = translate_texts(run.model, tok, tok, ["a b c"], run.cfg.decode)
    assert result["translation"] == expected
    forced = forced_attention(run.model, tok.encode("a b c"), tok.encode(expected))
    weights = torch.tensor(result["attention"]["weights"])
    assert torch.allclose(weights.reshape(forced.shape), forced, atol=1e-4)


def test_attention_beyond_the_size_limit_is_a_422_before_decoding(translation_run, lm_run):
    limits = Limits(max_chars=40, max_texts=4, max_beam=4, max_new_tokens=30, max_attention_weights=300)
    with TestClient(create_app(translation_run, limits=limits, max_batch=8, wait_ms=2)) as tc:
        shape = tc.get("/info").json()["attention"]
        one = shape["layers"] * shape["heads"] * (4 + 5 + 1) * 4  # 4 source words: at most 1.0 * 4 + 5 outputs
        assert one <= 300 < 4 * one
        ok = tc.post("/translate", json={"text": "a b c d", "attention": True})
        assert ok.status_code == 200 and ok.json()["translations"][0]["attention"] is not None
        batches = tc.get("/health").json()["batching"]["batches"]
        response = tc.post("/translate", json={"text": ["a b c d"] * 4, "attention": True})
        assert response.status_code == 422 and response.json()["field"] == "attention", response.text
        detail = response.json()["detail"]
        assert f"up to {4 * one:,} weights" in detail and "attention=false" in detail
        assert tc.get("/health").json()["batching"]["batches"] == batches  # refused before any decoding
        assert tc.post("/translate", json={"text": ["a b c d"] * 4}).status_code == 200  # without attention: fine
    with TestClient(create_app(lm_run, limits=limits, max_batch=8, wait_ms=2)) as tc:
        response = tc.post("/generate", json={"prompt": "to be", "max_new_tokens": 30, "attention": True})
        assert response.status_code == 422 and response.json()["field"] == "attention"
        assert "lower max_new_tokens" in response.json()["detail"]


def _untrained_run(tmp_path, cfg, tok):
    """A run of ``cfg``'s model with weights drawn from seed 0, saved as a checkpoint with ``tok`` and loaded."""
    from seqmap.checkpoints import save_checkpoint
    from seqmap.config import to_dict
    from seqmap.models.builder import build_model
    from seqmap.runs import load_run

    torch.manual_seed(0)
    tok.save(tmp_path / "tok")
    save_checkpoint(tmp_path / "ckpt", model=build_model(cfg.model), trainer_state={}, config=to_dict(cfg),
                    tokenizer_dir=tmp_path / "tok")
    return load_run(tmp_path / "ckpt")
