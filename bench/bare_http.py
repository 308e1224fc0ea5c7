"""The HTTP ceiling for webhook ingest: the receiver's stack answering 202 and doing nothing else.

    .venv/bin/python bench/bare_http.py [--deliveries N] [--runs R] [--senders 1,32]

A bare Starlette app served the way `serve` serves the receiver (the same
uvicorn server and settings: http/limits.server, its guarded httptools
protocol and limits, uvloop, a socket bound by process.listen), whose
POST /hooks/{name} reads the body and answers 202 with a JSON body of the
receiver's shape: no source lookup, no verification, no storing. It is
driven by bench/webhooks.py's client (the same signed requests, S senders,
one keep-alive connection each), so webhook ingest is judged against what
this Python HTTP stack can answer at all on this machine, not against raw
inserts. Prints accepted/s and p50/p99 latency (medians over R runs) and
writes bench/results-bare-http.json.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _webhooks() -> Any:
    spec = importlib.util.spec_from_file_location("bench_webhooks", ROOT / "bench" / "webhooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve(port: int) -> None:
    """In the server process: the bare app on the receiver's server, until SIGTERM."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from switchboard_local import process
    from switchboard_local.http import limits

    async def hook(request: Request) -> Response:
        await request.body()
        return JSONResponse({"event_id": 0, "duplicate": False, "todos": []}, status_code=202)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/hooks/{name}", hook, methods=["POST"]), Route("/healthz", healthz, methods=["GET"])])
    sock = process.listen("127.0.0.1", port)
    server = limits.server(app, limits.Limits())
    factory = process._loop_factory()
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(server.serve(sockets=[sock]))


def start_server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the bare HTTP server did not start")


def run(deliveries: int, senders: int, tmp: Path | None = None, n: int = 0) -> dict[str, float]:
    """One run: the same requests bench/webhooks.py sends, answered by the bare app."""
    web = _webhooks()
    port = web.free_port()
    server = start_server(port)
    try:
        requests = [
            web.signed_request(port, f"delivery-{i}", json.dumps({"ref": "refs/heads/main", "after": f"{i:040x}", "n": i}).encode())
            for i in range(deliveries)
        ]
        shares = [requests[i::senders] for i in range(senders)]
        latencies: list[float] = []
        failures: list[str] = []
        elapsed = asyncio.run(web.send_from(port, shares, latencies, failures))
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert not failures, failures[:5]
    latencies.sort()
    return {
        "per_s": deliveries / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--senders", default="1,32")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the server process itself
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp:
        for senders in (int(s) for s in args.senders.split(",")):
            runs = [run(args.deliveries, senders, Path(tmp), n) for n in range(args.runs)]
            results[f"{senders}_senders"] = {
                key: round(statistics.median(r[key] for r in runs), 2) for key in ("per_s", "p50_ms", "p99_ms")
            }
    print(f"{'senders':<14}{'answered/s':>12}{'p50 ms':>10}{'p99 ms':>10}   (bare HTTP, {args.deliveries} requests, median of {args.runs})")
    for name, r in results.items():
        print(f"{name:<14}{r['per_s']:>12}{r['p50_ms']:>10}{r['p99_ms']:>10}")
    (ROOT / "bench" / "results-bare-http.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
