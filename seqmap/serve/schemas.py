"""The HTTP API's request and response bodies (pydantic), and the limits every request is checked against.

Types and fixed ranges (a beam size is a positive integer, top-p lies in [1e-6, 1],
a temperature in [1e-4, 1e4]: the ranges where the float32 arithmetic of decoding
stays finite) are declared on the fields, so FastAPI rejects a wrong type with 422
naming the field (strictly: ``"3"`` is no integer, ``"yes"`` no boolean; an integer
is a float) and the OpenAPI schema at ``/docs`` shows them. Limits that a server
operator sets (``Limits``: characters per text, texts per request, beam size, new
tokens) are checked by ``check_translate`` / ``check_generate`` and raise
``RequestError``, which the app turns into the same 422 shape. Unknown fields are
rejected (``extra="forbid"``), so a misspelt ``beam_sise`` is an error, not a
silently ignored option.

Every error body is ``{"detail": "<one line: the field, the problem, the fix>",
"field": "<dotted field name or null>"}``.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from seqmap.config import MAX_LENGTH_PENALTY, MAX_TEMPERATURE, MIN_TEMPERATURE, MIN_TOP_P
from seqmap.decoding.beam import n_best_error

MAX_SEED = 2**64 - 1  # the largest seed torch.Generator.manual_seed takes


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; beyond these the server answers 422 and says which limit."""

    max_chars: int = 1000  # characters per text (a source sentence or a prompt)
    max_texts: int = 32  # texts per /translate request
    max_beam: int = 8  # beam size
    max_new_tokens: int = 256  # tokens per /generate request
    max_body_bytes: int = 1_000_000  # request body size (checked before parsing: 413 beyond it)
    max_attention_weights: int = 2_000_000  # attention numbers one answer may carry (an upper bound, checked first)
    max_image_pixels: int = 4096 * 4096  # pixels of one /classify image (checked before it is decoded)
    max_audio_seconds: float = 60.0  # length of one /transcribe recording (read from its header, before decoding)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value <= 0:
                raise ValueError(f"Limits.{name} must be > 0, got {value}")


class RequestError(ValueError):
    """A request breaks a limit or asks for something this model cannot do; answered with ``status``."""

    def __init__(self, message: str, field: str | None = None, status: int = 422) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # no coercion: "3" is not a beam size, "no" not false


class TranslateRequest(_Strict):
    """``POST /translate``: one text or a list; beam search options; attention on request."""

    text: str | list[str] = Field(description="a sentence, or a list of sentences; an empty (or blank) sentence is "
                                  "not translated: its translation is empty, in its place in the list",
                                  examples=["Where is the station?"])
    beam_size: int | None = Field(None, ge=1, description="1 = greedy; default: the run's decode.beam_size")
    n_best: int = Field(1, ge=1, description="translations returned per text, best first (<= beam_size)")
    length_penalty: float | None = Field(None, ge=0.0, le=MAX_LENGTH_PENALTY,
                                        description="GNMT alpha; default: the run's")
    attention: bool = Field(False, description="also return each best translation's cross-attention")


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="sum of token log-probabilities, EOS included")
    normalized: float = Field(description="score / GNMT length penalty: what beam search ranks by")


class Attention(BaseModel):
    """Attention of each output token (rows) over the source tokens (columns), per layer and head.

    ``weights[l][h][i][j]``: layer l, head h, output token i, source token j. The last
    output row is the step that chose the end of sentence (``</s>``). RNN models have
    one layer and one head.
    """

    source_tokens: list[str]
    output_tokens: list[str]
    layers: int
    heads: int
    weights: list[list[list[list[float]]]]


class Translation(BaseModel):
    source: str
    translation: str = Field(description="the best translation")
    nbest: list[Hypothesis] = Field(description="n_best entries, best first (the first is `translation`); an empty "
                                                "text has one, empty, scored 0")
    attention: Attention | None = Field(None, description="when asked for; null for an empty source (nothing was "
                                                        "translated)")


class TranslateResponse(BaseModel):
    translations: list[Translation]


class GenerateRequest(_Strict):
    """``POST /generate``: continue a prompt with a language model."""

    prompt: str = Field("", description="text to continue. Empty is a prompt too: the model writes from the start "
                                    "of a new line, as `seqmap generate` without --prompt does (a language model "
                                    "needs no input to write; a translation model's empty text translates as empty)")
    max_new_tokens: int | None = Field(None, ge=1, description="default: the run's decode.max_new_tokens, capped")
    sample: bool = Field(True, description="sample (temperature, top-k, top-p); false = greedy")
    temperature: float | None = Field(None, ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE,
                                      description="default: the run's decode.temperature")
    top_k: int | None = Field(None, ge=0, description="keep the k most likely tokens (0 = off)")
    top_p: float | None = Field(None, ge=MIN_TOP_P, le=1.0, description="nucleus mass (1 = off)")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="sampling seed: same seed, same prompt, same text")
    attention: bool = Field(False, description="also return the self-attention of each generated token")


class GenerateResponse(BaseModel):
    prompt: str
    text: str = Field(description="the continuation, prompt excluded")
    tokens: int = Field(description="generated tokens, end of text excluded")
    finished: bool = Field(description="true if the model ended the text, false if max_new_tokens cut it")
    attention: Attention | None = Field(None, description="rows: generated tokens; columns: every token so far")


class ClassifyRequest(_Strict):
    """``POST /classify``: texts for a text classifier, or base64 image files for an image classifier."""

    text: str | list[str] | None = Field(None, description="a text classifier: a text, or a list of texts",
                                         examples=["a library for parsing JSON"])
    image: str | list[str] | None = Field(None, description="an image classifier: an image file (PNG, JPEG, ...) "
                                          "encoded in base64, or a list of them; a data: URL works too")
    top: int = Field(5, ge=1, description="classes returned per input, most likely first (capped at the classes)")
    attention: bool = Field(False, description="also return where the class token looked: attention rollout and "
                                               "the last layer's class-token row, over tokens or patches")


class ClassScore(BaseModel):
    label: str
    probability: float


class ClassAttention(BaseModel):
    """What the prediction read: one weight per input token (text) or patch (image, row-major), each row summing
    to 1. ``rollout``: attention rollout through every layer; ``last_layer``: the last layer's class-token row,
    mean of heads."""

    tokens: list[str] | None = Field(None, description="text: the input tokens")
    grid: list[int] | None = Field(None, description="image: [rows, columns] of patches")
    rollout: list[float]
    last_layer: list[float]


class Classification(BaseModel):
    label: str = Field(description="the most likely class")
    probability: float
    top: list[ClassScore] = Field(description="the `top` most likely classes, most likely first")
    attention: ClassAttention | None = None


class ClassifyResponse(BaseModel):
    classifications: list[Classification]


class TranscribeRequest(_Strict):
    """``POST /transcribe``: audio files (WAV, FLAC, OGG) encoded in base64, for a speech model."""

    audio: str | list[str] = Field(description="an audio file (WAV, FLAC, OGG: anything libsndfile reads) encoded "
                                   "in base64, or a list of them; a data: URL works too. Stereo is mixed down, "
                                   "another sample rate resampled to the model's", examples=[["UklGRi4A..."]])
    beam_size: int | None = Field(None, ge=1, description="1 = greedy; default: the run's decode.beam_size")
    attention: bool = Field(False, description="also return each transcript's cross-attention over the encoder "
                                               "frames, with the log-mel spectrogram to draw it under")


class Spectrogram(BaseModel):
    """The normalised log-mel features the encoder read: ``features[f][m]``, feature frame f, mel band m (0 =
    lowest). Feature frame f starts at f * ``feature_seconds``; encoder frame j (a column of the attention)
    covers [j, j + 1) * ``frame_seconds`` (4 feature hops: two stride-2 convolutions)."""

    features: list[list[float]]
    feature_seconds: float = Field(description="seconds between feature frames (the hop)")
    frame_seconds: float = Field(description="seconds between encoder frames (4 hops)")
    window_seconds: float = Field(description="seconds one feature frame's window spans")


class SpeechAttention(BaseModel):
    """Cross-attention of each output token (rows) over the encoder frames (columns), per layer and head, as
    ``/translate`` returns it: ``weights[l][h][i][j]``. Each row sums to 1 over the utterance's ``frames`` (padding
    is never read). The last row chose the end of sentence (``</s>``) when the transcript ended there."""

    output_tokens: list[str]
    frames: int = Field(description="encoder frames of the utterance: the columns")
    layers: int
    heads: int
    weights: list[list[list[list[float]]]]
    spectrogram: Spectrogram


class Transcription(BaseModel):
    transcript: str
    tokens: list[str] = Field(description="the transcript's tokens, end of sentence excluded")
    score: float = Field(description="sum of token log-probabilities, EOS included")
    normalized: float = Field(description="score / GNMT length penalty: what beam search ranks by")
    seconds: float = Field(description="the audio's duration")
    attention: SpeechAttention | None = None


class TranscribeResponse(BaseModel):
    transcriptions: list[Transcription]


class ErrorBody(BaseModel):
    detail: str
    field: str | None = None


def check_translate(req: TranslateRequest, limits: Limits, default_beam: int) -> list[str]:
    """The request's texts, after checking them against ``limits``; raises ``RequestError`` naming the field."""
    texts = [req.text] if isinstance(req.text, str) else list(req.text)
    if not texts:
        raise RequestError("text is an empty list; send a sentence or a list of sentences", "text")
    if len(texts) > limits.max_texts:
        raise RequestError(f"text has {len(texts)} sentences; at most {limits.max_texts} per request "
                           "(split them over several requests)", "text")
    for i, text in enumerate(texts):
        _check_chars(text, limits, "text" if isinstance(req.text, str) else f"text[{i}]")
    beam = req.beam_size or default_beam
    if beam > limits.max_beam:
        raise RequestError(f"beam_size {beam} is above this server's limit of {limits.max_beam}", "beam_size")
    if (why := n_best_error(req.n_best, beam, "beam_size", n_best_as=f"n_best {req.n_best}")) is not None:
        raise RequestError(f"{why}; raise beam_size or lower n_best", "n_best")
    return texts


def check_classify(req: ClassifyRequest, limits: Limits, images: bool) -> list[str]:
    """The texts (or, for an image classifier, base64 images) of a /classify request, checked against ``limits``."""
    want, other = ("image", "text") if images else ("text", "image")
    value = getattr(req, want)
    if getattr(req, other) is not None:
        raise RequestError(f"this server classifies {want}s; send {want}, "
                           f"not {other}", other)
    if value is None:
        raise RequestError(f"{want} is required: {'a base64 image file' if want == 'image' else 'a text'} or a list",
                           want)
    items = [value] if isinstance(value, str) else list(value)
    if not items:
        raise RequestError(f"{want} is an empty list; send one or more", want)
    if len(items) > limits.max_texts:
        raise RequestError(f"{want} has {len(items)} items; at most {limits.max_texts} per request", want)
    if want == "text":
        for i, text in enumerate(items):
            _check_chars(text, limits, "text" if isinstance(value, str) else f"text[{i}]")
    return items


def check_transcribe(req: TranscribeRequest, limits: Limits, default_beam: int) -> list[str]:
    """The base64 audio files of a /transcribe request, their count and beam size checked against ``limits``."""
    items = [req.audio] if isinstance(req.audio, str) else list(req.audio)
    if not items:
        raise RequestError("audio is an empty list; send one or more base64 audio files", "audio")
    if len(items) > limits.max_texts:
        raise RequestError(f"audio has {len(items)} files; at most {limits.max_texts} per request", "audio")
    beam = req.beam_size or default_beam
    if beam > limits.max_beam:
        raise RequestError(f"beam_size {beam} is above this server's limit of {limits.max_beam}", "beam_size")
    return items


def decode_base64(data: str, field: str, what: str) -> bytes:
    """The bytes of a file sent as base64 (or as a ``data:`` URL, as a browser's FileReader writes it)."""
    if data.startswith("data:"):
        head, _, data = data.partition(",")
        if not head.endswith(";base64"):
            raise RequestError(f"{field} is a data: URL without ;base64; send the file base64-encoded", field)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(f"{field} is not base64; send the {what} file's bytes base64-encoded", field) from None


def check_generate(req: GenerateRequest, limits: Limits) -> None:
    _check_chars(req.prompt, limits, "prompt")
    if req.max_new_tokens is not None and req.max_new_tokens > limits.max_new_tokens:
        raise RequestError(f"max_new_tokens {req.max_new_tokens} is above this server's limit of "
                           f"{limits.max_new_tokens}", "max_new_tokens")


def _check_chars(text: str, limits: Limits, name: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:  # a lone surrogate such as "\ud800": valid JSON, not text
        raise RequestError(f"{name} holds {text[err.start]!r} at character {err.start}, a lone UTF-16 surrogate "
                           "that is not a character; send the text as valid Unicode", name) from None
    if len(text) > limits.max_chars:
        raise RequestError(f"{name} has {len(text)} characters; at most {limits.max_chars} per text "
                           "(split long text into sentences)", name)


def limits_dict(limits: Limits) -> dict[str, Any]:
    return asdict(limits)
