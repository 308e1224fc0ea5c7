"""Webhook ingest with the dashboard open and streaming, against none open (issue 14 §2).

    .venv/bin/python bench/dashboard_load.py [--deliveries N] [--runs R] [--senders 32] [--pages 0,4]

Starts `switchboard-local serve` on a free loopback port with a GitHub-style
source (bench/webhooks.py), and for each page count P first opens P pages in
another process: each holds the live stream (``GET /api/stream``) and, on
every message, re-fetches ``/api/queues`` as the queue page does. Then S
senders post correctly signed deliveries, and the run reports accepted
deliveries/s, p50/p99 latency and the re-fetches the pages made, as medians
over R runs; the page counts are measured interleaved, round after round.
Every answer must be 202 and every delivery stored. Writes
bench/results-dashboard.json.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _webhooks() -> Any:
    spec = importlib.util.spec_from_file_location("bench_webhooks", Path(__file__).with_name("webhooks.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- the pages (run in their own process)


async def _read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = re.search(rb"(?i)\r\ncontent-length: *([0-9]+)", head)
    return await reader.readexactly(int(length.group(1)) if length else 0)


async def _page(port: int, token: str, ready: asyncio.Event, counts: list[int], index: int, opened: list[int]) -> None:
    """One open page: the stream, and a second keep-alive connection for its re-fetches (each with the token)."""
    head = f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
    stream_r, stream_w = await asyncio.open_connection("127.0.0.1", port)
    fetch_r, fetch_w = await asyncio.open_connection("127.0.0.1", port)
    stream = f"GET /api/stream?topics=queues,todos,events HTTP/1.1\r\n{head}Accept: text/event-stream\r\n\r\n"
    stream_w.write(stream.encode())
    await stream_r.readuntil(b"\r\n\r\n")
    fetch = f"GET /api/queues HTTP/1.1\r\n{head}\r\n".encode()
    while True:
        line = await stream_r.readline()
        if not line:
            return
        if line.startswith(b"event: ready"):
            opened[0] += 1
            if opened[0] == len(counts):
                ready.set()
        elif line.startswith(b"event: change"):
            fetch_w.write(fetch)
            await _read_answer(fetch_r)
            counts[index] += 1


async def _pages(port: int, token_file: str, n: int) -> None:
    token = Path(token_file).read_text().strip()
    counts = [0] * n
    opened = [0]
    ready = asyncio.Event()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    tasks = [asyncio.create_task(_page(port, token, ready, counts, i, opened)) for i in range(n)]
    await ready.wait()
    print("ready", flush=True)
    await stop.wait()
    for task in tasks:
        task.cancel()
    print(json.dumps({"refetches": counts}), flush=True)


def open_pages(port: int, db: Path, n: int) -> subprocess.Popen[str]:
    """``n`` pages in another process, holding the dashboard's token (the file beside ``db``, made by `serve`)."""
    token_file = db.with_name(db.name + ".dashboard-token")
    args = ["--as-pages", str(n), "--port", str(port), "--token-file", str(token_file)]
    proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError("the pages did not open their streams")
    return proc


def close_pages(proc: subprocess.Popen[str]) -> list[int]:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return json.loads(out.strip().splitlines()[-1])["refetches"]


# ---------------------------------------------------------------- one run


def run(deliveries: int, senders: int, pages: int, tmp: Path, n: int) -> dict[str, float]:
    web = _webhooks()
    db = tmp / f"dashboard-{pages}-{n}.db"
    web.cli(db, "source", "add", "gh", "--kind", "github", "--secret-env", "BENCH_SECRET")
    port = web.free_port()
    server = web.start_server(db, port)
    viewers = None
    try:
        viewers = open_pages(port, db, pages) if pages else None
        requests = [
            web.signed_request(port, f"delivery-{i}", json.dumps({"ref": "refs/heads/main", "n": i}).encode())
            for i in range(deliveries)
        ]
        shares = [requests[i::senders] for i in range(senders)]
        latencies: list[float] = []
        failures: list[str] = []
        elapsed = asyncio.run(web.send_from(port, shares, latencies, failures))
        refetches = close_pages(viewers) if viewers is not None else []
        viewers = None
    finally:
        if viewers is not None:
            viewers.kill()
        server.terminate()
        server.wait(timeout=30)
    assert not failures, failures[:5]
    latencies.sort()
    return {
        "per_s": deliveries / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "refetches_per_page": statistics.mean(refetches) if refetches else 0.0,
        "seconds": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--senders", type=int, default=32)
    parser.add_argument("--pages", default="0,4")
    parser.add_argument("--as-pages", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--token-file", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.as_pages is not None:
        asyncio.run(_pages(args.port, args.token_file, args.as_pages))
        return
    os.environ.setdefault("BENCH_SECRET", "bench-secret")
    counts = [int(p) for p in args.pages.split(",")]
    seen: dict[int, list[dict[str, float]]] = {p: [] for p in counts}
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp:
        for n in range(args.runs):
            for pages in counts:  # interleaved: each round measures every page count
                seen[pages].append(run(args.deliveries, args.senders, pages, Path(tmp), n))
            print(f"round {n + 1} of {args.runs} done", file=sys.stderr)
    results = {
        f"{p}_pages": {k: round(statistics.median(r[k] for r in runs), 2) for k in ("per_s", "p50_ms", "p99_ms", "refetches_per_page")}
        for p, runs in seen.items()
    }
    base = results[f"{counts[0]}_pages"]["per_s"]
    print(f"{'pages open':<12}{'accepted/s':>12}{'p50 ms':>10}{'p99 ms':>10}{'refetches/page':>16}{'ratio':>8}"
          f"   ({args.deliveries} deliveries, {args.senders} senders, median of {args.runs})")  # fmt: skip
    for p in counts:
        r = results[f"{p}_pages"]
        r["ratio"] = round(r["per_s"] / base, 3)
        print(f"{p:<12}{r['per_s']:>12}{r['p50_ms']:>10}{r['p99_ms']:>10}{r['refetches_per_page']:>16}{r['ratio']:>8}")
    (ROOT / "bench" / "results-dashboard.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
