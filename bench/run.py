"""The whole benchmark suite, side by side, in one invocation: issue 32's targets, met or missed.

    .venv/bin/python -m pip install -e '.[bench]'     # the peers: litequeue, persist-queue
    .venv/bin/python bench/run.py [--runs 5] [--only a,b,c,d,e,f,g,h,i,m,w[,p]]

Every figure is a median over --runs rounds; each round runs every measure
once, so what is compared is measured interleaved in time, on the same file
system, at the same durability: WAL + synchronous=FULL for every SQLite-based system
(set on the peers' connections too). Sections:

  a  the limit: raw sqlite3 one INSERT per transaction; one UPDATE…RETURNING
     claim + one UPDATE complete per job in their own transactions; 100
     inserts per transaction; the floor under an adapter batch (event, todo
     and link rows of this schema, 64 messages per transaction, executemany);
     fdatasync latency of this directory; and the drains' own statements in
     bare sqlite3, one commit per job and batches of 10 (bench/floors.py)
  b  core: todos created/s; claim+complete/s (two commits per job); the drain
     loop with complete(then=…) (one commit per job); 4 processes draining
     one file; 8 concurrent consumers in one process (group commit)
  c  peers: litequeue put, pop+done; persist-queue SQLiteAckQueue put, get+ack
  d  webhook ingest over loopback HTTP, 1 and 32 senders, and 32 senders to
     serve --workers 2 (bench/webhooks.py),
     beside the bare-HTTP ceiling: the receiver's stack answering 202 and
     nothing else, 32 senders (bench/bare_http.py)
  e  every broker's drain (Redis streams, NATS JetStream, RabbitMQ, SQS on moto: those whose server
     this machine has) at batch 64 (SQS: 10, its most), beside the same rows in bare sqlite3 at that
     batch (a's floor); Redis at batch 1 too, and raw XREADGROUP (100) + XACK (bench/brokers.py
     measures each beside its own client's raw loop)
  f  MCP over stdio: start → initialize, claim_next+complete p50/p99 (bench/mcp.py)
  g  scale: claim_next latency with 1,000 vs 1,000,000 todos in the file, bytes per todo
  h  webhook ingest, 32 senders, with no dashboard page open vs 4 pages streaming (bench/dashboard_load.py)
  i  batch verbs: one consumer claiming up to 10 at a time (claim_next_many) and
     completing them in one call (complete_many); and the same with one commit per
     batch (complete_many with then=: the finish and the next claim in one transaction)
  m  no CLI verb imports the MCP SDK (a real process runs the everyday verbs, then looks)
  w  WAL pages per job commit and the commit latency p50/p99 of the drain loop
     (bench/wal.py's measures where it exists; else the WAL's growth under a pinned reader)
  p  opt-in (--only …,p; needs Debian's postgresql and the bench extra): PostgreSQL
     beside SQLite on a server the bench starts (synchronous_commit=on): todos
     created/s, drains with 1, 4, 8 and 16 worker processes on each backend (one
     todo per claim, and batches of 10: claim_next_many + complete_many), the
     peers (procrastinate, pgqueuer) draining as many jobs with as many processes
     on the same server, webhook ingest with 32 senders against serve on each
     backend, claim_next latency at 1,000 and 1,000,000 todos
     (bench/postgres.py, which runs the same alone with more options)

Prints the machine (with its fdatasync p50), every figure, then each of issue
32's targets (and issue 15's it keeps) with its ratio and met/missed; writes
bench/results.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from switchboard_local.core import todos  # noqa: E402
from switchboard_local.core.store.interface import Store  # noqa: E402
from switchboard_local.core.store.opener import open_store  # noqa: E402
from switchboard_local.core.todo_model import NewTodo  # noqa: E402
from switchboard_local.core.todos import Lease, NextClaim  # noqa: E402

N = 2000


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _raw_conn(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


# ---------------------------------------------------------------- a: the limit


def raw_insert(tmp: Path) -> float:
    conn = _raw_conn(tmp / "raw-insert.db")
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, body TEXT, state TEXT)")
    start = time.perf_counter()
    for i in range(N):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO jobs (body, state) VALUES (?, 'pending')", (f"job {i}",))
        conn.execute("COMMIT")
    return N / (time.perf_counter() - start)


def raw_claim_complete(tmp: Path) -> float:
    conn = _raw_conn(tmp / "raw-claim.db")
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, body TEXT, state TEXT)")
    conn.execute("CREATE INDEX jobs_pending ON jobs (id) WHERE state = 'pending'")
    conn.executemany("INSERT INTO jobs (body, state) VALUES (?, 'pending')", [(f"job {i}",) for i in range(N)])
    start = time.perf_counter()
    for _ in range(N):
        conn.execute("BEGIN IMMEDIATE")
        (job_id,) = conn.execute(
            "UPDATE jobs SET state = 'claimed' WHERE id = (SELECT id FROM jobs WHERE state = 'pending' "
            "ORDER BY id LIMIT 1) RETURNING id"
        ).fetchone()
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE jobs SET state = 'done' WHERE id = ?", (job_id,))
        conn.execute("COMMIT")
    return N / (time.perf_counter() - start)


def raw_batched_insert(tmp: Path) -> float:
    conn = _raw_conn(tmp / "raw-batch.db")
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, body TEXT, state TEXT)")
    total = N * 10
    start = time.perf_counter()
    for batch in range(total // 100):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO jobs (body, state) VALUES (?, 'pending')",
                         [(f"job {batch}-{i}",) for i in range(100)])  # fmt: skip
        conn.execute("COMMIT")
    return total / (time.perf_counter() - start)


def raw_ingest_rows(tmp: Path, batch: int = 64) -> float:
    """The floor under an adapter batch: this project's schema, bare sqlite3, ``batch``
    messages per transaction, each an event, a todo and their link, with
    executemany and nothing else (no routing, no validation, no dedup answers)."""
    from switchboard_local.core.store.queries import Q
    from switchboard_local.core.store.sqlite.migrations import schema_sql, statements_of

    conn = _raw_conn(tmp / "raw-ingest.db")
    conn.execute("PRAGMA foreign_keys = ON")
    for statement in statements_of(schema_sql()):
        conn.execute(statement)
    event = {"source": "s", "family": "queue", "type": "stream", "trust_mode": "queue", "verified": 1,
             "verify_detail": None, "content_type": None, "headers": "{}", "body": b'{"order": 1}', "size": 12, "now": 1,
             "body_key": None, "window_start": 0}
    todo = {"queue": "q", "assignee": None, "title": "t", "kind": "stream", "payload": '{"body": {"order": 1}}',
            "priority": 0, "max_attempts": 5, "visible_at": 1, "now": 1, "blocked_by": 0, "waits_for": 0}  # fmt: skip
    total = N * 5
    start = time.perf_counter()
    for number in range(total // batch):
        keys = [f"{number}-{i}" for i in range(batch)]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(Q.insert_event.replace("RETURNING id", ""), [{**event, "external_id": k, "pruned_key": f"id:{k}"} for k in keys])
        first = conn.execute("SELECT max(id) FROM events").fetchone()[0] - (batch - 1)
        conn.executemany(Q.insert_todo.replace("RETURNING *", ""),
                         [{**todo, "event_id": first + i, "idempotency_key": k} for i, k in enumerate(keys)])  # fmt: skip
        first_todo = conn.execute("SELECT max(id) FROM todos").fetchone()[0] - (batch - 1)
        conn.executemany(Q.link_event_todo, [{"event_id": first + i, "position": 0, "todo_id": first_todo + i} for i in range(batch)])
        conn.execute("COMMIT")
    return (total // batch * batch) / (time.perf_counter() - start)


def fdatasync_ms(tmp: Path) -> float:
    fd = os.open(tmp / "sync.bin", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        times = []
        for _ in range(200):
            os.write(fd, b"x" * 4096)
            start = time.perf_counter()
            os.fdatasync(fd)
            times.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return statistics.median(times) * 1000


# ---------------------------------------------------------------- b: core


async def _filled(path: Path, n: int = N) -> Store:
    store = await open_store(path)
    for i in range(n):
        await todos.create(store, NewTodo(queue="bench", title=f"job {i}"))
    return store


async def core_drain_one_commit(path: Path) -> float:
    store = await _filled(path)
    try:
        then = NextClaim("bench", ["bench"])
        start = time.perf_counter()
        todo, done = await todos.claim_next(store, owner="bench", queues=["bench"]), 0
        while todo is not None:
            todo = (await todos.complete(store, Lease.of(todo), then=then)).next
            done += 1
        assert done == N
        return N / (time.perf_counter() - start)
    finally:
        await store.close()


async def core_eight_consumers(path: Path) -> float:
    store = await _filled(path)
    try:

        async def consumer(k: int) -> int:
            then, done = NextClaim(f"c{k}", ["bench"]), 0
            todo = await todos.claim_next(store, owner=f"c{k}", queues=["bench"])
            while todo is not None:
                todo = (await todos.complete(store, Lease.of(todo), then=then)).next
                done += 1
            return done

        start = time.perf_counter()
        assert sum(await asyncio.gather(*(consumer(k) for k in range(8)))) == N
        return N / (time.perf_counter() - start)
    finally:
        await store.close()


# ---------------------------------------------------------------- c: peers


def _peer(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        return None


def litequeue_put_pop(tmp: Path) -> tuple[float, float]:
    from litequeue import LiteQueue

    q = LiteQueue(str(tmp / "litequeue.db"))
    q.conn.execute("PRAGMA synchronous = FULL")
    start = time.perf_counter()
    for i in range(N):
        q.put(f"job {i}")
    put = N / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(N):
        message = q.pop()
        q.done(message.message_id)
    return put, N / (time.perf_counter() - start)


def persist_queue_put_get(tmp: Path) -> tuple[float, float]:
    from persistqueue import SQLiteAckQueue

    q = SQLiteAckQueue(str(tmp / "persist-queue"), multithreading=False, auto_commit=True)
    for conn in {id(c): c for c in (q._conn, q._putter)}.values():
        conn.execute("PRAGMA synchronous = FULL")
    start = time.perf_counter()
    for i in range(N):
        q.put(f"job {i}")
    put = N / (time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(N):
        item = q.get(raw=True)
        q.ack(id=item["pqid"])
    return put, N / (time.perf_counter() - start)


# ---------------------------------------------------------------- i: batch verbs


def batch_verbs_merged() -> bool:
    return all(hasattr(todos, name) for name in ("claim_next_many", "complete_many", "Completion"))


async def core_drain_batches(path: Path, size: int = 10) -> float:
    """One consumer: claim up to ``size`` todos in one call, complete them all in one call."""
    store = await _filled(path)
    try:
        claim, done = NextClaim("bench", ["bench"]), 0
        start = time.perf_counter()
        while batch := await todos.claim_next_many(store, claim, size):
            await todos.complete_many(store, [todos.Completion(Lease.of(t), None) for t in batch])
            done += len(batch)
        assert done == N, done
        return N / (time.perf_counter() - start)
    finally:
        await store.close()


async def core_drain_batches_one_commit(path: Path, size: int = 10) -> float:
    """One consumer, one commit per batch: complete_many(then=…) finishes a batch and claims the next
    in the same transaction (what complete(then=…) is to the one-todo drain)."""
    store = await _filled(path)
    try:
        claim, done = NextClaim("bench", ["bench"]), 0
        start = time.perf_counter()
        batch = await todos.claim_next_many(store, claim, size)
        while batch:
            done += len(batch)
            finished = await todos.complete_many(store, [todos.Completion(Lease.of(t), None) for t in batch],
                                                 then=claim, max=size)  # fmt: skip
            batch = finished.next
        assert done == N, done
        return N / (time.perf_counter() - start)
    finally:
        await store.close()


# ---------------------------------------------------------------- w: the WAL per job


def _wal_frames(db: Path, page_size: int) -> int:
    wal = db.with_name(db.name + "-wal")
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, size - 32) // (page_size + 24)  # the WAL's header, then a header per frame


async def _drain_timed(store: Store, timings: list[float]) -> int:
    then, done = NextClaim("bench", ["bench"]), 0
    todo = await todos.claim_next(store, owner="bench", queues=["bench"])
    while todo is not None:
        started = time.perf_counter()
        todo = (await todos.complete(store, Lease.of(todo), result={"ok": True}, then=then)).next
        timings.append(time.perf_counter() - started)
        done += 1
    return done


def wal_figures(tmp: Path, n: int = N) -> tuple[float, float, float]:
    """(WAL pages per job commit, commit p50 ms, commit p99 ms) of the drain loop (complete(then=…))."""
    if (BENCH / "wal.py").exists():
        wal = _load("wal")
        pages = wal.measure_wal_pages(tmp, n)["pages_per_job"]
        latency = wal.measure_commit_latency(tmp, n)
        return pages, latency["p50_ms"], latency["p99_ms"]
    return _own_wal_figures(tmp / "wal.db", n)


def _own_wal_figures(db: Path, n: int) -> tuple[float, float, float]:
    async def fill() -> None:
        store = await _filled(db, n)
        await store.close()  # the last connection closed: the log is folded into the file

    asyncio.run(fill())
    page_size = sqlite3.connect(db).execute("PRAGMA page_size").fetchone()[0]
    pin = sqlite3.connect(db, isolation_level=None)  # a reader from before the drain: the log only grows
    pin.execute("BEGIN")
    pin.execute("SELECT count(*) FROM todos").fetchone()
    timings: list[float] = []
    try:
        before = _wal_frames(db, page_size)

        async def drain() -> int:
            async with await open_store(db) as store:
                return await _drain_timed(store, timings)

        jobs = asyncio.run(drain())
        frames = _wal_frames(db, page_size) - before
    finally:
        pin.close()
    ms = sorted(t * 1000 for t in timings)
    return frames / jobs, ms[len(ms) // 2], ms[min(len(ms) - 1, round(len(ms) * 0.99))]


# ---------------------------------------------------------------- m: the CLI without the MCP SDK

# Everyday verbs, run for real in one process; then: is any module of the MCP SDK loaded?
CLI_VERBS = [
    ["todo", "create", "--queue", "q", "--title", "t"],
    ["todo", "list"],
    ["todo", "claim", "--queue", "q", "--owner", "me"],
    ["queue", "list"],
    ["source", "list"],
    ["rule", "list"],
    ["events", "list"],
    ["config", "list"],
    ["adapter", "list"],
    ["agent", "list"],
]  # not `doctor`, which imports the SDK on purpose: one of its checks is that it imports


def cli_imports_mcp(tmp: Path) -> list[str]:
    """The MCP SDK's modules the CLI's verbs loaded (none is the promise)."""
    code = (
        "import json, sys\n"
        "from click.testing import CliRunner\n"
        "from switchboard_local.cli.main import main\n"
        f"for verb in {CLI_VERBS!r}:\n"
        f"    CliRunner().invoke(main, [*verb, '--db', {str(tmp / 'cli.db')!r}])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- g: scale


async def claim_latency_ms(path: Path, done_rows: int) -> tuple[float, float]:
    """p50 of claim_next with ``done_rows`` finished todos in the file; bytes per todo."""
    store = await open_store(path)
    await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    now = int(time.time() * 1000)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO todos (queue, title, payload, state, created_at, updated_at, completed_at) "
        "VALUES ('bench', ?, '{\"n\": 1}', 'done', ?, ?, ?)",
        ((f"old job {i}", now, now, now) for i in range(done_rows)),
    )
    conn.execute("COMMIT")
    conn.close()
    store = await open_store(path)
    try:
        for i in range(1000):
            await todos.create(store, NewTodo(queue="bench", title=f"job {i}"))
        times = []
        for _ in range(500):
            start = time.perf_counter()
            todo = await todos.claim_next(store, owner="bench", queues=["bench"])
            times.append(time.perf_counter() - start)
            await todos.complete(store, Lease.of(todo))
    finally:
        await store.close()
    size = path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob(path.name + "-*"))
    return statistics.median(times) * 1000, size / (done_rows + 1000)


# ---------------------------------------------------------------- the table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default=",".join(s for s in SECTIONS if s not in OPT_IN))
    args = parser.parse_args()
    sections = set(args.only.split(","))
    if sections - set(SECTIONS):
        parser.error(f"--only: unknown sections {', '.join(sorted(sections - set(SECTIONS)))}; they are {','.join(SECTIONS)}")
    with tempfile.TemporaryDirectory(dir=BENCH) as tmp_name, contextlib.ExitStack() as stack:
        tmp = Path(tmp_name)
        pg = _load("postgres") if "p" in sections else None
        pg_server = None
        if pg is not None:
            pg_server = pg.Server()
            stack.callback(pg_server.stop)
        measures = plan(sections, tmp, stack, pg_server)
        r: dict[str, Any] = interleaved(measures, args.runs)
        if pg is not None:  # once, as g: filling a table with 1,000,000 todos takes a while
            r["pg_claim_next_ms_1m"] = pg.big_claim(pg_server, 1_000_000)
        if "g" in sections:  # once: filling a file with 1,000,000 todos takes a while
            big = asyncio.run(claim_latency_ms(tmp / "s1m.db", 1_000_000))
            r["claim_next_ms_1m"], r["bytes_per_todo_1m"] = big
        if "m" in sections:
            r["cli_mcp_modules"] = cli_imports_mcp(tmp)
        if "fdatasync_ms" not in r:  # the header names it whatever was selected
            (tmp / "fs").mkdir()
            r["fdatasync_ms"] = statistics.median(fdatasync_ms(tmp / "fs") for _ in range(3))
    report(r, args.runs)


SECTIONS = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "m", "w", "p")
OPT_IN = {"p"}  # run only when named in --only: it needs a PostgreSQL server


# A measure: the names of the figures it yields, and a function of the round's number.
Measure = tuple[tuple[str, ...], Callable[[int], tuple[float, ...]]]


def interleaved(measures: list[Measure], runs: int, seen: dict[str, list[float]] | None = None) -> dict[str, float]:
    """Run every measure once per round, round after round, so that what is compared
    is measured side by side in time too; then each figure's median (``seen``, when
    given, gets every round's value)."""
    seen = {} if seen is None else seen
    seen.update({name: [] for names, _ in measures for name in names})
    for i in range(runs):
        for names, measure in measures:
            for name, value in zip(names, measure(i), strict=True):
                seen[name].append(value)
        print(f"round {i + 1} of {runs} done", file=sys.stderr)
    return {name: statistics.median(values) for name, values in seen.items()}


def plan(sections: set[str], tmp: Path, stack: contextlib.ExitStack, pg_server: Any = None) -> list[Measure]:
    def fresh(i: int, name: str) -> Path:
        folder = tmp / f"{name}-{i}"
        folder.mkdir()
        return folder

    measures: list[Measure] = []
    if "a" in sections:
        measures += [
            (("raw_insert_per_s",), lambda i: (raw_insert(fresh(i, "ri")),)),
            (("raw_claim_complete_per_s",), lambda i: (raw_claim_complete(fresh(i, "rc")),)),
            (("raw_100_per_tx_per_s",), lambda i: (raw_batched_insert(fresh(i, "rb")),)),
            (("raw_ingest_rows_batch_64_per_s",), lambda i: (raw_ingest_rows(fresh(i, "rg")),)),
            (("fdatasync_ms",), lambda i: (fdatasync_ms(fresh(i, "fs")),)),
        ]
        statements = _load("floors")
        measures += [
            (("raw_drain_same_statements_per_s",), lambda i: (statements.drain_one_commit(fresh(i, "fd"), N),)),
            (("raw_batch_10_same_statements_per_s",), lambda i: (statements.drain_batches(fresh(i, "fb"), N),)),
        ]
    if "b" in sections:
        core = _load("core")

        def two_commits(i: int) -> tuple[float]:
            db = fresh(i, "cd") / "db"
            asyncio.run(core.create(db, N))
            return (asyncio.run(core.drain(db, N)),)

        def processes(i: int) -> tuple[float]:
            db = fresh(i, "cp") / "db"
            asyncio.run(core.create(db, N))
            return (core.drain_processes(db, N, 4),)

        measures += [
            (("core_create_per_s",), lambda i: (asyncio.run(core.create(fresh(i, "cc") / "db", N)),)),
            (("core_claim_complete_per_s",), two_commits),
            (("core_drain_one_commit_per_s",), lambda i: (asyncio.run(core_drain_one_commit(fresh(i, "c1") / "db")),)),
            (("core_4_processes_per_s",), processes),
            (("core_8_consumers_per_s",), lambda i: (asyncio.run(core_eight_consumers(fresh(i, "c8") / "db")),)),
        ]
    if "c" in sections:
        if _peer("litequeue"):
            measures.append((("litequeue_put_per_s", "litequeue_pop_done_per_s"), lambda i: litequeue_put_pop(fresh(i, "lq"))))
        if _peer("persistqueue"):
            measures.append((("persist_queue_put_per_s", "persist_queue_get_ack_per_s"),
                             lambda i: persist_queue_put_get(fresh(i, "pq"))))  # fmt: skip
    if "d" in sections:
        web = _load("webhooks")
        for senders in (1, 32):
            names = tuple(f"webhook_{senders}_senders_{k}" for k in ("per_s", "p50_ms", "p99_ms"))
            measures.append((names, lambda i, s=senders: tuple(web.run(1000, s, fresh(i, f"w{s}"), i).values())))
        names = tuple(f"webhook_32_senders_2_workers_{k}" for k in ("per_s", "p50_ms", "p99_ms"))
        measures.append((names, lambda i: tuple(web.run(1000, 32, fresh(i, "w32x2"), i, workers=2).values())))
        bare = _load("bare_http")
        names = tuple(f"bare_http_32_senders_{k}" for k in ("per_s", "p50_ms", "p99_ms"))
        measures.append((names, lambda i: tuple(bare.run(1000, 32).values())))
    if "e" in sections:
        brokers = _load("brokers")
        floors = set()
        for kind in brokers.BENCHES.values():  # every broker whose server this machine has
            (tmp / kind.name).mkdir()
            try:
                bench = kind(tmp / kind.name)
            except Exception as exc:  # its server or client library is missing here: said, and left out
                print(f"section e: {kind.label} left out: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            stack.callback(bench.stop)
            entries = 1000 if kind.name == "sqs" else 5000  # moto slows as its queue grows (bench/brokers.py)
            batch = min(64, kind.max_batch or 64)
            floors.add(batch)

            def drain_run(i: int, batch: int, bench: Any = bench, entries: int = entries) -> tuple[float]:
                key = bench.fill(f"d{batch}-{i}", entries)
                db = fresh(i, f"{bench.name}{batch}") / "db"
                per_s = asyncio.run(brokers.drain(bench.name, bench.config(key, batch), entries, db))
                assert bench.left(key) == (0, 0), f"{bench.name}: messages left waiting or unacked"
                return (per_s,)

            measures.append(((f"{kind.name}_batch_{batch}_per_s",), lambda i, f=drain_run, b=batch: f(i, b)))
            if kind.name == "redis":  # issue 15's: one message a batch, and redis-py's own loop
                measures += [
                    (("redis_raw_per_s",), lambda i, bench=bench: (bench.raw(bench.fill(f"raw{i}", 5000), 5000, 100),)),
                    (("redis_batch_1_per_s",), lambda i, f=drain_run: f(i, 1)),
                ]
        for batch in sorted(floors - ({64} if "a" in sections else set())):
            measures.append(((f"raw_ingest_rows_batch_{batch}_per_s",),
                             lambda i, b=batch: (raw_ingest_rows(fresh(i, f"rg{b}"), b),)))  # fmt: skip
    if "f" in sections:
        mcp_bench = _load("mcp")
        keys = ("startup_to_initialize_ms", "claim_next_complete_p50_ms", "claim_next_complete_p99_ms",
                "complete_claim_next_p50_ms", "complete_claim_next_p99_ms")  # fmt: skip
        names = ("mcp_initialize_ms", "mcp_round_trip_p50_ms", "mcp_round_trip_p99_ms",
                 "mcp_complete_claim_next_p50_ms", "mcp_complete_claim_next_p99_ms")  # fmt: skip
        measures.append((names, lambda i: tuple(mcp_bench.one_run(200)[k] for k in keys)))
    if "g" in sections:
        measures.append((("claim_next_ms_1k",), lambda i: (asyncio.run(claim_latency_ms(fresh(i, "s1k") / "db", 0))[0],)))
    if "i" in sections and batch_verbs_merged():
        measures.append((("core_batch_10_per_s",), lambda i: (asyncio.run(core_drain_batches(fresh(i, "cb") / "db")),)))
        measures.append((("core_batch_10_one_commit_per_s",),
                         lambda i: (asyncio.run(core_drain_batches_one_commit(fresh(i, "cb1") / "db")),)))  # fmt: skip
    if "w" in sections:
        measures.append((("wal_pages_per_job", "commit_p50_ms", "commit_p99_ms"), lambda i: wal_figures(fresh(i, "wal"))))
    if "h" in sections:
        board = _load("dashboard_load")
        for pages in (0, 4):
            names = (f"webhook_32_senders_{pages}_pages_per_s",)
            measures.append((names, lambda i, p=pages: (board.run(1000, 32, p, fresh(i, f"dl{p}"), i)["per_s"],)))
    if "p" in sections:
        pg = _load("postgres")
        peers = tuple(p for p in pg.PEERS if pg.peer_installed(p))
        measures += pg.measures(pg_server, N, pg.PROCESSES, peers, {"ours", "sqlite", "peers", "webhooks", "big"}, tmp)
    return measures


# Issue 32's targets (and issue 15's it keeps): (label, figure, its anchor or None, "at least" | "at most",
# wanted). A ratio when there is an anchor (figure / anchor), else the figure itself.
TARGETS = [
    ("drain, 1 todo per call, 1 commit per job vs raw one-insert-per-transaction",
     "core_drain_one_commit_per_s", "raw_insert_per_s", "at least", 0.6),
    ("drain, 1 todo per call, 1 commit per job vs persist-queue get+ack",
     "core_drain_one_commit_per_s", "persist_queue_get_ack_per_s", "at least", 1.5),
    ("drain, 1 todo per call, 1 commit per job vs litequeue pop+done",
     "core_drain_one_commit_per_s", "litequeue_pop_done_per_s", "at least", 2.0),
    ("drain, max 10 claims + batch completes vs persist-queue get+ack",
     "core_batch_10_per_s", "persist_queue_get_ack_per_s", "at least", 5.0),
    ("create vs raw one-insert-per-transaction", "core_create_per_s", "raw_insert_per_s", "at least", 0.7),
    ("WAL pages per job commit", "wal_pages_per_job", None, "at most", 4.0),
    ("commit p99 / p50", "commit_p99_ms", "commit_p50_ms", "at most", 3.0),
    ("webhook ingest, 32 senders vs bare HTTP, 32 senders",
     "webhook_32_senders_per_s", "bare_http_32_senders_per_s", "at least", 0.5),
    ("webhook ingest, 32 senders, serve --workers 2 vs bare HTTP, 32 senders",
     "webhook_32_senders_2_workers_per_s", "bare_http_32_senders_per_s", "at least", 0.5),
    ("Redis stream drain, batch 64 vs raw XREADGROUP+XACK", "redis_batch_64_per_s", "redis_raw_per_s", "at least", 0.3),
    *((f"{label} drain, batch {batch} vs the same rows in bare sqlite3", f"{name}_batch_{batch}_per_s",
       f"raw_ingest_rows_batch_{batch}_per_s", "at least", 0.7)
      for name, label, batch in (("redis", "Redis stream", 64), ("nats", "NATS JetStream", 64),
                                 ("amqp", "RabbitMQ", 64), ("sqs", "SQS (moto)", 10))),
    ("claim_next latency, 1,000,000 todos vs 1,000", "claim_next_ms_1m", "claim_next_ms_1k", "at most", 1.5),
    ("MCP claim_next+complete p50 (ms)", "mcp_round_trip_p50_ms", None, "at most", 3.0),
    # Issue 16's (section p).
    ("PostgreSQL drain, 8 processes vs 1", "pg_drain_8p_per_s", "pg_drain_1p_per_s", "at least", 3.0),
    ("PostgreSQL drain, 8 processes vs procrastinate, 8 processes",
     "pg_drain_8p_per_s", "procrastinate_drain_8p_per_s", "at least", 1.0),
    ("PostgreSQL drain, 8 processes vs pgqueuer, 8 processes",
     "pg_drain_8p_per_s", "pgqueuer_drain_8p_per_s", "at least", 1.0),
    ("PostgreSQL claim_next latency, 1,000,000 todos vs 1,000", "pg_claim_next_ms_1m", "pg_claim_next_ms_1k", "at most", 1.5),
]  # fmt: skip


def machine(r: dict[str, Any]) -> str:
    cpu = ""
    with contextlib.suppress(OSError):
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")  # fmt: skip
    return (f"{platform.node()}: {platform.system()} {platform.release()}, {os.cpu_count()} CPUs {cpu}".rstrip()
            + f"; Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
            + f"; fdatasync p50 {r['fdatasync_ms']:.3f} ms (4 KiB, this directory's file system)")  # fmt: skip


def report(r: dict[str, Any], runs: int) -> None:
    print(machine(r))
    print(f"\nfigure (median of {runs} runs)                     value")
    for key, value in r.items():
        if isinstance(value, float | int):
            print(f"  {key:<44}{value:>12.2f}")
    print(f"\n{'target':<68}{'value':>8}  {'wanted':>12}  met")
    results: dict[str, Any] = {"machine": machine(r), "runs": runs, "figures": r, "targets": []}

    def line(label: str, shown: str, wanted: str, met: bool | None) -> None:
        print(f"  {label:<66}{shown:>8}  {wanted:>12}  {'n/a' if met is None else 'met' if met else 'missed'}")

    for label, mine, anchor, bound, wanted in TARGETS:
        want = f"{'>=' if bound == 'at least' else '<='} {wanted:g}" + ("x" if anchor else "")
        if mine == "core_batch_10_per_s" and not batch_verbs_merged():
            line(label, "n/a", want, None)
            print("    n/a (batch verbs not merged)")
            results["targets"].append({"target": label, "value": None, "note": "batch verbs not merged"})
            continue
        if mine not in r or (anchor is not None and anchor not in r):
            continue  # its section was not selected
        value = r[mine] / r[anchor] if anchor else r[mine]
        met = value >= wanted if bound == "at least" else value <= wanted
        line(label, f"{value:.2f}", want, met)
        results["targets"].append({"target": label, "value": value, bound.replace(" ", "_"): wanted, "met": met})
    if "cli_mcp_modules" in r:
        loaded = r["cli_mcp_modules"]
        line("no CLI verb imports the MCP SDK", str(len(loaded)), "0 modules", not loaded)
        results["targets"].append({"target": "no CLI verb imports the MCP SDK", "mcp_modules": loaded, "met": not loaded})
    # Reported beside the targets, with none of their own: what the statements alone reach, and the batch
    # drain with one commit per batch.
    for label, mine, anchor in (
        ("drain, batches of 10, 1 commit per batch (complete_many then=) vs persist-queue",
         "core_batch_10_one_commit_per_s", "persist_queue_get_ack_per_s"),
        ("the drain's statements alone in bare sqlite3, 1 commit per job, vs persist-queue",
         "raw_drain_same_statements_per_s", "persist_queue_get_ack_per_s"),
        ("the batch drain's statements alone (10, 2 commits) vs persist-queue",
         "raw_batch_10_same_statements_per_s", "persist_queue_get_ack_per_s"),
        ("drain, 1 commit per job, vs its statements alone", "core_drain_one_commit_per_s",
         "raw_drain_same_statements_per_s"),
        ("drain, batches of 10, vs their statements alone", "core_batch_10_per_s", "raw_batch_10_same_statements_per_s"),
    ):  # fmt: skip
        if mine in r and anchor in r:
            line(label, f"{r[mine] / r[anchor]:.2f}", "-", None)
            results["targets"].append({"target": label, "value": r[mine] / r[anchor]})
    for peer in ("pgqueuer", "procrastinate"):  # reported, no target: the batch drain beside the peer's fetch of 10
        mine, theirs = "pg_drain_batch10_8p_per_s", f"{peer}_drain_8p_per_s"
        if mine in r and theirs in r:
            label = f"our batch-10 drain at 8 processes vs {peer} (PostgreSQL)"
            line(label, f"{r[mine] / r[theirs]:.2f}", "-", None)
            results["targets"].append({"target": label, "ratio": r[mine] / r[theirs]})
    if "pg_webhook_32_senders_per_s" in r:  # reported, no target
        ratio = r["pg_webhook_32_senders_per_s"] / r["sqlite_webhook_32_senders_per_s"]
        line("webhook ingest, 32 senders: serve on PostgreSQL vs on SQLite", f"{ratio:.2f}", "-", None)
        results["targets"].append({"target": "webhook ingest, 32 senders, PostgreSQL vs SQLite", "ratio": ratio})
    if "webhook_32_senders_4_pages_per_s" in r:  # reported, no target: what a page open costs ingestion
        ratio = r["webhook_32_senders_4_pages_per_s"] / r["webhook_32_senders_0_pages_per_s"]
        line("webhook ingest with 4 dashboard pages streaming vs none", f"{ratio:.2f}", "-", None)
        results["targets"].append({"target": "webhook ingest, 4 pages vs none", "ratio": ratio})
    (BENCH / "results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
