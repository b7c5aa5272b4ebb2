"""A bounded loopback soak of ``seqmap serve``: the short version of ``python bench/serve.py --soak``.

A real server process (``python -m seqmap.serve``) on a free loopback port gets a few hundred requests
from concurrent clients: translations (greedy, beam, with attention), invalid and non-UTF-8 bodies,
bodies over the size limit, /health, and clients that hang up mid-request (after the whole request,
halfway through the body, halfway through the headers; half of them with a reset). The traffic and
the measurements are bench/serve.py's own (``soak``), so the suite and the long bench run one code path.

Checked: no 5xx, no request left unanswered (each has a timeout), no failed connection; afterwards the
server's threads and open file descriptors come back to where they were after the warm-up, no request
is still counted as waiting, and its resident memory grew by less than a bound any machine meets.
"""

import importlib.util
import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "serve.py"
LETTERS = "abcdefghij"  # the words of conftest.py's reverse task
MAX_RSS_GROWTH_MIB = 64  # a leak of a few KiB per request over 600 requests stays far below; a real one does not

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(),
                                reason="reads the server's memory and threads from /proc (Linux)")


@pytest.fixture(scope="module")
def bench():
    """bench/serve.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("bench_serve", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 9))) for _ in range(n)]


def test_a_soak_with_clients_hanging_up_leaves_the_server_as_it_found_it(bench, translation_run_dir):
    server = bench.Server(translation_run_dir, threads=1, max_batch=8, wait_ms=2)
    try:
        server.wait_ready(timeout=90)
        row = bench.soak(server, sentences(600, seed=1), clients=16, disconnect_share=0.2, warmup=150,
                         timeout=20, settle_s=10, seed=3)
    finally:
        server.stop()
    assert bench.soak_failures(row, MAX_RSS_GROWTH_MIB) == [], row
    assert row["health"] == "ok" and row["503"] == 0, row
    # every kind of traffic happened: answers, refusals, and clients gone mid-request
    assert row["ok"] > 300 and row["4xx"] > 30 and row["disconnects"] > 60, row
    assert row["ok"] + row["4xx"] + row["disconnects"] == row["requests"], row
