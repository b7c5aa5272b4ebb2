"""The FastAPI app: routes, error bodies, the page, and the batcher that runs the model.

    app = create_app(load_run("runs/en-zh"), max_batch=32, wait_ms=5)
    uvicorn.run(app, host="127.0.0.1", port=8000)

Routes (the OpenAPI schema is at ``/openapi.json``, browsable at ``/docs``: Swagger UI when an installed
swagger-ui-bundle ships its assets, else a page of our own that lists the routes, which works offline):

    GET  /             the page: translate (or generate) and explore attention
    GET  /health       liveness, and the batcher's counters (batches, batch sizes)
    GET  /info         the model: family, sizes, parameters, vocabularies, training summary, limits
    POST /translate    translation models: one text or a list, beam / n-best / length penalty / attention
    POST /generate     language models: a prompt, sampling options, a seed
    POST /classify     classifiers: texts (or base64 image files), top classes, the class token's attention
    POST /transcribe   speech models: base64 audio files, transcripts, cross-attention over the spectrogram

Handlers only check and queue: the decoding happens in the batcher's worker
thread (``seqmap.serve.batcher``), so the event loop stays free to accept, reject
and answer requests while a batch decodes. Every error body is
``{"detail": "...", "field": ...}`` (``seqmap.serve.schemas``); a bad request never
stops the server.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from starlette.exceptions import HTTPException

import seqmap
from seqmap.runs import LoadedRun
from seqmap.serve.batcher import Batcher, QueueFull
from seqmap.serve.classify import CLASSIFY_KEY, ClassifierEngine
from seqmap.serve.engine import Engine, GenerateJob, TranslateJob
from seqmap.serve.schemas import (
    ClassifyRequest,
    ClassifyResponse,
    ErrorBody,
    GenerateRequest,
    GenerateResponse,
    Limits,
    RequestError,
    TranscribeRequest,
    TranscribeResponse,
    TranslateRequest,
    TranslateResponse,
    check_generate,
    check_translate,
    limits_dict,
)
from seqmap.serve.transcribe import SpeechEngine
from seqmap.tasks.registry import TASKS

STATIC_DIR = Path(__file__).parent / "static"
BODIES: dict[str, type[BaseModel]] = {"/translate": TranslateRequest, "/generate": GenerateRequest,
                                      "/classify": ClassifyRequest, "/transcribe": TranscribeRequest}
UNION_TAGS = {"str": "a string or a list of strings", "list[str]": "a string or a list of strings"}
ERRORS = {status: {"model": ErrorBody} for status in (409, 413, 422, 500, 503)}
log = logging.getLogger("seqmap.serve")


def create_app(run: LoadedRun, *, limits: Limits | None = None, max_batch: int = 32, wait_ms: float = 5.0,
               threads: int | None = None, max_waiting: int = 256, ct2=None,
               decoder: str = "seqmap") -> FastAPI:
    """A FastAPI app serving ``run``.

    Args:
        run: a loaded run (``seqmap.runs.load_run``): a translation model, an LM, a classifier or a speech model.
        limits: what one request may ask for (``Limits()`` by default).
        max_batch: most sentences decoded together; 1 serves one request at a time.
        wait_ms: how long a batch waits for more requests after its first.
        threads: torch CPU threads for the worker thread that runs the model (None: torch's choice).
        max_waiting: most requests waiting for the model; beyond it, 503 with Retry-After.
        ct2: the run's CTranslate2 export (a translation run's ``ctranslate2.Translator``, an LM's
            ``ctranslate2.Generator``), to search with in its place (``seqmap serve --ct2``); ``decoder`` names
            it in /info.
    """
    limits = limits or Limits()
    engine = _engine(run, limits, ct2, decoder)

    def worker_start() -> None:
        if threads is not None:
            torch.set_num_threads(threads)

    batcher = Batcher(_run_batch(engine), max_batch=max_batch, wait_ms=wait_ms, on_start=worker_start,
                      max_waiting=max_waiting)
    info = {**engine.info(), "limits": limits_dict(limits), "seqmap": seqmap.__version__}
    started = time.time()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        yield
        batcher.stop()

    app = FastAPI(title="seqmap", version=seqmap.__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Translate, generate, classify or transcribe with a trained seqmap run, and read its "
                              "attention.")
    app.state.engine, app.state.batcher, app.state.limits = engine, batcher, limits
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    _add_docs(app)
    _add_error_handlers(app, limits)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness, and the batcher's counters: batches run, requests per batch, failures."""
        return {"status": "ok", "task": engine.task, "uptime_s": round(time.time() - started, 1),
                "batching": batcher.snapshot()}

    @app.get("/info")
    async def model_info() -> dict[str, Any]:
        """The model (family, sizes, parameters), vocabularies, training summary, decode defaults, limits."""
        return {**info, "batching": {"max_batch": batcher.max_batch, "wait_ms": batcher.wait * 1000.0}}

    @app.post("/translate", response_model=TranslateResponse, responses=ERRORS)
    async def translate(req: TranslateRequest, request: Request) -> JSONResponse:
        """Translate one text or a list; beam search and n-best on request, attention of each best translation."""
        _check_route(engine.task, "/translate")
        texts = check_translate(req, limits, engine.decode.beam_size)
        engine.check_positions(texts)
        if req.attention and not engine.has_attention:
            raise RequestError("this model has no attention (an RNN with rnn_attention=none); "
                               "send attention=false", "attention", 409)
        if req.attention:
            engine.check_attention_size(texts)
        batcher.start()  # no-op once running (an ASGI client without lifespan events starts it here)
        results = await _unless_gone(request, batcher.submit(engine.translate_key(req),
                                                             TranslateJob(texts, req.attention), size=len(texts)))
        return JSONResponse({"translations": results})

    @app.post("/generate", response_model=GenerateResponse, responses=ERRORS)
    async def generate(req: GenerateRequest, request: Request) -> JSONResponse:
        """Continue a prompt with a language model (sampling with a seed, or greedy)."""
        _check_route(engine.task, "/generate")
        check_generate(req, limits)
        if req.attention and not engine.has_attention:
            raise RequestError("this model returns no attention; send attention=false", "attention", 409)
        ids = engine.prompt_ids(req.prompt)
        key = engine.generate_key(req, ids)
        engine.check_generate_positions(len(ids), key)
        if req.attention:
            engine.check_generate_attention_size(len(ids), key.max_new)
        batcher.start()
        result = await _unless_gone(request, batcher.submit(key, GenerateJob(req.prompt, ids, req.seed,
                                                                             req.attention)))
        return JSONResponse(result)

    @app.post("/classify", response_model=ClassifyResponse, responses=ERRORS)
    async def classify(req: ClassifyRequest, request: Request) -> JSONResponse:
        """Classify texts (a text classifier) or base64 image files (an image classifier); top classes, attention."""
        _check_route(engine.task, "/classify")
        job = engine.inputs(req)
        batcher.start()
        results = await _unless_gone(request, batcher.submit(CLASSIFY_KEY, job, size=len(job.inputs)))
        return JSONResponse({"classifications": results})

    @app.post("/transcribe", response_model=TranscribeResponse, responses=ERRORS)
    async def transcribe(req: TranscribeRequest, request: Request) -> JSONResponse:
        """Transcribe base64 audio files with a speech model; cross-attention over the spectrogram on request."""
        _check_route(engine.task, "/transcribe")
        job = engine.inputs(req)
        batcher.start()
        results = await _unless_gone(request, batcher.submit(engine.transcribe_key(req), job, size=len(job.waves)))
        return JSONResponse({"transcriptions": results})

    return app


def _add_docs(app: FastAPI) -> None:
    """``GET /docs``: FastAPI's Swagger UI fetches its assets from a CDN, blank offline. With swagger-ui-bundle
    installed they are served from here; without it, /docs is our page listing the routes (no CDN either)."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        swagger_ui_path = None
    if swagger_ui_path is not None:
        from fastapi.openapi.docs import get_swagger_ui_html

        app.mount("/docs/assets", StaticFiles(directory=swagger_ui_path), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    async def docs():
        if swagger_ui_path is None:
            return FileResponse(STATIC_DIR / "docs.html")
        return get_swagger_ui_html(openapi_url=app.openapi_url, title=f"{app.title} API",
                                   swagger_js_url="/docs/assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs/assets/swagger-ui.css",
                                   swagger_favicon_url="/docs/assets/favicon-32x32.png")


def _engine(run: LoadedRun, limits: Limits, ct2=None, decoder: str = "seqmap"):
    """The engine for the run's task, by its route: classifiers, speech models, or translation models and LMs."""
    engine = {"/classify": ClassifierEngine, "/transcribe": SpeechEngine}.get(TASKS[run.cfg.data.task].endpoint)
    return Engine(run, limits, ct2, decoder) if engine is None else engine(run, limits)


def _check_route(task: str, route: str) -> None:
    """A 409 naming what the server holds and the route to send it when ``route`` is not the task's own."""
    info = TASKS[task]
    if info.endpoint != route:
        raise RequestError(f"this server holds {info.holds}; {info.request} instead", None, 409)


DISCONNECT_POLL_S = 0.1  # how often a waiting request checks whether its client is still there


async def _unless_gone(request: Request, work):
    """Await ``work``; if the client disconnects first, cancel it (the batcher then drops the request)."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            raise ClientGone()


class ClientGone(Exception):
    """The client went away while its request waited; nobody is left to answer."""


def _run_batch(engine: Engine):
    """The batcher's ``run_batch``: dispatch on the key's first element."""

    def run_batch(key, jobs):
        if key[0] == "translate":
            return engine.run_translate(key, jobs)
        if key[0] == "classify":
            return engine.run_classify(key, jobs)
        if key[0] == "transcribe":
            return engine.run_transcribe(key, jobs)
        return engine.run_generate(key, jobs)

    return run_batch


# -- errors ---------------------------------------------------------------------------------------

class BodyLimit:
    """ASGI middleware: a body over ``max_bytes`` gets 413, counted on the bytes as they arrive.

    A Content-Length over the limit is refused before anything is read; a body without one
    (chunked transfer encoding) is read up to the limit and refused as soon as it passes it,
    so no route ever holds more than ``max_bytes`` of one request. The route then reads the
    body that was held here.
    """

    def __init__(self, app, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length", b"").decode("latin-1")
        if length.isdigit() and int(length) > self.max_bytes:
            return await self._refuse(f"the request body has {length} bytes", scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nothing to answer
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                return await self._refuse(f"the request body passed {self.max_bytes} bytes", scope, receive, send)
            chunks.append(body)
            if not message.get("more_body", False):
                break
        held = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay():
            nonlocal held
            if held is not None:
                message, held = held, None
                return message
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, what: str, scope, receive, send) -> None:
        response = _error(413, f"{what}; at most {self.max_bytes}: send fewer or smaller inputs per request, or "
                               "start the server with a larger --max-body-bytes", None)
        response.headers["connection"] = "close"  # the rest of the body is not read
        await response(scope, receive, send)


def _add_error_handlers(app: FastAPI, limits: Limits) -> None:
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)

    @app.exception_handler(QueueFull)
    async def queue_full(request: Request, error: QueueFull) -> JSONResponse:
        response = _error(503, str(error), None)
        response.headers["retry-after"] = str(error.retry_after)
        return response

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, error: ClientGone) -> JSONResponse:
        return _error(499, "the client closed the connection", None)  # never read: the client is gone

    @app.exception_handler(RequestError)
    async def request_error(request: Request, error: RequestError) -> JSONResponse:
        return _error(error.status, str(error), error.field)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        """404, 405 and FastAPI's own 400s, in the one error shape."""
        if error.status_code == 400 and request.url.path in BODIES:  # the body's bytes are not UTF-8 text
            return _error(422, f"the body is not valid JSON ({error.__cause__ or error.detail}); "
                               "send a JSON object encoded as UTF-8", "body")
        response = _error(error.status_code, str(error.detail), None)
        response.headers.update(error.headers or {})
        return response

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        content_type = request.headers.get("content-type", "")
        if request.url.path in BODIES and "json" not in content_type:
            return _error(422, f"the body must be JSON, sent with the header content-type: application/json "
                               f"(got {content_type or 'no content-type'})", "body")
        problems: dict[str, str] = {}  # field -> message; the members of a union (text) give one message
        errors = sorted(error.errors(), key=lambda e: e.get("type") != "extra_forbidden")  # a misspelt name first
        for e in errors:
            field, message = _describe(e, BODIES.get(request.url.path))
            problems.setdefault(field, message)
        fields = list(problems)
        return _error(422, "; ".join(problems[f] for f in fields[:3]), fields[0] if fields else None)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception) -> JSONResponse:
        log.exception("error while serving %s", request.url.path)
        return _error(500, f"internal error: {type(error).__name__}: {error}", None)


def _error(status: int, detail: str, field: str | None) -> JSONResponse:
    return JSONResponse({"detail": detail, "field": field}, status_code=status)


def _describe(error: dict[str, Any], body: type[BaseModel] | None) -> tuple[str, str]:
    """(field, one-line message) for one pydantic error: the field's dotted name, the problem, what was sent."""
    loc = [str(part) for part in error.get("loc", ()) if part != "body"]
    kind = error.get("type", "")
    union = [part for part in loc if part in UNION_TAGS]
    if union:  # a value that fits no member of a union, e.g. text: 5 for ``str | list[str]``
        at = loc.index(union[0])
        field = ".".join(loc[:at])
        if loc[at + 1:]:  # an item of the list member: text[1]
            item = f"{field}[{']['.join(loc[at + 1:])}]"
            return item, f"{item} must be a string (got {_shown(error.get('input'))})"
        return field, f"{field} must be {UNION_TAGS[union[0]]} (got {_shown(error.get('input'))})"
    if kind == "json_invalid":
        where = error.get("ctx", {}).get("error", "")
        return "body", f"the body is not valid JSON ({where}); send a JSON object such as {{\"text\": \"Hello.\"}}"
    field = ".".join(loc) or "body"
    if kind == "extra_forbidden" and body is not None:
        names = list(body.model_fields)
        near = difflib.get_close_matches(loc[-1], names, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        return field, f"unknown field {field!r}; {hint}the fields are {', '.join(names)}"
    if kind == "missing":
        return field, f"{field} is required" if loc else "the body is missing; send a JSON object"
    if field == "body":
        return field, f"the body must be a JSON object with named fields: {error.get('msg', '')}"
    return field, f"{field}: {error.get('msg', 'invalid value')} (got {_shown(error.get('input'))})"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
