"""Dynamic batching: requests that arrive close together are decoded as one batch.

Decoding a batch of B sentences costs far less than B separate decodes on a CPU
(each step's Python and kernel-launch overhead is paid once per batch, and the
matrix products get wider), so under load a server answers more requests per
second if it waits a few milliseconds to gather company for each request.

    batcher = Batcher(run_batch, max_batch=32, wait_ms=5)    # run_batch(key, payloads) -> results
    batcher.start()
    result = await batcher.submit(key, payload, size=3)      # from any asyncio task
    batcher.stop()

One worker thread owns the model: it takes the oldest waiting request, keeps
collecting requests with the *same key* (the decode options that must be shared
by a batch: beam size, n-best, ...) for at most ``wait_ms`` or until ``max_batch``
items, calls ``run_batch(key, payloads)`` once, and hands each request its own
result through its asyncio future. Requests with another key wait, in arrival
order, for a later batch. The event loop never runs the model, so the server keeps
accepting requests (and rejecting bad ones) while a batch decodes.

If a batch raises, each of its requests is retried alone, so one poisonous
request fails only itself; the worker never dies of an exception.

At most ``max_waiting`` requests wait at a time: ``submit`` beyond that raises
``QueueFull`` (the server answers 503 with Retry-After). A request whose future was
cancelled while it waited (its client went away) is dropped before decoding.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

RunBatch = Callable[[Hashable, list[Any]], Sequence[Any]]  # (key, payloads) -> one result per payload


class QueueFull(RuntimeError):
    """``max_waiting`` requests already wait; try again after ``retry_after`` seconds."""

    def __init__(self, waiting: int, retry_after: int) -> None:
        super().__init__(f"the server is busy: {waiting} requests are waiting; retry in {retry_after} s")
        self.retry_after = retry_after


@dataclass
class _Pending:
    """One request waiting for the worker: its key, payload, size (sentences) and where its answer goes."""

    key: Hashable
    payload: Any
    size: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    queued_at: float = field(default_factory=time.perf_counter)


@dataclass
class BatchStats:
    """Counters for /health: how many batches ran and how large they were (in items and requests)."""

    batches: int = 0
    requests: int = 0
    items: int = 0
    failed_batches: int = 0
    failed_requests: int = 0
    dropped_requests: int = 0  # cancelled while waiting (client gone): never decoded
    refused_requests: int = 0  # QueueFull
    max_batch_items: int = 0
    max_batch_requests: int = 0
    batch_requests: Counter = field(default_factory=Counter)  # requests per batch -> how many batches
    busy_seconds: float = 0.0  # time spent in run_batch

    def as_dict(self) -> dict[str, Any]:
        return {
            "batches": self.batches, "requests": self.requests, "items": self.items,
            "failed_batches": self.failed_batches, "failed_requests": self.failed_requests,
            "dropped_requests": self.dropped_requests, "refused_requests": self.refused_requests,
            "max_batch_items": self.max_batch_items, "max_batch_requests": self.max_batch_requests,
            "mean_batch_requests": round(self.requests / self.batches, 3) if self.batches else 0.0,
            "batch_requests": {str(k): v for k, v in sorted(self.batch_requests.items())},
            "busy_seconds": round(self.busy_seconds, 3),
        }


class Batcher:
    """Gathers concurrent requests with equal keys into batches, decoded one batch at a time in a worker thread.

    Args:
        run_batch: ``(key, payloads) -> results``, one result per payload, in order;
            called only from the worker thread.
        max_batch: most items (sentences) per batch; 1 turns batching off. A request
            larger than this still runs, alone.
        wait_ms: how long the worker waits for company after the first request of a batch.
        on_start: called once in the worker thread before the first batch (e.g. to
            set torch's thread count for the thread that runs the model).
    """

    def __init__(self, run_batch: RunBatch, *, max_batch: int = 32, wait_ms: float = 5.0,
                 on_start: Callable[[], None] | None = None, max_waiting: int = 256) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if max_waiting < 1:
            raise ValueError(f"max_waiting must be >= 1, got {max_waiting}")
        self.max_waiting = max_waiting
        self._waiting = 0  # submitted, not yet taken into a batch (guarded by _lock)
        if wait_ms < 0:
            raise ValueError(f"wait_ms must be >= 0, got {wait_ms}")
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.wait = wait_ms / 1000.0
        self.on_start = on_start
        self.stats = BatchStats()
        self._inbox: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._held: deque[_Pending] = deque()  # taken from the inbox, waiting for a batch of their key
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards stats while /health reads them
        self._life = threading.Lock()  # makes start() and stop() one at a time
        self._signalled = False  # the end marker for the current worker is in the inbox

    # -- the asyncio side ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker thread; a no-op while one is alive (there is never a second worker on the model)."""
        with self._life:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._work, name="seqmap-batcher", daemon=True)
            self._signalled = False
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> bool:
        """Finish the batch in progress, then end the worker; requests still waiting get an error.

        Returns True once the worker has ended. If it is still inside a batch after ``timeout``
        seconds, returns False and keeps it: it ends after that batch, and until then ``start()``
        does not start a second worker beside it.
        """
        with self._life:
            thread = self._thread
            if thread is None:
                return True
            if not self._signalled:  # one end marker per worker: a second would stop the next worker at once
                self._inbox.put(None)
                self._signalled = True
            thread.join(timeout)
            if thread.is_alive():
                return False
            self._thread = None
            return True

    async def submit(self, key: Hashable, payload: Any, size: int = 1) -> Any:
        """Queue one request and wait for its result (or its exception)."""
        if self._thread is None:
            raise RuntimeError("the batcher is not running; call start() first")
        with self._lock:
            if self._waiting >= self.max_waiting:
                self.stats.refused_requests += 1
                raise QueueFull(self._waiting, retry_after=max(1, round(self.wait + 1)))
            self._waiting += 1
        loop = asyncio.get_running_loop()
        pending = _Pending(key, payload, max(size, 1), loop.create_future(), loop)
        self._inbox.put(pending)
        return await pending.future

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"max_batch": self.max_batch, "wait_ms": self.wait * 1000.0, "waiting": self._waiting,
                    **self.stats.as_dict()}

    # -- the worker thread ---------------------------------------------------------------------

    def _work(self) -> None:
        if self.on_start is not None:
            self.on_start()
        while True:
            batch = self._collect()
            if batch is None:
                break
            live = [p for p in batch if not p.future.done()]  # done while waiting = cancelled: client gone
            with self._lock:
                self._waiting -= len(batch)
                self.stats.dropped_requests += len(batch) - len(live)
            if live:
                self._run(live)
        for pending in [*self._held, *self._drain()]:
            _answer(pending, error=RuntimeError("the server is shutting down"))

    def _drain(self) -> list[_Pending]:
        out = []
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return out
            if item is not None:
                out.append(item)

    def _collect(self) -> list[_Pending] | None:
        """The next batch: the oldest request plus same-key requests arriving within the wait window."""
        first = self._held.popleft() if self._held else self._inbox.get()
        if first is None:
            return None
        batch, size = [first], first.size
        # requests held back earlier (another key) come first, in arrival order
        for pending in list(self._held):
            if size >= self.max_batch:
                break
            if pending.key == first.key and size + pending.size <= self.max_batch:
                self._held.remove(pending)
                batch.append(pending)
                size += pending.size
        deadline = time.perf_counter() + self.wait
        while size < self.max_batch:
            remaining = deadline - time.perf_counter()
            try:
                pending = self._inbox.get(timeout=remaining) if remaining > 0 else self._inbox.get_nowait()
            except queue.Empty:
                break
            if pending is None:  # stop() was called: finish this batch, then end
                self._inbox.put(None)
                break
            if pending.key == first.key and size + pending.size <= self.max_batch:
                batch.append(pending)
                size += pending.size
            else:
                self._held.append(pending)
        return batch

    def _run(self, batch: list[_Pending]) -> None:
        start = time.perf_counter()
        try:
            results = list(self.run_batch(batch[0].key, [p.payload for p in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"run_batch returned {len(results)} results for {len(batch)} requests")
        except Exception as error:  # noqa: BLE001 - the worker must survive anything a batch does
            self._record(batch, time.perf_counter() - start, failed=True)
            if len(batch) == 1:
                _answer(batch[0], error=error)
            else:  # retry alone, so only the request that causes the error fails
                for pending in batch:
                    self._run([pending])
            return
        self._record(batch, time.perf_counter() - start, failed=False)
        for pending, result in zip(batch, results):
            _answer(pending, result=result)

    def _record(self, batch: list[_Pending], seconds: float, failed: bool) -> None:
        with self._lock:
            s = self.stats
            s.busy_seconds += seconds
            if failed:
                s.failed_batches += 1
                s.failed_requests += len(batch) if len(batch) == 1 else 0
                return
            items = sum(p.size for p in batch)
            s.batches += 1
            s.requests += len(batch)
            s.items += items
            s.max_batch_items = max(s.max_batch_items, items)
            s.max_batch_requests = max(s.max_batch_requests, len(batch))
            s.batch_requests[len(batch)] += 1


def _answer(pending: _Pending, result: Any = None, error: BaseException | None = None) -> None:
    """Resolve a request's future from the worker thread (a request whose client went away is skipped)."""

    def resolve() -> None:
        if pending.future.done():  # cancelled: the client disconnected
            return
        if error is not None:
            pending.future.set_exception(error)
        else:
            pending.future.set_result(result)

    try:
        pending.loop.call_soon_threadsafe(resolve)
    except RuntimeError:  # the event loop is closed
        pass
