"""Dynamic batching: concurrent requests are decoded together, never mixed across options, and a batch
gives each request exactly what it would get alone."""

import asyncio
import threading

import httpx
import pytest

from seqmap.serve.app import create_app
from seqmap.serve.batcher import Batcher

# -- the batcher alone, with a fake model ---------------------------------------------------------


def recording_batcher(**kwargs):
    calls = []
    lock = threading.Lock()

    def run_batch(key, payloads):
        with lock:
            calls.append((key, list(payloads)))
        if "bad" in payloads:
            raise ValueError("a bad payload")
        return [f"{key}:{p}" for p in payloads]

    return Batcher(run_batch, **kwargs), calls


async def submit_all(batcher, requests):
    return await asyncio.gather(*(batcher.submit(key, payload, size) for key, payload, size in requests),
                                return_exceptions=True)


def test_concurrent_requests_with_one_key_form_one_batch():
    batcher, calls = recording_batcher(max_batch=32, wait_ms=200)
    batcher.start()
    try:
        results = asyncio.run(submit_all(batcher, [("k", i, 1) for i in range(8)]))
    finally:
        batcher.stop()
    assert results == [f"k:{i}" for i in range(8)]  # each request gets its own result
    assert len(calls) == 1 and calls[0][1] == list(range(8))
    assert batcher.stats.max_batch_requests == 8 and batcher.stats.batch_requests == {8: 1}


def test_batches_never_mix_keys_and_respect_max_batch():
    batcher, calls = recording_batcher(max_batch=5, wait_ms=100)
    batcher.start()
    requests = [("beam1" if i % 3 else "beam4", i, 1 + i % 2) for i in range(20)]
    try:
        results = asyncio.run(submit_all(batcher, requests))
    finally:
        batcher.stop()
    assert results == [f"{key}:{payload}" for key, payload, _ in requests]
    sizes = {payload: size for _, payload, size in requests}
    for key, payloads in calls:
        assert all(("beam1" if p % 3 else "beam4") == key for p in payloads)
        assert sum(sizes[p] for p in payloads) <= 5
    assert sorted(p for _, payloads in calls for p in payloads) == list(range(20))  # each decoded once
    assert batcher.stats.max_batch_requests > 1


def test_an_error_fails_only_its_own_request_and_the_worker_goes_on():
    batcher, calls = recording_batcher(max_batch=8, wait_ms=100)
    batcher.start()
    try:
        results = asyncio.run(submit_all(batcher, [("k", "a", 1), ("k", "bad", 1), ("k", "b", 1)]))
        again = asyncio.run(submit_all(batcher, [("k", "c", 1)]))
    finally:
        batcher.stop()
    assert results[0] == "k:a" and results[2] == "k:b"
    assert isinstance(results[1], ValueError) and "bad payload" in str(results[1])
    assert again == ["k:c"]
    assert batcher.stats.failed_batches == 2 and batcher.stats.failed_requests == 1  # the batch, then "bad" alone


def test_a_batch_with_a_result_missing_fails_only_that_request_and_never_hangs():
    """run_batch must give one result per payload: a batch that gives fewer is retried one request at a time, so
    the request whose result is missing gets an error naming the counts, the others their results."""
    calls = []

    def run_batch(key, payloads):
        calls.append(list(payloads))
        return [f"{key}:{p}" for p in payloads if p != "lost"]

    batcher = Batcher(run_batch, max_batch=8, wait_ms=100)
    batcher.start()
    try:
        results = asyncio.run(submit_all(batcher, [("k", "a", 1), ("k", "lost", 1), ("k", "b", 1)]))
    finally:
        batcher.stop()
    assert results[0] == "k:a" and results[2] == "k:b"
    assert isinstance(results[1], RuntimeError)
    assert str(results[1]) == "run_batch returned 0 results for 1 requests"
    assert calls == [["a", "lost", "b"], ["a"], ["lost"], ["b"]]
    assert batcher.stats.failed_batches == 2 and batcher.stats.failed_requests == 1


def test_the_batcher_refuses_bad_settings_and_requests_before_start():
    for kwargs, message in [(dict(max_batch=0), "max_batch must be >= 1, got 0"),
                            (dict(max_waiting=0), "max_waiting must be >= 1, got 0"),
                            (dict(wait_ms=-1.0), "wait_ms must be >= 0, got -1.0")]:
        with pytest.raises(ValueError, match=message):
            Batcher(lambda key, payloads: payloads, **kwargs)
    batcher = Batcher(lambda key, payloads: payloads)
    with pytest.raises(RuntimeError, match=r"the batcher is not running; call start\(\) first"):
        asyncio.run(batcher.submit("k", "a"))
    assert batcher.stop() is True  # stopping a batcher that never started is a no-op


def test_max_batch_one_serves_one_request_at_a_time():
    batcher, calls = recording_batcher(max_batch=1, wait_ms=50)
    batcher.start()
    try:
        asyncio.run(submit_all(batcher, [("k", i, 1) for i in range(6)]))
    finally:
        batcher.stop()
    assert [len(payloads) for _, payloads in calls] == [1] * 6


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="max_batch"):
        Batcher(lambda k, p: p, max_batch=0)
    with pytest.raises(ValueError, match="wait_ms"):
        Batcher(lambda k, p: p, wait_ms=-1)


# -- the app: batched answers equal one-at-a-time answers -------------------------------------------

SENTENCES = ["a b c", "d e f g", "h i", "j a b c d e", "b", "c d e", "f g h i j", "a a b b", "i h g", "e d c b a",
             "g", "h h", "a c e g i", "b d f h j", "c", "j i"]


async def post_concurrently(app, path, bodies):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        responses = await asyncio.gather(*(client.post(path, json=body) for body in bodies))
        health = (await client.get("/health")).json()
    app.state.batcher.stop()
    return [r.json() for r in responses], health


def serve(run, bodies, path="/translate", **settings):
    return asyncio.run(post_concurrently(create_app(run, **settings), path, bodies))


@pytest.mark.parametrize("beam_size", [1, 3])
def test_batched_translations_equal_one_at_a_time(translation_run, beam_size):
    bodies = [{"text": s, "beam_size": beam_size, "n_best": min(2, beam_size)} for s in SENTENCES]
    batched, health = serve(translation_run, bodies, max_batch=32, wait_ms=100)
    alone, alone_health = serve(translation_run, bodies, max_batch=1, wait_ms=0)
    assert health["batching"]["max_batch_requests"] > 1  # requests really were decoded together
    assert health["batching"]["batches"] < len(bodies)
    assert alone_health["batching"]["max_batch_requests"] == 1
    assert alone_health["batching"]["batches"] == len(bodies)
    for got, want in zip(batched, alone):
        (g,), (w,) = got["translations"], want["translations"]
        assert g["translation"] == w["translation"] and [h["text"] for h in g["nbest"]] == [
            h["text"] for h in w["nbest"]]
        assert [h["score"] for h in g["nbest"]] == pytest.approx([h["score"] for h in w["nbest"]], abs=1e-4)


def test_requests_with_different_options_are_answered_each_by_its_own_options(translation_run):
    bodies = [{"text": s, "beam_size": 1 + i % 2, "attention": i % 3 == 0} for i, s in enumerate(SENTENCES[:8])]
    batched, health = serve(translation_run, bodies, max_batch=32, wait_ms=100)
    alone, _ = serve(translation_run, bodies, max_batch=1, wait_ms=0)
    assert health["batching"]["batches"] >= 2  # two beam sizes cannot share a batch
    for body, got, want in zip(bodies, batched, alone):
        (g,), (w,) = got["translations"], want["translations"]
        assert g["translation"] == w["translation"]
        assert (g["attention"] is not None) == body["attention"]
        if body["attention"]:
            assert g["attention"]["output_tokens"] == w["attention"]["output_tokens"]


def test_batched_generation_equals_generation_alone(lm_run):
    # each request samples with its own seed (prompts of unequal length: tests/serve/test_generate_batching.py)
    bodies = [{"prompt": p, "max_new_tokens": 16, "seed": i} for i, p in enumerate(["to be", "or no", "that "] * 3)]
    batched, health = serve(lm_run, bodies, path="/generate", max_batch=32, wait_ms=100)
    alone, _ = serve(lm_run, bodies, path="/generate", max_batch=1, wait_ms=0)
    assert health["batching"]["max_batch_requests"] > 1
    assert [r["text"] for r in batched] == [r["text"] for r in alone]
    assert len({r["text"] for r in batched}) > 1  # different seeds, different texts


def test_a_stop_that_times_out_keeps_the_worker_and_start_never_runs_a_second_one():
    release, entered = threading.Event(), threading.Event()

    def slow(key, payloads):
        entered.set()
        release.wait(10)
        return payloads

    batcher = Batcher(slow, max_batch=1, wait_ms=0)
    batcher.start()

    async def one():
        return await batcher.submit("k", "x")

    runner = threading.Thread(target=lambda: asyncio.run(one()), daemon=True)
    runner.start()
    assert entered.wait(10)
    assert batcher.stop(timeout=0.05) is False  # still inside its batch
    batcher.start()
    workers = [t for t in threading.enumerate() if t.name == "seqmap-batcher"]
    assert len(workers) == 1, workers
    release.set()
    runner.join(10)
    assert batcher.stop(timeout=10) is True
    assert not any(t.name == "seqmap-batcher" and t.is_alive() for t in threading.enumerate())
    batcher.start()  # a new worker after a clean stop serves again
    try:
        assert asyncio.run(one()) == "x"
    finally:
        batcher.stop()


def _blocked_batcher(**kwargs):
    """A batcher whose first batch waits for ``release``; ``calls`` records each batch's payloads."""
    release, entered, calls = threading.Event(), threading.Event(), []

    def run_batch(key, payloads):
        calls.append(list(payloads))
        entered.set()
        release.wait(10)
        return payloads

    return Batcher(run_batch, max_batch=1, wait_ms=0, **kwargs), release, entered, calls


def test_the_queue_is_bounded_and_refuses_with_a_retry_time():
    from seqmap.serve.batcher import QueueFull

    batcher, release, entered, _ = _blocked_batcher(max_waiting=2)
    batcher.start()

    async def scenario():
        first = asyncio.ensure_future(batcher.submit("k", "a"))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)  # "a" is decoding
        waiting = [asyncio.ensure_future(batcher.submit("k", p)) for p in ("b", "c")]
        await asyncio.sleep(0)
        with pytest.raises(QueueFull, match="2 requests are waiting") as refused:
            await batcher.submit("k", "d")
        assert refused.value.retry_after >= 1
        release.set()
        return await asyncio.gather(first, *waiting)

    try:
        assert asyncio.run(scenario()) == ["a", "b", "c"]
    finally:
        release.set()
        batcher.stop()
    assert batcher.stats.refused_requests == 1


def test_a_request_cancelled_while_waiting_is_never_decoded():
    batcher, release, entered, calls = _blocked_batcher()
    batcher.start()

    async def scenario():
        first = asyncio.ensure_future(batcher.submit("k", "a"))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
        gone = asyncio.ensure_future(batcher.submit("k", "gone"))
        kept = asyncio.ensure_future(batcher.submit("k", "kept"))
        await asyncio.sleep(0)
        gone.cancel()  # its client disconnected
        await asyncio.sleep(0)
        release.set()
        return await asyncio.gather(first, kept)

    try:
        assert asyncio.run(scenario()) == ["a", "kept"]
    finally:
        release.set()
        batcher.stop()
    assert calls == [["a"], ["kept"]]
    assert batcher.stats.dropped_requests == 1


def test_a_client_that_disconnects_cancels_its_waiting_request():
    from seqmap.serve.app import ClientGone, _unless_gone

    class GoneAfterFirstPoll:
        polls = 0

        async def is_disconnected(self):
            self.polls += 1
            return self.polls > 1

    async def scenario():
        forever = asyncio.get_running_loop().create_future()  # a batcher future that would never resolve
        with pytest.raises(ClientGone):
            await _unless_gone(GoneAfterFirstPoll(), forever)
        await asyncio.sleep(0)
        return forever.cancelled()

    assert asyncio.run(scenario())  # the batcher sees a cancelled future and drops the request

    async def answered():
        done = asyncio.get_running_loop().create_future()
        done.set_result("ok")
        return await _unless_gone(GoneAfterFirstPoll(), done)

    assert asyncio.run(answered()) == "ok"
