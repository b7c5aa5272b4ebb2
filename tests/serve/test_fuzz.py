"""Fuzz every route of the server's OpenAPI schema over loopback: no 5xx answer, no hung connection.

Two generators, against a translation, a language-model and a speech server (the tiny runs of conftest.py):

* schemathesis draws requests for every operation in the app's own OpenAPI schema (``app.openapi()``):
  bodies the schema allows (positive) and bodies that break it (negative: wrong types, missing and
  unknown fields, numbers out of range);
* hypothesis adds what a schema cannot describe: bytes that are not JSON or not UTF-8, NaN and
  Infinity literals, deep nesting, lone surrogates, NUL, right-to-left marks and emoji, bodies just
  under and over the size limit, chunked bodies, wrong or missing content types, wrong methods and paths.

Every request goes over a socket to uvicorn serving the app in a thread of this process, with a
timeout: a request still unanswered after ``TIMEOUT`` seconds is a hung connection. Checked for every
answer: the status is below 500; a documented status carries the documented body (200: the response
model; errors: ``{"detail", "field"}``); every error, documented or not, has that one shape; and after
each test the server holds no open connection. The default suite runs a few dozen examples per route
(derandomized, so every run sends the same requests); ``pytest -m slow`` runs many more.
"""

import base64
import io
import json
import socket
import threading
import time
import wave
from contextlib import contextmanager

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from seqmap.serve.app import create_app
from seqmap.serve.schemas import ErrorBody, GenerateResponse, Limits, TranscribeResponse, TranslateResponse

LIMITS = Limits(max_chars=200, max_texts=4, max_beam=4, max_new_tokens=30, max_body_bytes=20_000)
TIMEOUT = 10.0  # seconds; the tiny models answer in milliseconds, so a request waiting this long is hung
ROUTES = {("GET", "/health"), ("GET", "/info"), ("POST", "/translate"), ("POST", "/generate"), ("POST", "/transcribe")}
RESPONSES = {"/translate": TranslateResponse, "/generate": GenerateResponse, "/transcribe": TranscribeResponse}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def fuzz_settings(examples: int):
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def live_server(app):
    """uvicorn serving ``app`` in a daemon thread on a free loopback port; yields (base URL, uvicorn.Server)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, name="fuzz-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start within 30 s"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(15)


@pytest.fixture(scope="module")
def translation_server(translation_run):
    with live_server(create_app(translation_run, limits=LIMITS, max_batch=8, wait_ms=1)) as served:
        yield served


@pytest.fixture(scope="module")
def lm_server(lm_run):
    with live_server(create_app(lm_run, limits=LIMITS, max_batch=8, wait_ms=1)) as served:
        yield served


@pytest.fixture(scope="module")
def speech_server(speech_run):
    with live_server(create_app(speech_run, limits=LIMITS, max_batch=8, wait_ms=1)) as served:
        yield served


@pytest.fixture(params=["translation", "lm", "speech"])
def served(request):
    """(base URL, uvicorn.Server, OpenAPI schema) of each kind of server; checks it holds no connection after."""
    url, server = request.getfixturevalue(f"{request.param}_server")
    yield url, server, server.config.app.openapi()
    deadline = time.monotonic() + 5
    while server.server_state.connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server.server_state.connections, f"{len(server.server_state.connections)} connections left open"
    assert httpx.get(f"{url}/health", timeout=TIMEOUT).json()["status"] == "ok"


def check_answer(spec: dict, method: str, path: str, response: httpx.Response, sent: str) -> None:
    """No 5xx; a documented status has the documented body; every error is ``{"detail", "field"}``."""
    status = response.status_code
    assert status < 500, f"{status} for {sent}: {response.text[:500]}"
    documented = spec["paths"].get(path, {}).get(method.lower(), {}).get("responses", {})
    if path in RESPONSES and method == "POST":
        assert str(status) in documented, f"undocumented {status} for {sent}: {response.text[:300]}"
    if status == 200 and path in RESPONSES and method == "POST":
        RESPONSES[path].model_validate(response.json())
    elif status >= 400:
        body = response.json()
        assert set(body) == {"detail", "field"}, f"{status} for {sent} is not an error body: {body}"
        ErrorBody.model_validate(body)


# -- from the OpenAPI schema ------------------------------------------------------------------------

def fuzz_schema(url: str, spec: dict, examples: int) -> None:
    """schemathesis' positive and negative cases for every operation the schema lists."""
    schema = schemathesis.openapi.from_dict(spec)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert ROUTES <= {(op.method.upper(), op.path) for op in operations}  # a new route is fuzzed too
    for operation in operations:
        modes = [GenerationMode.POSITIVE]
        if operation.body or operation.query:  # a route without inputs has nothing to break
            modes.append(GenerationMode.NEGATIVE)
        for mode in modes:
            @fuzz_settings(examples)
            @given(case=operation.as_strategy(mode))
            def send(case):
                try:
                    response = case.call(base_url=url, timeout=TIMEOUT)
                except Exception as error:  # requests' Timeout, a reset connection: no answer at all
                    pytest.fail(f"no answer to {case.operation.label} {case.body!r:.300}: {error!r}")
                case.validate_response(response, checks=CHECKS)

            send()


def test_every_route_against_the_openapi_schema(served):
    url, _, spec = served
    fuzz_schema(url, spec, examples=25)


@pytest.mark.slow
def test_every_route_against_the_openapi_schema_at_length(served):
    url, _, spec = served
    fuzz_schema(url, spec, examples=400)


# -- malformed requests the schema cannot describe --------------------------------------------------

FIELDS = ["text", "beam_size", "n_best", "length_penalty", "attention", "prompt", "max_new_tokens", "sample",
          "temperature", "top_k", "top_p", "seed", "audio"]
ODD_TEXT = ["", " ", "\x00", "a\x00b", "\u202eb a\u202c", "\u200f\u05e9\u05dc\u05d5\u05dd", "😀👨‍👩‍👧", "\ufeffa",
            "\uffff", "\U0010ffff", "e\u0301" * 50, "\r\n\t", "a" * LIMITS.max_chars, "a" * (LIMITS.max_chars + 1),
            "\ud800", "a \udfff b", "\udbff\udc00"]
texts = st.one_of(st.sampled_from(ODD_TEXT), st.text(max_size=40),
                  st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3))
numbers = st.one_of(st.integers(-3, 40), st.sampled_from([2**31, 2**63, 2**64, 2**64 - 1, 10**30, -(2**70)]),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0.0, -0.0, 5e-324, 1e-300, 1e-45, 1e308, 0.6, 1.0, 1.5]))


def _wav(samples: int, rate: int = 8000, channels: int = 1) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\x01\x02" * samples * channels)
    return buffer.getvalue()


WAVS = [_wav(0), _wav(50), _wav(2000), _wav(2000, rate=1), _wav(2000, rate=4_000_000), _wav(300, channels=7)]


@st.composite
def audio_files(draw) -> str:
    """base64 of WAV files: whole, cut short, with a byte changed (header fields included), or of random bytes."""
    data = draw(st.sampled_from(WAVS) | st.binary(max_size=64))
    if data and draw(st.booleans()):
        at = draw(st.integers(0, len(data) - 1))
        data = draw(st.sampled_from([data[:at], data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]]))
    text = base64.b64encode(data).decode()
    return draw(st.sampled_from(["", "data:audio/wav;base64,"])) + text


scalars = st.one_of(st.none(), st.booleans(), numbers, texts, audio_files())
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(texts, inner, max_size=4),
                      max_leaves=12)
objects = st.dictionaries(st.sampled_from(FIELDS) | texts, values, max_size=6)


@st.composite
def raw_bodies(draw) -> bytes:
    """Bytes for a body: JSON of odd values (NaN, surrogate escapes, ...), or bytes that are not JSON at all."""
    kind = draw(st.sampled_from(["object", "value", "bytes", "broken", "deep", "large"]))
    if kind in ("object", "value"):
        value = draw(objects if kind == "object" else values)
        return json.dumps(value, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "broken":  # a JSON object with a cut, an inserted byte or invalid UTF-8 inside a string
        text = json.dumps(draw(objects)).encode()
        cut = draw(st.integers(0, len(text)))
        return text[:cut] + draw(st.sampled_from([b"", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"}"]))
    if kind == "deep":
        depth = draw(st.sampled_from([10, 500, 990, 1200, 5000]))
        return draw(st.sampled_from([b'{"text": %s}', b'{"prompt": %s}', b'{"audio": %s}', b"%s"])) % (
            b"[" * depth + b"]" * depth)
    size = draw(st.sampled_from([LIMITS.max_body_bytes - 20, LIMITS.max_body_bytes - 12, LIMITS.max_body_bytes + 1,
                                 3 * LIMITS.max_body_bytes]))
    return b'{"text": "' + b"a" * (size - 12) + b'"}'


CONTENT_TYPES = ["application/json", None, "text/plain", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=x", "application/json; charset=latin-1", "application/problem+json",
                 "APPLICATION/JSON", "json", ";;;", "application/json; charset=utf-8"]
TARGETS = [("POST", "/translate"), ("POST", "/generate"), ("POST", "/transcribe"), ("GET", "/health"),
           ("GET", "/info"), ("GET", "/"),
           ("GET", "/translate"), ("PUT", "/generate"), ("DELETE", "/health"), ("POST", "/health"),
           ("GET", "/nowhere"), ("POST", "/translate/"), ("GET", "/static/app.js"), ("GET", "/static/../app.py"),
           ("GET", "/static/%2e%2e/app.py"), ("GET", "/%00"), ("GET", "/openapi.json"), ("OPTIONS", "/translate")]


def in_chunks(body: bytes, size: int):
    for start in range(0, len(body), size):
        yield body[start:start + size]


def fuzz_malformed(url: str, spec: dict, examples: int) -> None:
    body_routes = [t for t in TARGETS if t[0] == "POST" and t[1] in RESPONSES]

    @fuzz_settings(examples)
    @given(target=st.sampled_from(body_routes) | st.sampled_from(TARGETS), body=raw_bodies(),
           content_type=st.sampled_from(CONTENT_TYPES), chunk=st.sampled_from([None, None, 1, 7, 4096]),
           query=st.sampled_from(["", "?text=a", "?beam_size=%ff", "?" + "x" * 2000]))
    def send(client, target, body, content_type, chunk, query):
        method, path = target
        headers = {} if content_type is None else {"content-type": content_type}
        content = body if chunk is None else in_chunks(body, chunk)  # an iterator goes out chunked
        sent = f"{method} {path}{query[:20]} ({content_type}, {'chunked' if chunk else 'length'}) {body[:200]!r}"
        try:
            response = client.request(method, path + query, content=content, headers=headers)
        except httpx.TimeoutException:
            pytest.fail(f"no answer within {TIMEOUT} s (hung) to {sent}")
        check_answer(spec, method, path, response, sent)

    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:  # one keep-alive client, as a browser would
        send(client)


def test_malformed_requests_on_every_route(served):
    url, _, spec = served
    fuzz_malformed(url, spec, examples=150)


@pytest.mark.slow
def test_malformed_requests_on_every_route_at_length(served):
    url, _, spec = served
    fuzz_malformed(url, spec, examples=1000)


# -- what the fuzzer found: each was a 500, or an answer outside the documented shape -----------------

@pytest.mark.parametrize("kind, path, body, field", [
    ("translation", "/translate", {"text": "a b", "length_penalty": 1.4e308}, "length_penalty"),  # OverflowError
    ("lm", "/generate", {"prompt": "to", "top_p": 5e-324}, "top_p"),  # 0 in float32: every token dropped
    ("lm", "/generate", {"prompt": "to", "temperature": 1e-300}, "temperature"),  # log-probs / 0: NaN
    ("lm", "/generate", {"prompt": "to", "temperature": 1e308}, "temperature"),  # inf in float32: NaN
    ("lm", "/generate", {"prompt": "to", "seed": 2**64}, "seed"),  # torch.Generator.manual_seed overflows
])
def test_values_that_broke_decoding_are_a_422_naming_the_field(request, kind, path, body, field):
    url, _ = request.getfixturevalue(f"{kind}_server")
    response = httpx.post(url + path, json=body, timeout=TIMEOUT)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field and "Input should be" in response.json()["detail"]


def test_bytes_that_are_not_utf8_and_unknown_routes_answer_in_the_error_shape(translation_server):
    url, _ = translation_server
    response = httpx.post(url + "/translate", content=b'{"text": "\xff"}', timeout=TIMEOUT,
                          headers={"content-type": "application/json"})  # FastAPI's own answer was a 400
    assert response.status_code == 422 and response.json()["field"] == "body", response.text
    assert "not valid JSON" in response.json()["detail"] and "UTF-8" in response.json()["detail"]
    assert httpx.get(url + "/nowhere", timeout=TIMEOUT).json() == {"detail": "Not Found", "field": None}
    response = httpx.put(url + "/translate", timeout=TIMEOUT)
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert response.json() == {"detail": "Method Not Allowed", "field": None}


def test_audio_files_that_are_not_quite_audio_answer_200_or_422(speech_server):
    """WAV files cut short, with a header byte changed, at absurd rates or channel counts, or random bytes."""
    url, _ = speech_server

    @fuzz_settings(120)
    @given(audio=st.lists(audio_files(), min_size=1, max_size=3), attention=st.booleans())
    def send(client, audio, attention):
        response = client.post("/transcribe", json={"audio": audio, "attention": attention, "beam_size": 1})
        assert response.status_code in (200, 422), response.text
        if response.status_code == 200:
            TranscribeResponse.model_validate(response.json())
        else:
            assert response.json()["field"].startswith("audio") and "\n" not in response.json()["detail"]

    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        send(client)
