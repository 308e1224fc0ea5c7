"""`serve --workers N` (issue 32): worker processes answering webhooks on the one listening socket,
each storing before it answers; a killed worker loses nothing and is replaced; the workers end
with their `serve`. Real processes, real HTTP over loopback, on both backends."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from support.cli import run_cli
from support.receiver import Receiver, ServeProcess, serve_process
from support.sql import value

DELIVERIES = 400
SENDERS = 8


def open_source(db: Path | str) -> None:
    added = run_cli("source", "add", "hooks", "--kind", "open", db=db)
    assert added.returncode == 0, added.stderr


def workers_started(serve: ServeProcess) -> list[int]:
    return [int(pid) for pid in re.findall(r"INFO worker (\d+) started", serve.stderr)]


def until(ok, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"  # a zombie is gone too


def deliver(receiver: Receiver, body: bytes) -> int:
    """POST until answered 2xx, as a webhook sender retries: a connection cut (its worker killed) or a
    refusal is tried again, on a new connection."""
    for _ in range(100):
        conn = http.client.HTTPConnection(receiver.host, receiver.port, timeout=30)
        try:
            conn.request("POST", "/hooks/hooks", body=body, headers={"content-type": "application/json"})
            status = conn.getresponse().status
        except (ConnectionError, http.client.HTTPException):
            continue
        finally:
            conn.close()
        if status < 300:
            return status
    raise AssertionError(f"{body!r} was never stored")


def send_all(receiver: Receiver, first: int, last: int) -> None:
    bodies = [json.dumps({"n": n}).encode() for n in range(first, last)]
    threads = [threading.Thread(target=lambda share=bodies[i::SENDERS]: [deliver(receiver, b) for b in share])
               for i in range(SENDERS)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def stored(db: Path | str) -> tuple[int, int, int]:
    """Events from the source, their distinct bodies, and todos."""
    return (value(db, "SELECT count(*) FROM events WHERE source = 'hooks'"),
            value(db, "SELECT count(DISTINCT external_id) FROM events WHERE source = 'hooks'"),
            value(db, "SELECT count(*) FROM todos"))  # fmt: skip


def test_workers_answer_on_the_one_address_and_each_delivery_is_stored_once(db_path: Path | str) -> None:
    open_source(db_path)
    with serve_process(db_path, "--workers", "3") as serve:
        receiver = serve.wait_serving()
        until(lambda: len(re.findall(r"worker \d+: serving on", serve.stderr)) == 2, "two workers serving")
        send_all(receiver, 0, DELIVERIES)
        assert stored(db_path) == (DELIVERIES, DELIVERIES, DELIVERIES)
        answered_by = {m for m in re.findall(r"(?:worker (\d+): )?delivery", serve.stderr)}
        assert len(answered_by) >= 2, answered_by  # the leader ('') and at least one worker took deliveries
        assert serve.stop() == 0


def test_a_killed_worker_loses_no_delivery_stores_none_twice_and_is_replaced(db_path: Path | str) -> None:
    open_source(db_path)
    with serve_process(db_path, "--workers", "3") as serve:
        receiver = serve.wait_serving()
        until(lambda: len(workers_started(serve)) == 2, "two workers started")
        victim = workers_started(serve)[0]
        killer = threading.Thread(target=lambda: (until(lambda: stored(db_path)[0] >= DELIVERIES // 4, "a quarter stored"),
                                                  os.kill(victim, signal.SIGKILL)))  # fmt: skip
        killer.start()
        send_all(receiver, 0, DELIVERIES)
        killer.join()
        until(lambda: len(workers_started(serve)) == 3, "the killed worker replaced")
        assert f"worker {victim} exited (killed by SIGKILL); starting another" in serve.stderr
        send_all(receiver, DELIVERIES, DELIVERIES + 50)  # the replacement serves beside the others
        assert stored(db_path) == (DELIVERIES + 50,) * 3
        assert serve.stop() == 0


def test_stopping_serve_stops_its_workers_and_it_exits_0(db_path: Path | str) -> None:
    open_source(db_path)
    with serve_process(db_path, "--workers", "3") as serve:
        serve.wait_serving()
        until(lambda: len(workers_started(serve)) == 2, "two workers started")
        pids = workers_started(serve)
        assert serve.stop() == 0
        assert not [pid for pid in pids if alive(pid)]


def test_a_killed_serve_takes_its_workers_along(db_path: Path | str) -> None:
    open_source(db_path)
    with serve_process(db_path, "--workers", "2") as serve:
        serve.wait_serving()
        until(lambda: re.search(r"worker \d+: serving on", serve.stderr) is not None, "the worker serving")
        (worker,) = workers_started(serve)
        serve.proc.kill()
        serve.proc.wait()
        until(lambda: not alive(worker), "the orphaned worker gone")


def test_a_workers_database_is_never_on_its_command_line(tmp_path: Path) -> None:
    db = tmp_path / "secret-place.db"
    open_source(db)
    with serve_process(db, "--workers", "2") as serve:
        serve.wait_serving()
        until(lambda: len(workers_started(serve)) == 1, "the worker started")
        (worker,) = workers_started(serve)
        command = Path(f"/proc/{worker}/cmdline").read_bytes().split(b"\0")
        assert b"--listen-fd" in command and not [part for part in command if b"secret-place" in part]
        assert serve.stop() == 0


def test_more_workers_than_the_loops_thread_pool_holds_are_each_replaced_when_they_die(tmp_path: Path) -> None:
    # Each worker's end is waited for on a thread of its own: with the loop's default pool
    # (6 threads on 2 cores) the seventh worker's death would go unseen.
    db = tmp_path / "db"
    open_source(db)
    with serve_process(db, "--workers", "8") as serve:
        receiver = serve.wait_serving()
        until(lambda: len(re.findall(r"worker \d+: serving on", serve.stderr)) == 7, "seven workers serving", 60)
        last = workers_started(serve)[-1]
        os.kill(last, signal.SIGKILL)
        until(lambda: len(workers_started(serve)) == 8, "the seventh worker replaced")
        assert receiver.request("GET", "/healthz").status == 200
        assert serve.stop() == 0


def test_a_worker_killed_by_a_signal_without_a_name_is_replaced_and_said(tmp_path: Path) -> None:
    db = tmp_path / "db"
    open_source(db)
    with serve_process(db, "--workers", "2") as serve:
        serve.wait_serving()
        until(lambda: len(workers_started(serve)) == 1, "the worker started")
        (worker,) = workers_started(serve)
        os.kill(worker, signal.SIGRTMIN + 5)
        until(lambda: len(workers_started(serve)) == 2, "the worker replaced")
        assert f"worker {worker} exited (killed by signal {int(signal.SIGRTMIN) + 5}); starting another" in serve.stderr
        assert serve.stop() == 0


def test_a_worker_of_another_version_than_its_serve_refuses_to_run(tmp_path: Path) -> None:
    db = tmp_path / "db"
    open_source(db)
    with socket.create_server(("127.0.0.1", 0)) as sock:
        refused = subprocess.run(
            [sys.executable, "-m", "switchboard_local", "serve", "--listen-fd", str(sock.fileno())],
            pass_fds=[sock.fileno()], capture_output=True, text=True, timeout=60,
            env={**os.environ, "SWITCHBOARD_DB": str(db), "SWITCHBOARD_WORKER_VERSION": "0.0.1"},
        )  # fmt: skip
    assert refused.returncode == 1
    assert "its serve 0.0.1: restart serve to run the new version" in refused.stderr


@pytest.mark.parametrize("count", ["0", "65", "two"])
def test_a_worker_count_out_of_range_is_refused(tmp_path: Path, count: str) -> None:
    refused = run_cli("serve", "--port", "0", "--workers", count, db=tmp_path / "db")
    assert refused.returncode == 2 and "--workers" in refused.stderr
