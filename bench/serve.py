"""Load test of ``seqmap serve`` on loopback: dynamic batching against one request at a time, in one run.

    python bench/serve.py                        # 500 requests from 32 concurrent clients, toy model
    python bench/serve.py --quick                # smoke test: 120 requests, 8 clients
    python bench/serve.py --run-dir runs/en-zh   # a trained run instead of the toy (sentences: --input FILE)
    python bench/serve.py --json out.json        # also write the rows as JSON
    python bench/serve.py --ct2                  # both modes also with the run's CTranslate2 export (--ct2)
    python bench/serve.py --soak                 # soak: 5,000 requests, 15% of clients hang up mid-request

Each mode starts its own server process (``python -m seqmap.serve RUN --threads T --max-batch B
--wait-ms W`` on a free 127.0.0.1 port), waits for /health, sends ``--warmup`` requests, then
``--requests`` POST /translate requests (one sentence each, greedy unless --beam) from ``--clients``
concurrent keep-alive connections (a minimal asyncio HTTP/1.1 client, see ``Connection``), and stops
the server. Reported: errors (a non-200 answer or a failed
connection), requests per second over the timed requests, latency p50/p95 (send to full answer), and the
mean requests per decoded batch read from the server's /health. The answers of every mode are compared
with seqmap's one at a time, sentence by sentence (batching must not change a translation). ``--ct2``
adds both modes served with the run's CTranslate2 export (``seqmap serve --ct2``; written first into a
temporary directory): their greedy answers must be seqmap's too (beams rank by CTranslate2's rule).
With ``--pin`` (the default on 2 cores or more) the server process runs on the first core and the load
generator on the others, so that neither takes the other's CPU time; ``--no-pin`` lets both run anywhere.

``--soak`` times nothing: one batched server gets a mix of valid, invalid and oversized requests and
clients that hang up mid-request (``soak``), and the script checks that every request was answered
(no 5xx, none hung) and that the server's threads, file descriptors and waiting requests came back to
where they were after the warm-up, with bounded RSS growth (read from /proc, so Linux only).

Without --run-dir the script first trains a toy model into a temporary directory: a 2+2-layer
Transformer (D=64, 4 heads, F=256) that learns to reverse sequences of 3-12 words over 20 letters (300
steps, a few seconds), with word tokenization. Traffic never leaves 127.0.0.1 and every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/machine.py

from machine import cpu_name  # noqa: E402

LETTERS = [chr(ord("a") + i) for i in range(20)]


def toy_sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 12))) for _ in range(n)]


def train_toy(root: Path, steps: int, threads: int) -> Path:
    """A small reverse-the-words Transformer run directory (seconds on one thread)."""
    import torch

    from seqmap.config import RunConfig, from_dict
    from seqmap.training.run_trainer import train

    torch.set_num_threads(threads)
    data = {"tokenizer": "word", "max_len": 32}
    for split, n, seed in (("train", 4000, 1), ("valid", 50, 2)):
        sources = toy_sentences(n, seed)
        (root / f"{split}.src").write_text("".join(s + "\n" for s in sources))
        (root / f"{split}.tgt").write_text("".join(" ".join(reversed(s.split())) + "\n" for s in sources))
        data[f"{split}_src"], data[f"{split}_tgt"] = str(root / f"{split}.src"), str(root / f"{split}.tgt")
    cfg = {"model": {"family": "transformer", "d_model": 64, "n_heads": 4, "d_ff": 256, "enc_layers": 2,
                     "dec_layers": 2, "dropout": 0.0},
           "data": data,
           "train": {"max_steps": steps, "max_tokens": 1500, "lr": 2e-3, "warmup": 50, "valid_every": steps,
                     "log_every": steps, "valid_bleu": False, "device": "cpu"},
           "decode": {"max_len_a": 1.0, "max_len_b": 5}}
    with open(os.devnull, "w") as devnull:
        train(from_dict(RunConfig, cfg), root / "run", stream=devnull)
    return root / "run"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m seqmap.serve`` in its own process, on a free loopback port."""

    def __init__(self, run_dir: Path, threads: int, max_batch: int, wait_ms: float,
                 cpus: set[int] | None = None, ct2: Path | None = None) -> None:
        """``cpus``: the cores the server process may run on (None: any), kept apart from the load generator's;
        ``ct2``: the run's CTranslate2 export, searched with (``seqmap serve --ct2``)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "seqmap.serve", str(run_dir), "--port", str(self.port), "--threads",
             str(threads), "--max-batch", str(max_batch), "--wait-ms", str(wait_ms), "--max-texts", "1",
             *([] if ct2 is None else ["--ct2", str(ct2)])],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
            preexec_fn=None if cpus is None else (lambda: os.sched_setaffinity(0, cpus)))

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.log.seek(0)
                raise SystemExit(f"the server exited with {self.process.returncode}:\n{self.log.read()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"the server did not answer {self.url}/health within {timeout:.0f} s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


class Connection:
    """A minimal keep-alive HTTP/1.1 client over asyncio streams: POST a JSON body, read the JSON answer.

    httpx costs about a millisecond of CPU per request here, which capped this script's load near 180
    requests/s on 2 cores (measured against GET /health) - below what the batched server answers. This
    client costs a fraction of that, so the table measures the server, not the load generator.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: dict) -> tuple[int, dict]:
        status, answer = await self.request("POST", path, json.dumps(body).encode())
        return status, json.loads(answer)

    async def request(self, method: str, path: str, data: bytes = b"",
                      content_type: str = "application/json") -> tuple[int, bytes]:
        """Send one request, read the whole answer: (status, body). Closes after ``connection: close``."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
                          f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in head[1:] if ":" in line)}
        answer = await self.reader.readexactly(int(headers["content-length"]))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, answer

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def load(port: int, sentences: list[str], clients: int, beam: int) -> tuple[list[float], int, float, dict]:
    """Send one request per sentence from ``clients`` concurrent connections: latencies, errors, seconds, answers."""
    latencies: list[float] = []
    answers: dict[int, str] = {}
    errors = 0
    next_index = 0

    async def worker() -> None:
        nonlocal next_index, errors
        connection = Connection(port)
        while next_index < len(sentences):  # bounded: one request per sentence
            i = next_index
            next_index += 1
            start = time.perf_counter()
            try:
                status, answer = await connection.post("/translate", {"text": sentences[i], "beam_size": beam})
            except (OSError, ValueError, asyncio.IncompleteReadError, StopIteration):
                errors += 1
                connection.close()  # a fresh connection for the next request
                continue
            latencies.append(time.perf_counter() - start)
            if status != 200:
                errors += 1
            else:
                answers[i] = answer["translations"][0]["translation"]
        connection.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return latencies, errors, time.perf_counter() - start, answers


def export(run_dir: Path, out: Path) -> Path:
    """The run's CTranslate2 export (``seqmap export ct2 RUN --out OUT``), for ``seqmap serve --ct2``."""
    from seqmap.hub.ct2 import export_ct2
    from seqmap.runs import load_run

    export_ct2(load_run(run_dir), out)
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def measure(run_dir: Path, mode: str, max_batch: int, wait_ms: float, args, sentences: list[str],
            ct2: Path | None = None) -> dict:
    server = Server(run_dir, args.threads, max_batch, wait_ms, args.server_cpus, ct2)
    try:
        server.wait_ready()
        asyncio.run(load(server.port, sentences[: args.warmup], min(args.clients, args.warmup), args.beam))
        before = httpx.get(f"{server.url}/health").json()["batching"]
        latencies, errors, wall, answers = asyncio.run(load(server.port, sentences, args.clients, args.beam))
        after = httpx.get(f"{server.url}/health").json()["batching"]
    finally:
        server.stop()
    batches = after["batches"] - before["batches"]
    requests = after["requests"] - before["requests"]
    row = {"mode": mode, "decoder": "seqmap" if ct2 is None else "ctranslate2", "max_batch": max_batch,
           "wait_ms": wait_ms, "requests": len(sentences),
           "clients": args.clients, "beam": args.beam, "threads": args.threads, "errors": errors,
           "server_cpus": sorted(args.server_cpus or []), "client_cpus": sorted(args.client_cpus or []),
           "req_s": len(answers) / wall, "p50_ms": 1000 * statistics.median(latencies),
           "p95_ms": 1000 * percentile(latencies, 95), "mean_batch_requests": requests / max(batches, 1),
           "max_batch_requests": after["max_batch_requests"], "wall_s": wall,
           "model_busy": (after["busy_seconds"] - before["busy_seconds"]) / wall}
    return row, answers


# -- soak: thousands of requests, some clients hanging up mid-request; the server must come back to rest ------

SOAK_MIX = {  # kind of request -> share of the traffic (the disconnecting kinds take --disconnect-share)
    "translate": 0.55, "beam": 0.12, "attention": 0.05, "invalid": 0.12, "not_utf8": 0.03, "too_large": 0.03,
    "health": 0.1,
}
HANG_UPS = ("while_waiting", "mid_body", "before_body")  # how a disconnecting client goes away


def process_state(pid: int) -> dict:
    """Resident memory (MiB), threads and open file descriptors of a process, read from /proc (Linux)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {"rss_mib": int(fields["VmRSS"].split()[0]) / 1024, "threads": int(fields["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


async def hang_up(port: int, how: str, sentence: str, rng: random.Random) -> None:
    """A client that sends (part of) a request on a fresh connection and goes away without reading an answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"text": sentence, "beam_size": rng.choice([1, 4])}).encode()
    head = (f"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    if how == "while_waiting":  # the whole request, then gone while it waits or decodes
        writer.write(head + body)
        await writer.drain()
        await asyncio.sleep(rng.uniform(0.0, 0.03))
    elif how == "mid_body":  # half the body announced by Content-Length
        writer.write(head + body[: len(body) // 2])
        await writer.drain()
        await asyncio.sleep(rng.uniform(0.0, 0.01))
    else:  # only part of the headers
        writer.write(head[: len(head) // 2])
        await writer.drain()
    if rng.random() < 0.5:
        writer.transport.abort()  # a reset (RST) instead of an orderly close
    else:
        writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass


async def soak_traffic(port: int, sentences: list[str], clients: int, disconnect_share: float, timeout: float,
                       seed: int) -> dict:
    """Send one request per sentence from ``clients`` concurrent clients, a share of them hanging up midway.

    Outcomes counted: ok (2xx), 4xx, 503 (busy), 5xx (other), hung (no answer within ``timeout``),
    errors (the connection failed), disconnects (requests abandoned on purpose).
    """
    counts = dict.fromkeys(("ok", "4xx", "503", "5xx", "hung", "errors", "disconnects"), 0)
    kinds, shares = list(SOAK_MIX), list(SOAK_MIX.values())
    next_index = 0

    async def client(number: int) -> None:
        nonlocal next_index
        rng = random.Random(seed * 1000 + number)
        connection = Connection(port)
        while next_index < len(sentences):  # bounded: one request per sentence
            sentence = sentences[next_index]
            next_index += 1
            if rng.random() < disconnect_share:
                try:
                    await asyncio.wait_for(hang_up(port, rng.choice(HANG_UPS), sentence, rng), timeout)
                    counts["disconnects"] += 1
                except (TimeoutError, OSError):
                    counts["errors"] += 1
                continue
            kind = rng.choices(kinds, shares)[0]
            method, path, data, content_type = soak_request(kind, sentence)
            try:
                if kind == "too_large":  # announced, never sent: the server refuses on the header
                    status = await asyncio.wait_for(too_large(port), timeout)
                else:
                    status, _ = await asyncio.wait_for(connection.request(method, path, data, content_type), timeout)
            except TimeoutError:
                counts["hung"] += 1
                connection.close()
                continue
            except (OSError, ValueError, KeyError, asyncio.IncompleteReadError):
                counts["errors"] += 1
                connection.close()
                continue
            outcome = "ok" if status < 300 else "503" if status == 503 else "5xx" if status >= 500 else "4xx"
            counts[outcome] += 1
        connection.close()

    await asyncio.gather(*(client(i) for i in range(clients)))
    return counts


async def too_large(port: int) -> int:
    """Announce a body over the server's default limit (1,000,000 bytes) and read the answer (413) to the headers.

    The body is never sent: a client writing it while the server closes the connection after its 413
    would see a reset that says nothing about the server.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000001\r\n\r\n")
        return int((await reader.readuntil(b"\r\n")).split()[1])
    finally:
        writer.close()


def soak_request(kind: str, sentence: str) -> tuple[str, str, bytes, str]:
    """(method, path, body, content type) of one request of the soak's mix."""
    if kind == "health":
        return "GET", "/health", b"", "application/json"
    body = {"text": sentence, "beam_size": 4 if kind == "beam" else 1, "attention": kind == "attention"}
    if kind == "invalid":
        body = {"txt": sentence, "beam_size": "wide"}
    data = json.dumps(body).encode()
    if kind == "not_utf8":
        data = data[:-2] + b'\xff"}'
    return "POST", "/translate", data, "application/json"


def soak(server: Server, sentences: list[str], clients: int, disconnect_share: float, warmup: int,
         timeout: float = 30.0, settle_s: float = 15.0, seed: int = 0) -> dict:
    """Warm the server up, read its RSS, threads and file descriptors, send the traffic, let it settle, read again.

    After the traffic the server has ``settle_s`` seconds for its threads, file descriptors and waiting
    requests to come back to where they were; the row says where they ended.
    """
    rng = random.Random(seed)
    asyncio.run(soak_traffic(server.port, [rng.choice(sentences) for _ in range(warmup)], min(clients, warmup),
                             disconnect_share, timeout, seed + 1))
    time.sleep(0.5)
    before = process_state(server.process.pid)
    start = time.perf_counter()
    counts = asyncio.run(soak_traffic(server.port, sentences, clients, disconnect_share, timeout, seed))
    wall = time.perf_counter() - start
    deadline = time.monotonic() + settle_s
    while True:
        after = process_state(server.process.pid)
        health = httpx.get(f"{server.url}/health", timeout=timeout).json()
        rested = (after["threads"] <= before["threads"] and after["fds"] <= before["fds"]
                  and health["batching"]["waiting"] == 0)
        if rested or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return {"bench": "soak", "requests": len(sentences), "clients": clients, "disconnect_share": disconnect_share,
            **counts, "rss_before_mib": round(before["rss_mib"], 1), "rss_after_mib": round(after["rss_mib"], 1),
            "rss_growth_mib": round(after["rss_mib"] - before["rss_mib"], 1),
            "threads_before": before["threads"], "threads_after": after["threads"],
            "fds_before": before["fds"], "fds_after": after["fds"], "waiting_after": health["batching"]["waiting"],
            "dropped_requests": health["batching"]["dropped_requests"], "health": health["status"],
            "wall_s": round(wall, 2), "req_s": round(len(sentences) / wall, 1)}


def soak_failures(row: dict, max_rss_growth_mib: float) -> list[str]:
    """What went wrong in a soak row (empty: the server answered everything and came back to rest)."""
    problems = [f"{row[k]} {k}" for k in ("5xx", "hung", "errors") if row[k]]
    if row["threads_after"] > row["threads_before"]:
        problems.append(f"threads {row['threads_before']} -> {row['threads_after']}")
    if row["fds_after"] > row["fds_before"]:
        problems.append(f"file descriptors {row['fds_before']} -> {row['fds_after']}")
    if row["waiting_after"]:
        problems.append(f"{row['waiting_after']} requests still counted as waiting")
    if row["rss_growth_mib"] > max_rss_growth_mib:
        problems.append(f"RSS grew {row['rss_growth_mib']} MiB (> {max_rss_growth_mib})")
    return problems


def run_soak(run_dir: Path, args, sentences: list[str]) -> list[dict]:
    server = Server(run_dir, args.threads, args.max_batch, args.wait_ms)
    try:
        server.wait_ready()
        row = soak(server, sentences, args.clients, args.disconnect_share, args.warmup, seed=args.seed)
    finally:
        server.stop()
    row.update(max_batch=args.max_batch, wait_ms=args.wait_ms, threads=args.threads, cpu=cpu_name())
    print(f"\n{'requests':>8} {'clients':>7} {'ok':>6} {'4xx':>6} {'503':>4} {'5xx':>4} {'hung':>4} {'errors':>6} "
          f"{'disconn':>7} {'RSS MiB before/after':>20} {'threads':>9} {'fds':>9} {'wall s':>7}")
    r = row
    print(f"{r['requests']:>8} {r['clients']:>7} {r['ok']:>6} {r['4xx']:>6} {r['503']:>4} {r['5xx']:>4} "
          f"{r['hung']:>4} {r['errors']:>6} {r['disconnects']:>7} {r['rss_before_mib']:>9.1f} / "
          f"{r['rss_after_mib']:<8.1f} {r['threads_before']:>4}/{r['threads_after']:<4} "
          f"{r['fds_before']:>4}/{r['fds_after']:<4} {r['wall_s']:>7.1f}")
    print(f"disconn = clients that hung up mid-request on purpose; the server dropped {r['dropped_requests']} "
          f"requests whose client had gone; threads and fds: the server process's, before/after")
    return [row]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, help="a trained run to serve (default: train the toy model)")
    parser.add_argument("--input", type=Path, help="sentences to send, one per line (default: toy sentences)")
    parser.add_argument("--requests", type=int, default=None, help="requests sent (default 500; --soak: 5000)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients")
    parser.add_argument("--max-batch", type=int, default=32, help="the batched mode's max batch (sentences)")
    parser.add_argument("--wait-ms", type=float, default=5.0, help="the batched mode's wait window")
    parser.add_argument("--beam", type=int, default=1, help="beam size of every request (1 = greedy)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the server")
    parser.add_argument("--warmup", type=int, default=None, help="requests sent before timing (default 32; "
                        "--soak: 300, before the server's memory, threads and file descriptors are read)")
    parser.add_argument("--toy-steps", type=int, default=300, help="training steps of the toy model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke test: 120 requests, 8 clients "
                        "(--soak: 300 requests, 16 clients)")
    parser.add_argument("--soak", action="store_true", help="instead of timing: a soak of one batched server "
                        "(--requests of a mix of valid, invalid and oversized requests, some clients hanging up "
                        "mid-request); fails on any 5xx, hung or failed request, or if threads, file descriptors "
                        "or waiting requests do not come back to where they were, or RSS grows too much")
    parser.add_argument("--disconnect-share", type=float, default=0.15,
                        help="--soak: share of the requests whose client hangs up midway (default 0.15)")
    parser.add_argument("--max-rss-growth", type=float, default=64.0,
                        help="--soak: most MiB the server's RSS may grow over the soak (default 64)")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                        help="timing: the server on core 0 and this load generator on the other cores, so that "
                             "the two do not take each other's CPU time (default on; needs 2 cores or more)")
    parser.add_argument("--ct2", action="store_true", help="also time both modes searching with the run's "
                        "CTranslate2 export (written first, as seqmap export ct2 writes it; served with --ct2)")
    parser.add_argument("--json", type=Path, help="also write the rows to this file as a JSON list; "
                        "speedup = req/s / the one-at-a-time mode's req/s")
    args = parser.parse_args(argv)
    args.requests = args.requests or (5000 if args.soak else 500)
    args.warmup = args.warmup if args.warmup is not None else (300 if args.soak else 32)
    if args.quick:
        args.requests, args.clients, args.warmup, args.toy_steps = 120, 8, 8, 100
        if args.soak:
            args.requests, args.clients, args.warmup = 300, 16, 100
    if not 0.0 <= args.disconnect_share <= 1.0:
        raise SystemExit(f"--disconnect-share must be in [0, 1], got {args.disconnect_share}")
    if not 0 < args.requests <= 100_000 or not 0 < args.clients <= 1024:
        raise SystemExit("--requests must be in 1..100000 and --clients in 1..1024")

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.run_dir
        if run_dir is None:
            start = time.perf_counter()
            run_dir = train_toy(Path(tmp), args.toy_steps, args.threads)
            print(f"trained the toy model in {time.perf_counter() - start:.1f} s")
        if args.input:
            pool = [line.strip() for line in args.input.read_text(encoding="utf-8").splitlines() if line.strip()]
        else:
            pool = toy_sentences(1000, args.seed + 10)
        rng = random.Random(args.seed)
        sentences = [rng.choice(pool) for _ in range(args.requests)]
        import torch

        cores = sorted(os.sched_getaffinity(0))
        args.server_cpus = args.client_cpus = None
        if args.pin and not args.soak and len(cores) >= 2:  # after training the toy on every core
            args.server_cpus, args.client_cpus = {cores[0]}, set(cores[1:])
            os.sched_setaffinity(0, args.client_cpus)
            print(f"pinned: server on core {cores[0]}, load generator on cores {cores[1:]}")
        print(f"torch {torch.__version__}; {cpu_name()} ({os.cpu_count()} cores), server threads {args.threads}; "
              f"{args.requests} requests from {args.clients} clients, beam {args.beam}; "
              f"load average {os.getloadavg()[0]:.2f}")
        if args.soak:
            rows = run_soak(run_dir, args, sentences)
            for row in rows:
                row["torch"] = torch.__version__
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1) + "\n")
                print(f"wrote {args.json}")
            problems = soak_failures(rows[0], args.max_rss_growth)
            if problems:
                raise SystemExit("soak failed: " + "; ".join(problems))
            print(f"soak passed; load average at the end {os.getloadavg()[0]:.2f}")
            return
        modes = [("batched", args.max_batch, args.wait_ms, None), ("one at a time", 1, 0.0, None)]
        if args.ct2:
            ct2 = export(run_dir, Path(tmp) / "ct2")
            modes += [("batched, ct2", args.max_batch, args.wait_ms, ct2), ("one at a time, ct2", 1, 0.0, ct2)]
        rows, answers = [], []
        for mode, max_batch, wait_ms, ct2 in modes:
            row, got = measure(run_dir, mode, max_batch, wait_ms, args, sentences, ct2)
            rows.append(row)
            answers.append(got)

    alone = rows[1]  # seqmap, one request at a time: what every mode is compared with
    for row, got in zip(rows, answers):
        row["speedup"] = row["req_s"] / alone["req_s"]
        row["agree_with_one_at_a_time"] = sum(got.get(i) == answers[1].get(i) for i in range(len(sentences)))
        row["cpu"] = cpu_name()
    print(f"\n{'mode':>18} {'max batch':>9} {'wait ms':>7} {'requests':>8} {'errors':>6} {'req/s':>7} "
          f"{'p50 ms':>7} {'p95 ms':>7} {'batch':>6} {'busy':>5} {'speedup':>7} {'agree':>6}")
    for r in rows:
        print(f"{r['mode']:>18} {r['max_batch']:>9} {r['wait_ms']:>7g} {r['requests']:>8} {r['errors']:>6} "
              f"{r['req_s']:>7.1f} {r['p50_ms']:>7.1f} {r['p95_ms']:>7.1f} {r['mean_batch_requests']:>6.1f} "
              f"{r['model_busy']:>5.2f} {r['speedup']:>7.2f} {r['agree_with_one_at_a_time']:>6}")
    print(f"batch = mean requests per decoded batch; busy = share of the time the model was decoding; speedup = "
          f"req/s over seqmap's one at a time; agree = answers identical to seqmap's one at a time (of "
          f"{len(sentences)}); load average at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {args.json}")
    # batching never changes an answer; the export's greedy answers are seqmap's (its beams rank by its own rule)
    must_agree = [r for r in rows if r["decoder"] == "seqmap" or args.beam == 1]
    if any(r["errors"] for r in rows) or any(r["agree_with_one_at_a_time"] != len(sentences) for r in must_agree):
        raise SystemExit("errors or disagreeing answers: see the table")


if __name__ == "__main__":
    main()
