"""Load test of ``seqmap serve`` on loopback: dynamic batching against one request at a time, in one run.

    python bench/serve.py                        # 500 requests from 32 concurrent clients, toy model
    python bench/serve.py --quick                # smoke test: 120 requests, 8 clients
    python bench/serve.py --run-dir runs/en-zh   # a trained run instead of the toy (sentences: --input FILE)
    python bench/serve.py --json out.json        # also write the rows as JSON

Each mode starts its own server process (``python -m seqmap.serve RUN --threads T --max-batch B
--wait-ms W`` on a free 127.0.0.1 port), waits for /health, sends ``--warmup`` requests, then
``--requests`` POST /translate requests (one sentence each, greedy unless --beam) from ``--clients``
concurrent keep-alive connections (a minimal asyncio HTTP/1.1 client, see ``Connection``), and stops
the server. Reported: errors (a non-200 answer or a failed
connection), requests per second over the timed requests, latency p50/p95 (send to full answer), and the
mean requests per decoded batch read from the server's /health. The answers of the two modes are compared
sentence by sentence (batching must not change a translation).

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
    from seqmap.training.trainer import train

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

    def __init__(self, run_dir: Path, threads: int, max_batch: int, wait_ms: float) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "seqmap.serve", str(run_dir), "--port", str(self.port), "--threads",
             str(threads), "--max-batch", str(max_batch), "--wait-ms", str(wait_ms), "--max-texts", "1"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)

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
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        data = json.dumps(body).encode()
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        headers = dict(line.split(":", 1) for line in head[1:] if ":" in line)
        length = int(next(v for k, v in headers.items() if k.strip().lower() == "content-length"))
        return status, json.loads(await self.reader.readexactly(length))

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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def measure(run_dir: Path, mode: str, max_batch: int, wait_ms: float, args, sentences: list[str]) -> dict:
    server = Server(run_dir, args.threads, max_batch, wait_ms)
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
    row = {"mode": mode, "max_batch": max_batch, "wait_ms": wait_ms, "requests": len(sentences),
           "clients": args.clients, "beam": args.beam, "threads": args.threads, "errors": errors,
           "req_s": len(answers) / wall, "p50_ms": 1000 * statistics.median(latencies),
           "p95_ms": 1000 * percentile(latencies, 95), "mean_batch_requests": requests / max(batches, 1),
           "max_batch_requests": after["max_batch_requests"], "wall_s": wall,
           "model_busy": (after["busy_seconds"] - before["busy_seconds"]) / wall}
    return row, answers


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, help="a trained run to serve (default: train the toy model)")
    parser.add_argument("--input", type=Path, help="sentences to send, one per line (default: toy sentences)")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients")
    parser.add_argument("--max-batch", type=int, default=32, help="the batched mode's max batch (sentences)")
    parser.add_argument("--wait-ms", type=float, default=5.0, help="the batched mode's wait window")
    parser.add_argument("--beam", type=int, default=1, help="beam size of every request (1 = greedy)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the server")
    parser.add_argument("--warmup", type=int, default=32, help="requests sent before timing")
    parser.add_argument("--toy-steps", type=int, default=300, help="training steps of the toy model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke test: 120 requests, 8 clients")
    parser.add_argument("--json", type=Path, help="also write the rows to this file as a JSON list; "
                        "speedup = req/s / the one-at-a-time mode's req/s")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.clients, args.warmup, args.toy_steps = 120, 8, 8, 100
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

        print(f"torch {torch.__version__}; {cpu_name()} ({os.cpu_count()} cores), server threads {args.threads}; "
              f"{args.requests} requests from {args.clients} clients, beam {args.beam}; "
              f"load average {os.getloadavg()[0]:.2f}")
        rows, answers = [], []
        for mode, max_batch, wait_ms in (("batched", args.max_batch, args.wait_ms), ("one at a time", 1, 0.0)):
            row, got = measure(run_dir, mode, max_batch, wait_ms, args, sentences)
            rows.append(row)
            answers.append(got)

    same = sum(answers[0].get(i) == answers[1].get(i) for i in range(len(sentences)))
    for row in rows:
        row["speedup"] = row["req_s"] / rows[-1]["req_s"]
        row["agree_with_one_at_a_time"] = same
        row["cpu"] = cpu_name()
    print(f"\n{'mode':>14} {'max batch':>9} {'wait ms':>7} {'requests':>8} {'errors':>6} {'req/s':>7} "
          f"{'p50 ms':>7} {'p95 ms':>7} {'batch':>6} {'busy':>5} {'speedup':>7}")
    for r in rows:
        print(f"{r['mode']:>14} {r['max_batch']:>9} {r['wait_ms']:>7g} {r['requests']:>8} {r['errors']:>6} "
              f"{r['req_s']:>7.1f} {r['p50_ms']:>7.1f} {r['p95_ms']:>7.1f} {r['mean_batch_requests']:>6.1f} "
              f"{r['model_busy']:>5.2f} {r['speedup']:>7.2f}")
    print(f"batch = mean requests per decoded batch; busy = share of the time the model was decoding; "
          f"{same}/{len(sentences)} answers identical in both modes; load average at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {args.json}")
    if any(r["errors"] for r in rows) or same != len(sentences):
        raise SystemExit("errors or disagreeing answers: see the table")


if __name__ == "__main__":
    main()
