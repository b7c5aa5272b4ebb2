"""POST /transcribe for a speech run: transcripts equal the model's own, attention over real frames, bad audio."""

import base64
import io

import numpy as np
import pytest
import soundfile
import torch
from fastapi.testclient import TestClient

from seqmap.data.audio import read_wav
from seqmap.data.batching import pad_waves
from seqmap.decoding.speech import transcribe, transcribe_nbest
from seqmap.decoding.text import resolve_config
from seqmap.serve.app import create_app
from seqmap.serve.schemas import Limits, TranscribeResponse
from seqmap.serve.transcribe import SpeechEngine, TranscribeJob

LIMITS = Limits(max_texts=4, max_beam=4, max_body_bytes=200_000, max_audio_seconds=2.0)


@pytest.fixture(scope="module")
def helpers(speech_task):
    return speech_task


@pytest.fixture(scope="module")
def client(speech_run):
    with TestClient(create_app(speech_run, limits=LIMITS, max_batch=8, wait_ms=2)) as c:
        yield c


def said(helpers, words: list[str], seed: int = 7) -> np.ndarray:
    """int16 samples at the model's rate: the tone of each word, with silences around them."""
    rng = np.random.default_rng(seed)
    silence = np.zeros(int(0.05 * helpers.RATE), np.int16)
    return np.concatenate([silence, *[np.concatenate([helpers.tone(helpers.WORDS[w], rng, 0.13), silence])
                                      for w in words]])


def encoded(path) -> str:
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


@pytest.fixture(scope="module")
def files(helpers, tmp_path_factory):
    """WAV files: two mono utterances at the model's rate, one stereo, one at 16 kHz (resampled by the server)."""
    root = tmp_path_factory.mktemp("audio")
    mono, short = said(helpers, ["high", "low", "mid"]), said(helpers, ["mid"], seed=3)
    return [helpers.wav_file(root / "mono.wav", mono), helpers.wav_file(root / "short.wav", short),
            helpers.wav_file(root / "stereo.wav", np.stack([mono, mono], 1).reshape(-1), channels=2),
            helpers.wav_file(root / "hi.wav", np.repeat(mono, 2), rate=2 * helpers.RATE)]


@pytest.mark.parametrize("beam_size", [1, None])
def test_transcripts_are_the_models(client, speech_run, files, beam_size):
    run = speech_run
    body = {"audio": [encoded(f) for f in files]}
    if beam_size:
        body["beam_size"] = beam_size
    r = client.post("/transcribe", json=body)
    assert r.status_code == 200, r.text
    answer = TranscribeResponse.model_validate(r.json()).transcriptions
    waves = [read_wav(f, run.model.frontend.sample_rate)[0] for f in files]
    decode = resolve_config(run.cfg.decode, {"beam_size": beam_size or run.cfg.decode.beam_size})
    expected = transcribe(run.model, run.tgt_tok, waves, decode)
    assert [a.transcript for a in answer] == expected
    assert expected[0] == expected[2] == "high low mid"  # stereo mixed down
    assert answer[3].transcript == "high low mid"  # 16 kHz resampled
    best = transcribe_nbest(run.model, waves, decode)
    for a, entries in zip(answer, best):
        assert a.tokens == run.tgt_tok.pieces(entries[0].output) and a.attention is None
        assert a.score == pytest.approx(entries[0].score, abs=1e-4)
    assert answer[0].seconds == pytest.approx(len(waves[0]) / run.model.frontend.sample_rate)
    one = client.post("/transcribe", json={"audio": encoded(files[1])}).json()["transcriptions"]  # a string: one file
    assert len(one) == 1 and one[0]["transcript"] == "mid"


def test_attention_rows_sum_to_one_over_the_real_frames(client, speech_run, files):
    run, frontend = speech_run, speech_run.model.frontend
    r = client.post("/transcribe", json={"audio": [encoded(files[1]), encoded(files[0])], "attention": True,
                                         "beam_size": 1})
    short, long = r.json()["transcriptions"]
    waves = [read_wav(f, frontend.sample_rate)[0] for f in files[1::-1]]
    frames = frontend.frame_lengths(torch.tensor([len(w) for w in waves])).tolist()
    assert frames[0] < frames[1]
    # decoded together, the short utterance's keys beyond its frames are padding: zero weight
    decode = resolve_config(run.cfg.decode, {"beam_size": 1})
    hyps = transcribe_nbest(run.model, waves, decode, need_attention=True)
    padded = hyps[0][0].attention
    assert padded.size(-1) == frames[1] and not padded[..., frames[0]:].any()
    for answer, n, hyp in zip((short, long), frames, (hyps[0][0], hyps[1][0])):
        att = answer["attention"]
        weights = torch.tensor(att["weights"], dtype=torch.float64)  # (L, H, T, S)
        assert att["frames"] == n and weights.shape == (1, 2, len(att["output_tokens"]), n)
        assert (att["layers"], att["heads"]) == (run.cfg.model.dec_layers, run.cfg.model.n_heads)
        assert weights.sum(-1) == pytest.approx(torch.ones(weights.shape[:-1], dtype=torch.float64), abs=1e-3)
        torch.testing.assert_close(weights, hyp.attention[..., :n].double(), atol=1e-4, rtol=0)
        assert att["output_tokens"] == [*answer["tokens"], "</s>"]
    spectrogram = long["attention"]["spectrogram"]
    features, mask = frontend.features(*pad_waves(waves[1:]))
    assert np.array(spectrogram["features"]) == pytest.approx(features[0, : int(mask.sum())].numpy(), abs=0.006)
    hop = frontend.logmel.hop / frontend.sample_rate
    assert spectrogram["feature_seconds"] == pytest.approx(hop)
    assert spectrogram["frame_seconds"] == pytest.approx(4 * hop)


def test_a_batch_gives_each_job_its_own_answers(speech_run, files):
    engine = SpeechEngine(speech_run, LIMITS)
    waves = [read_wav(f, engine.frontend.sample_rate)[0] for f in files]
    jobs = [TranscribeJob(waves[:2], True), TranscribeJob(waves[2:], False)]
    together = engine.run_transcribe(("transcribe", 2), jobs)
    alone = [engine.run_transcribe(("transcribe", 2), [job])[0] for job in jobs]
    for a, b in zip(together, alone):
        assert [x["transcript"] for x in a] == [x["transcript"] for x in b]
        assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-4)
    assert together[0][0]["attention"] is not None and together[1][0]["attention"] is None


def test_flac_and_ogg_files_and_data_urls_are_read(client, helpers):
    mono = said(helpers, ["low", "high"])
    for fmt in ("FLAC", "OGG"):
        buffer = io.BytesIO()
        soundfile.write(buffer, mono, helpers.RATE, format=fmt)
        url = f"data:audio/{fmt.lower()};base64," + base64.b64encode(buffer.getvalue()).decode()
        r = client.post("/transcribe", json={"audio": [url], "beam_size": 1})
        assert r.status_code == 200 and r.json()["transcriptions"][0]["transcript"] == "low high", (fmt, r.text)


def test_info_and_health_say_speech(client, speech_run):
    info = client.get("/info").json()
    assert info["task"] == "speech" and info["family"] == "speech"
    assert info["audio"]["sample_rate"] == speech_run.model.frontend.sample_rate
    assert info["attention"] == {"available": True, "layers": 1, "heads": 2}
    assert info["limits"]["max_audio_seconds"] == 2.0
    assert client.get("/health").json()["task"] == "speech"


def wav_bytes(samples: np.ndarray, rate: int = 8000, subtype: str = "PCM_16") -> str:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype=subtype)
    return base64.b64encode(buffer.getvalue()).decode()


GOOD = wav_bytes(np.zeros(4000, np.int16))


@pytest.mark.parametrize("body, field, words", [
    ({"audio": [GOOD, "not base64!"]}, "audio[1]", "audio[1] is not base64"),
    ({"audio": "data:audio/wav,abc"}, "audio", "without ;base64"),
    ({"audio": [""]}, "audio[0]", "audio[0] is empty (0 bytes)"),
    ({"audio": [GOOD, base64.b64encode(b"RIFF....WAVEjunk").decode()]}, "audio[1]", "cannot read audio[1] as audio"),
    ({"audio": [wav_bytes(np.zeros(0, np.int16))]}, "audio[0]", "holds no samples"),
    ({"audio": [wav_bytes(np.zeros(100, np.int16))]}, "audio[0]", "audio[0] is too short (0.013 s)"),
    ({"audio": [GOOD, wav_bytes(np.full(4000, np.nan, np.float32), subtype="FLOAT")]}, "audio[1]",
     "audio[1] holds NaN or infinite samples"),
    ({"audio": [wav_bytes(np.full(4000, 1e30, np.float32), subtype="FLOAT")]}, "audio[0]",
     "audio[0] has samples up to 1e+30, more than 1e+06 times full scale; scale the recording to [-1, 1]"),
    ({"audio": [wav_bytes(np.zeros(24000, np.int16))]}, "audio[0]", "lasts 3.0 s; at most 2 s per file"),
    ({"audio": []}, "audio", "audio is an empty list"),
    ({"audio": [GOOD] * 5}, "audio", "at most 4 per request"),
    ({"audio": GOOD, "beam_size": 5}, "beam_size", "above this server's limit of 4"),
    ({"audio": GOOD, "beam_size": 0}, "beam_size", "greater than or equal to 1"),
    ({}, "audio", "audio is required"),
    ({"audio": GOOD, "atention": True}, "atention", "did you mean 'attention'?"),
    ({"audio": 5}, "audio", "audio must be a string or a list of strings"),
])
def test_bad_audio_is_one_line_naming_the_field(client, body, field, words):
    r = client.post("/transcribe", json=body)
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    detail = r.json()["detail"]
    assert words in detail and "\n" not in detail, detail


def test_attention_over_the_limit_is_refused_before_decoding(speech_run):
    with TestClient(create_app(speech_run, limits=Limits(max_attention_weights=500))) as c:
        r = c.post("/transcribe", json={"audio": GOOD, "attention": True})
        assert r.status_code == 422 and r.json()["field"] == "attention" and "at most 500" in r.json()["detail"]
        assert c.post("/transcribe", json={"audio": GOOD}).status_code == 200


def test_routes_of_other_tasks_say_where_to_go(client, translation_run):
    r = client.post("/translate", json={"text": "a"})
    assert r.status_code == 409 and "holds a speech recognizer; POST /transcribe" in r.json()["detail"]
    assert client.post("/classify", json={"text": "a"}).status_code == 409
    with TestClient(create_app(translation_run, limits=LIMITS)) as other:
        r = other.post("/transcribe", json={"audio": GOOD})
        assert r.status_code == 409 and "holds a translation model; POST /translate" in r.json()["detail"]
