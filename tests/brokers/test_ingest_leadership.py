"""One process leads ingest (issue 13 §1), with real processes on one file.

Two `mcp` processes and a `serve` share a database while a real
redis-server's stream and list, and a real nats-server's JetStream stream,
keep receiving entries; the process that
leads ingest is killed with SIGKILL at random points, round after round, and
a fresh process of its kind takes its place. Afterwards every entry is
stored exactly once, nothing is left pending with Redis or unacked with
JetStream, and the batches the
processes stored (each logs the fence it stored under) never go back to an
older leader's fence: two leaders never stored at once.
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from switchboard_local.core.store.shared import is_url

from support.cli import run_cli
from support.mcp import RawServer
from support.nats_server import Nats, add_nats_adapter_by_cli, add_stream, consumer_counts, publish
from support.receiver import ServeProcess
from support.sql import rows, value
from support.waits import until

ROUNDS = 5
PER_MODE = 400  # entries pushed to each key over the whole run
BATCH = re.compile(r"adapter (\w+): batch stored under fence (\d+): events \[([\d, ]*)\]")


@pytest.fixture
def debug_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_LOG_LEVEL", "DEBUG")  # each process logs every batch with its fence


class Fleet:
    """The processes on the file: `mcp` ones and `serve` ones, each replaced when killed."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.running: list[Any] = []
        self.gone: list[Any] = []

    def start(self, kind: str) -> None:
        if kind == "mcp":
            self.running.append(RawServer(self.db, "--ingest", "auto"))
        else:
            self.running.append(ServeProcess(self.db))

    def pid_of(self, proc: Any) -> int:
        return proc.proc.pid

    def kill(self, pid: int) -> str:
        (victim,) = [p for p in self.running if self.pid_of(p) == pid]
        victim.proc.kill()
        victim.proc.wait(timeout=30)
        self.running.remove(victim)
        self.gone.append(victim)
        return "mcp" if isinstance(victim, RawServer) else "serve"

    def logs(self) -> str:
        return "".join(line if isinstance(line, str) else line.decode("utf-8", "replace")
                       for p in self.running + self.gone for line in _lines(p))  # fmt: skip

    def stop(self) -> None:
        for p in self.running:
            if isinstance(p, RawServer):
                p.close()
            else:
                p.stop()


def _lines(p: Any) -> list[Any]:
    return p.stderr if isinstance(p, RawServer) else p.lines


def new_leader(db: Path, fleet: Fleet, after_fence: int = 0, timeout: float = 30) -> tuple[int, int]:
    """(fence, pid) of the first leader with a fence past ``after_fence``."""
    deadline = time.monotonic() + timeout
    while (found := leader(db)) is None or found[0] <= after_fence:
        if time.monotonic() > deadline:
            raise AssertionError(f"no new leader after fence {after_fence} within {timeout} s\n{fleet.logs()[-3000:]}")
        time.sleep(0.02)
    return found


def leader(db: Path) -> tuple[int, int] | None:
    """(fence, pid) of the lease as the file holds it, while it is not expired."""
    found = rows(db, "SELECT fence, pid, expires_at FROM ingest_leader")
    if not found:
        return None
    fence, pid, expires_at = found[0]
    return (fence, pid) if expires_at > time.time() * 1000 else None


@pytest.mark.both_backends  # on PostgreSQL the lease row is shared by every host's processes
def test_killing_the_ingest_leader_again_and_again_loses_nothing_and_never_runs_two(
    redis_server, nats_server, db_path: Path, debug_logs
) -> None:
    r = redis_server.client()
    for mode in ("stream", "list"):
        added = run_cli("adapter", "add", mode, "--redis-url", redis_server.url, "--mode", mode, "--key", mode,
                        "--batch", "8", db=db_path)  # fmt: skip
        assert added.returncode == 0, added.stderr
    nats = Nats(nats_server.url)
    nats.run(add_stream(nats.client, "WORK", ["work.>"]))
    # AckWait 2 s: what a killed leader read and never acked comes back well within a wait's stall.
    add_nats_adapter_by_cli(db_path, nats_server.url, "WORK", name="nats", subject="work.>", batch=8, ack_wait=2)
    sent: list[str] = []

    def produce() -> None:  # entries keep arriving through every hand-over
        for i in range(PER_MODE):
            body = json.dumps({"n": i})
            r.xadd("stream", {"payload": body})
            r.lpush("list", body)
            nats.run(publish(nats.client, "work.job", [body.encode()]))
            sent.append(body)
            time.sleep(0.01)

    fleet = Fleet(db_path)
    for kind in ("mcp", "mcp", "serve"):
        fleet.start(kind)
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    rng = random.Random(int(os.environ.get("SWITCHBOARD_FUZZ_SEED", "13")))
    handovers: list[float] = []
    try:
        for _ in range(ROUNDS):
            fence, pid = new_leader(db_path, fleet)
            time.sleep(rng.uniform(0.2, 1.2))  # a random point of its work
            killed_at = time.monotonic()
            kind = fleet.kill(pid)
            new_leader(db_path, fleet, after_fence=fence)
            handovers.append(time.monotonic() - killed_at)
            fleet.start(kind)
        producer.join(timeout=60)
        expected = PER_MODE * 3
        until(lambda: value(db_path, "SELECT count(*) FROM events WHERE family = 'queue'"), expected,
              context=fleet.logs)  # fmt: skip
        until(lambda: (r.xpending("stream", "switchboard")["pending"], r.llen("list:processing"), r.llen("list")),
              (0, 0, 0), context=fleet.logs)  # fmt: skip
        until(lambda: nats.run(consumer_counts(nats.client, "WORK")), (0, 0), context=fleet.logs)
    finally:
        fleet.stop()
        nats.close()

    for source in ("stream", "list", "nats"):
        text = "convert_from(body, 'UTF8')" if is_url(db_path) else "CAST(body AS TEXT)"  # bytea on PostgreSQL
        bodies = [b for (b,) in rows(db_path, f"SELECT {text} FROM events WHERE source = ?", (source,))]
        assert sorted(bodies) == sorted(sent), f"{source}: every entry stored, and once"
    assert value(db_path, "SELECT count(*) FROM todos") == PER_MODE * 3

    fences: dict[int, int] = {}
    for _, fence_text, ids in BATCH.findall(fleet.logs()):
        for event_id in filter(None, (i.strip() for i in ids.split(","))):
            fences[int(event_id)] = int(fence_text)
    assert len(fences) > PER_MODE  # most batches were logged (a killed process may not log its last)
    in_commit_order = [fences[i] for i in sorted(fences)]
    assert in_commit_order == sorted(in_commit_order), "a batch stored under an older leader's fence after a newer's"
    assert len(set(in_commit_order)) >= 2  # stores on both sides of a hand-over (a leader killed early stores none)
    print(f"hand-over after kill -9: median {statistics.median(handovers):.2f} s, "
          f"max {max(handovers):.2f} s over {len(handovers)} rounds")  # fmt: skip
