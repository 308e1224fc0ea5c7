"""Webhook ingest over loopback HTTP, at full durability.

    .venv/bin/python bench/webhooks.py [--deliveries N] [--runs R] [--senders 1,32]

Starts `switchboard-local serve` on a free loopback port with a GitHub-style
source, sends correctly signed deliveries from S concurrent senders (one
keep-alive connection each, requests signed before the clock starts), and reports accepted deliveries/s and p50/p99
latency as medians over R runs. Every answer must be 202 and every delivery
stored, or the run fails. Writes bench/results-webhooks.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import re
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECRET = b"bench-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(db: str | Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "switchboard_local", *args, "--db", str(db)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"switchboard-local {' '.join(args)}: {done.stderr.strip()}")


def start_server(db: str | Path, port: int, workers: int = 1) -> subprocess.Popen[bytes]:
    """`serve` on ``port``, answered once every one of its ``workers`` processes serves."""
    env = {**os.environ, "BENCH_SECRET": SECRET.decode()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "switchboard_local", "serve", "--port", str(port), "--db", str(db),
         "--workers", str(workers)],
        env=env,
        stderr=subprocess.PIPE,
    )
    serving = threading.Semaphore(0)

    def drain() -> None:  # its log is read to the end, so that a full pipe never holds it up
        assert proc.stderr is not None
        for line in proc.stderr:
            if b"serving on http://" in line:
                serving.release()

    threading.Thread(target=drain, daemon=True).start()
    for _ in range(workers):
        if not serving.acquire(timeout=30):
            proc.kill()
            raise RuntimeError("serve did not start")
    return proc


def signed_request(port: int, delivery: str, body: bytes) -> bytes:
    """One whole HTTP/1.1 request, signed before the clock starts: the sender's
    HMAC and header formatting are not the receiver's cost."""
    signature = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    head = (
        f"POST /hooks/gh HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"X-GitHub-Event: push\r\nX-GitHub-Delivery: {delivery}\r\nX-Hub-Signature-256: {signature}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def send_all(port: int, requests: list[bytes], latencies: list[float], failures: list[str]) -> None:
    """One keep-alive connection, one request at a time, each answer read whole."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for request in requests:
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?i)\r\ncontent-length: *([0-9]+)", head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            latencies.append(time.perf_counter() - start)
            status = head.split(b" ", 2)[1]
            if status != b"202":
                failures.append(f"{status.decode()}: {head[:200]!r}")
    finally:
        writer.close()


async def send_from(port: int, shares: list[list[bytes]], latencies: list[float], failures: list[str]) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(send_all(port, share, latencies, failures) for share in shares))
    return time.perf_counter() - start


def run(
    deliveries: int, senders: int, tmp: Path, n: int, db: str | Path | None = None, workers: int = 1
) -> dict[str, float]:
    """One run against a fresh SQLite file in ``tmp``, or against ``db`` (a file or a
    PostgreSQL URL to a fresh database: bench/postgres.py's webhook measure), with
    ``workers`` processes answering (serve --workers)."""
    db = db if db is not None else tmp / f"webhooks-{senders}-{workers}-{n}.db"
    cli(db, "source", "add", "gh", "--kind", "github", "--secret-env", "BENCH_SECRET")
    port = free_port()
    server = start_server(db, port, workers)
    try:
        requests = [
            signed_request(port, f"delivery-{i}", json.dumps({"ref": "refs/heads/main", "after": f"{i:040x}", "n": i}).encode())
            for i in range(deliveries)
        ]
        shares = [requests[i::senders] for i in range(senders)]
        latencies: list[float] = []
        failures: list[str] = []
        elapsed = asyncio.run(send_from(port, shares, latencies, failures))
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert not failures, failures[:5]
    stored, todos = stored_counts(db)
    assert stored == deliveries and todos == deliveries, (stored, todos)
    latencies.sort()
    return {
        "per_s": deliveries / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def stored_counts(db: str | Path) -> tuple[int, int]:
    """(deliveries stored as events, todos) in a file or a PostgreSQL database."""
    queries = ("SELECT count(*) FROM events WHERE family <> 'operator'", "SELECT count(*) FROM todos")
    if isinstance(db, Path):
        with contextlib.closing(sqlite3.connect(db)) as conn:
            return tuple(conn.execute(q).fetchone()[0] for q in queries)  # type: ignore[return-value]
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        return tuple(conn.execute(q).fetchone()[0] for q in queries)  # type: ignore[index,return-value]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--senders", default="1,32")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp:
        for senders in (int(s) for s in args.senders.split(",")):
            runs = [run(args.deliveries, senders, Path(tmp), n) for n in range(args.runs)]
            results[f"{senders}_senders"] = {
                key: round(statistics.median(r[key] for r in runs), 2) for key in ("per_s", "p50_ms", "p99_ms")
            }
    print(f"{'senders':<14}{'accepted/s':>12}{'p50 ms':>10}{'p99 ms':>10}   ({args.deliveries} deliveries, median of {args.runs})")
    for name, r in results.items():
        print(f"{name:<14}{r['per_s']:>12}{r['p50_ms']:>10}{r['p99_ms']:>10}")
    (ROOT / "bench" / "results-webhooks.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
