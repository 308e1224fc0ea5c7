"""Read latency under webhook load: `todos.list_todos(store, limit=50)` in the receiver's own process.

    .venv/bin/python bench/reads.py [--runs R] [--deliveries N] [--senders S] [--seed T] [--every SECONDS]
                                    [--tree PATH ...]

Each run: a fresh file with a GitHub-style source and T seeded todos, then a
harness subprocess (this file with --harness) that serves the webhook app with
uvicorn in its event loop (the app's lifespan opens the Store) and, on that same
Store, calls list_todos(limit=50) every 5 ms, timing each call. First a quiet
phase (no senders), then a loaded one while S sender threads of this process
(one keep-alive connection each, requests signed before the clock starts) post
N deliveries. Every answer must be 202 and every delivery stored, or the run
fails. Reports p50/p99 list latency quiet and loaded, and accepted deliveries/s,
as medians over R runs per tree. The lister waits 5 ms after each call, so a
faster list is called more often (more read work beside the deliveries);
--every paces the calls start to start instead (e.g. 0.025: 40 lists/s in
every tree), for the same read work in each tree. With --tree given more than once, runs
alternate between the trees (A, B, A, B, ...); each harness imports the package
from its tree (PYTHONPATH and cwd). Writes bench/results-reads.json.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import http.client
import json
import math
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SECRET = b"bench-secret"
LIST_EVERY_SECONDS = 0.005
HARNESS_TIMEOUT = 120  # seconds any one step with the harness may take before the run fails


# ---------------------------------------------------------------- the harness (subprocess)


def import_package() -> tuple[Any, Any, Any, Any]:
    """(todos module, NewTodo class, something with the store's ``open``, web module): today's layout first,
    else the flat one."""
    try:
        from switchboard_local.core import todos
        from switchboard_local.core.store.opener import open_store
        from switchboard_local.core.todo_model import NewTodo
        from switchboard_local.http import app as web
    except ImportError:
        from switchboard_local import todos, web
        from switchboard_local.store import Store

        NewTodo = todos.NewTodo
    else:

        class Store:  # the opener, where older trees had Store.open
            open = staticmethod(open_store)

    return todos, NewTodo, Store, web


async def wire(web: Any, store_class: Any, db: Path) -> tuple[Any, Any, asyncio.Future[Any]]:
    """The receiver as `serve` builds it: (uvicorn server, bound socket, its Store).

    Today the process module opens the store and hands it to the app (with
    the pruner and the consumers beside it, as `serve` runs them). Older trees
    opened it in the app's lifespan: there Store.open is wrapped to hand that
    instance to the bench.
    """
    opened: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    try:
        from switchboard_local import process
    except ImportError:
        process = None
    if process is not None:
        store = await store_class.open(db)
        await process.producers(store).__aenter__()  # left running until the harness exits
        opened.set_result(store)
        try:
            from switchboard_local.http.limits import Limits, server
        except ImportError:  # older trees: the server and its limits in http/app.py
            Limits, server = web.Limits, web.server
        return server(web.create_app(store), Limits()), process.listen("127.0.0.1", 0), opened
    original = store_class.__dict__["open"].__func__

    async def open_and_share(cls: Any, *args: Any, **kwargs: Any) -> Any:
        store = await original(cls, *args, **kwargs)
        if not opened.done():
            opened.set_result(store)
        return store

    store_class.open = classmethod(open_and_share)
    sock = web.listen("127.0.0.1", 0)
    server = web.server(web.create_app(db), web.Limits())
    return server, sock, opened


def summary(latencies: list[float]) -> dict[str, float]:
    s = sorted(latencies)
    assert s, "no list calls in a phase"

    def pct(q: float) -> float:
        return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))] * 1000

    return {"n": len(s), "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": s[-1] * 1000}


async def harness(db: Path, seed: int, every: float | None) -> None:
    """Serve the app and time list_todos on its Store; driven by lines on stdin:
    `phase quiet`, `phase load`, `stop`. Writes a `ready` line, then the result line."""
    import switchboard_local

    todos, new_todo, store_class, web = import_package()
    async with await store_class.open(db) as seeder:  # group commits: a few hundred ms
        await asyncio.gather(*(todos.create(seeder, new_todo(queue="seed", title=f"seed {i}")) for i in range(seed)))

    server, sock, opened = await wire(web, store_class, db)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    done, _ = await asyncio.wait({serving, opened}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if opened not in done:
        raise RuntimeError("the app did not open its store")
    store = opened.result()
    while not server.started:
        if serving.done():
            raise RuntimeError("the server stopped while starting")
        await asyncio.sleep(0.01)

    loop = asyncio.get_running_loop()
    commands: asyncio.Queue[str] = asyncio.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(commands.put_nowait, line.strip())
        loop.call_soon_threadsafe(commands.put_nowait, "stop")

    threading.Thread(target=read_stdin, daemon=True).start()

    phase: list[str | None] = [None]
    samples: dict[str, list[float]] = {"quiet": [], "load": []}
    stopping = asyncio.Event()

    async def lister() -> None:
        while not stopping.is_set():
            current = phase[0]
            start = time.perf_counter()
            found = await todos.list_todos(store, limit=50)
            elapsed = time.perf_counter() - start
            assert len(found) == 50, len(found)
            if current is not None and current == phase[0]:
                samples[current].append(elapsed)
            await asyncio.sleep(LIST_EVERY_SECONDS if every is None else max(0.0, every - elapsed))

    listing = asyncio.create_task(lister())
    print(json.dumps({"ready": sock.getsockname()[1], "package": switchboard_local.__file__}), flush=True)
    while (command := await commands.get()) != "stop":
        if listing.done():
            break
        if command.startswith("phase "):
            phase[0] = command.split(" ", 1)[1]
    stopping.set()
    await listing  # raises what the lister met
    server.should_exit = True
    await serving
    print(json.dumps({name: summary(found) for name, found in samples.items()}), flush=True)


# ---------------------------------------------------------------- the parent


def signed(i: int) -> tuple[bytes, dict[str, str]]:
    """One delivery's body and headers, signed before the clock starts."""
    body = json.dumps({"ref": "refs/heads/main", "after": f"{i:040x}", "n": i}).encode()
    signature = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": f"delivery-{i}",
        "X-Hub-Signature-256": signature,
    }
    return body, headers


def send_all(port: int, share: list[tuple[bytes, dict[str, str]]], start: threading.Barrier, failures: list[str]) -> None:
    """One keep-alive connection, one request at a time, each answer read whole."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        start.wait()
        for body, headers in share:
            conn.request("POST", "/hooks/gh", body, headers)
            response = conn.getresponse()
            answer = response.read()
            if response.status != 202:
                failures.append(f"{response.status}: {answer[:200]!r}")
    except Exception as exc:  # noqa: BLE001 - a failed sender fails the run
        failures.append(repr(exc))
    finally:
        conn.close()


def send_from(port: int, requests: list[tuple[bytes, dict[str, str]]], senders: int, failures: list[str]) -> float:
    start = threading.Barrier(senders + 1)
    threads = [
        threading.Thread(target=send_all, args=(port, requests[i::senders], start, failures)) for i in range(senders)
    ]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - began


def run(tree: Path, args: argparse.Namespace, tmp: Path, n: int) -> dict[str, float]:
    db = tmp / f"reads-{n}.db"
    env = {**os.environ, "BENCH_SECRET": SECRET.decode(), "PYTHONPATH": str(tree)}
    subprocess.run(
        [sys.executable, "-m", "switchboard_local", "source", "add", "gh", "--kind", "github",
         "--secret-env", "BENCH_SECRET", "--db", str(db)],
        env=env, cwd=tree, check=True, capture_output=True,
    )  # fmt: skip
    requests = [signed(i) for i in range(args.deliveries)]
    errors = (tmp / f"harness-{n}.err").open("w+")
    harness_proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--harness", "--db", str(db), "--seed", str(args.seed),
         *([] if args.every is None else ["--every", str(args.every)])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=env, cwd=tree, text=True,
    )  # fmt: skip
    assert harness_proc.stdin is not None and harness_proc.stdout is not None

    def line_from_harness() -> dict[str, Any]:
        line = harness_proc.stdout.readline()
        if not line:
            harness_proc.wait(timeout=HARNESS_TIMEOUT)
            errors.seek(0)
            raise RuntimeError(f"harness exited {harness_proc.returncode}:\n{errors.read()[-3000:]}")
        return json.loads(line)

    def tell(command: str) -> None:
        harness_proc.stdin.write(command + "\n")
        harness_proc.stdin.flush()

    failures: list[str] = []
    try:
        ready = line_from_harness()
        assert Path(ready["package"]).resolve().is_relative_to(tree.resolve()), (ready["package"], tree)
        tell("phase quiet")
        time.sleep(args.quiet)
        tell("phase load")
        elapsed = send_from(ready["ready"], requests, args.senders, failures)
        tell("stop")
        result = line_from_harness()
        harness_proc.stdin.close()
        assert harness_proc.wait(timeout=HARNESS_TIMEOUT) == 0, harness_proc.returncode
    finally:
        if harness_proc.poll() is None:
            harness_proc.kill()
            harness_proc.wait()
        errors.close()
    assert not failures, failures[:5]
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT count(*) FROM events WHERE family <> 'operator'").fetchone()[0]
        todos = conn.execute("SELECT count(*) FROM todos").fetchone()[0]
    assert stored == args.deliveries and todos == args.deliveries + args.seed, (stored, todos)
    return {
        "quiet_p50_ms": result["quiet"]["p50_ms"],
        "quiet_p99_ms": result["quiet"]["p99_ms"],
        "load_p50_ms": result["load"]["p50_ms"],
        "load_p99_ms": result["load"]["p99_ms"],
        "load_max_ms": result["load"]["max_ms"],
        "load_calls": result["load"]["n"],
        "load_lists_per_s": result["load"]["n"] / elapsed,
        "per_s": args.deliveries / elapsed,
    }


KEYS = ("quiet_p50_ms", "quiet_p99_ms", "load_p50_ms", "load_p99_ms", "load_max_ms", "load_calls", "load_lists_per_s",
        "per_s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--deliveries", type=int, default=6000)
    parser.add_argument("--senders", type=int, default=32)
    parser.add_argument("--seed", type=int, default=2000, help="Todos in the file before the runs start.")
    parser.add_argument("--quiet", type=float, default=2.0, help="Seconds of the quiet phase.")
    parser.add_argument("--every", type=float, help="Seconds from the start of one list call to the next.")
    parser.add_argument("--tree", type=Path, action="append", help="Import the package from this tree (repeatable).")
    parser.add_argument("--harness", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.harness:
        # This file's folder holds bench/mcp.py and others, which must not shadow packages.
        here = Path(__file__).resolve().parent
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
        asyncio.run(harness(args.db, args.seed, args.every))
        return
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    runs: dict[str, list[dict[str, float]]] = {str(t): [] for t in trees}
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp:
        for n in range(args.runs):
            for i, tree in enumerate(trees):
                runs[str(tree)].append(run(tree, args, Path(tmp), n * len(trees) + i))
    results = {
        tree: {key: round(statistics.median(r[key] for r in found), 2) for key in KEYS} for tree, found in runs.items()
    }
    print(f"list_todos(limit=50) latency, ms; {args.senders} senders x {args.deliveries} deliveries; median of {args.runs}")
    print(f"{'tree':<28}{'quiet p50':>10}{'quiet p99':>10}{'load p50':>10}{'load p99':>10}{'load max':>10}"
          f"{'lists/s':>9}{'accepted/s':>12}")  # fmt: skip
    for tree, r in results.items():
        print(f"{tree[-28:]:<28}{r['quiet_p50_ms']:>10}{r['quiet_p99_ms']:>10}{r['load_p50_ms']:>10}"
              f"{r['load_p99_ms']:>10}{r['load_max_ms']:>10}{r['load_lists_per_s']:>9}{r['per_s']:>12}")  # fmt: skip
    (ROOT / "bench" / "results-reads.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
