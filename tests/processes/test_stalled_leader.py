"""A SQLite leader stopped inside a write transaction (issue 28 §3.11): it keeps the file's write
lock, so nothing can be written and no standby can take over until it continues. That cannot be
fixed from another process; it is seen and bounded: `status` and `doctor` name the stopped
process, and a webhook to another receiver is answered 503 with Retry-After well inside a
sender's timeout. Real processes: the leader stops itself with the SWITCHBOARD_FAULT hook."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from pathlib import Path

from switchboard_local.core.write_lock import process_state
from switchboard_local.http import app as web

from support.cli import invoke, run_cli
from support.receiver import serve_process
from support.waits import until

HOOK = {"SWITCHBOARD_FAULT": "stop-in-write-transaction"}
BODY = json.dumps({"hello": "standby"}).encode()


def status(db: Path) -> dict:
    answer = invoke(db, "status", "--json")
    assert answer.code == 0, answer.err
    return json.loads(answer.out)


def test_a_leader_stopped_in_a_write_transaction_is_named_and_webhooks_get_503_in_time(tmp_path) -> None:
    db = tmp_path / "sb.db"
    assert invoke(db, "source", "add", "anyone", "--kind", "open").code == 0
    with serve_process(db, env=HOOK) as leader:
        until(lambda: process_state(leader.proc.pid), "stopped", context=lambda: leader.stderr)
        try:
            with serve_process(db) as standby:
                receiver = standby.wait_serving()

                seen = status(db)
                assert seen["write_lock_holders"] == [{"pid": leader.proc.pid, "kind": "serve", "state": "stopped"}]
                text = invoke(db, "status").out
                assert f"write lock: held by serve pid {leader.proc.pid}, which is stopped" in text
                assert f"kill -CONT {leader.proc.pid}" in text
                checks = {c["name"]: c for c in json.loads(invoke(db, "doctor", "--json").out)["checks"]}
                assert checks["write lock"]["status"] == "fail"
                assert f"serve pid {leader.proc.pid}, which is stopped" in checks["write lock"]["detail"]
                assert checks["write lock"]["fix"].startswith(f"kill -CONT {leader.proc.pid}")

                # The client's timeout is the sender's (GitHub gives up after 10 s): the 503 comes before it.
                refused = receiver.post("anyone", BODY, {"Content-Type": "application/json"})
                assert (refused.status, refused.headers["retry-after"]) == (503, str(web.RETRY_AFTER_SECONDS))

                os.kill(leader.proc.pid, signal.SIGCONT)
                until(lambda: receiver.post("anyone", BODY, {"Content-Type": "application/json"}).status, 202,
                      context=lambda: standby.stderr[-3000:])  # fmt: skip
                until(lambda: (status(db)["leader"] is not None, status(db)["write_lock_holders"]), (True, []))
        finally:
            os.kill(leader.proc.pid, signal.SIGCONT)  # never leave a stopped process behind
    events = json.loads(invoke(db, "events", "list", "--source", "anyone", "--json").out)
    assert len(events) == 1  # the delivery answered 503 and stored later, and its retries, are one event


def test_a_process_keeping_the_write_lock_past_the_wait_is_named_with_its_state(tmp_path) -> None:
    db = tmp_path / "sb.db"
    assert invoke(db, "stats").code == 0  # the file, with its schema
    holder = sqlite3.connect(db, isolation_level=None)  # this test's process, another program to them
    holder.execute("BEGIN IMMEDIATE")
    try:
        seen = json.loads(run_cli("status", "--json", db=db).stdout)
        doctor = json.loads(run_cli("doctor", "--json", db=db).stdout)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    [named] = seen["write_lock_holders"]
    assert (named["pid"], named["kind"]) == (os.getpid(), None) and named["state"] in ("sleeping", "running")
    check = {c["name"]: c for c in doctor["checks"]}["write lock"]
    assert check["status"] == "warn" and f"held by a process pid {os.getpid()}" in check["detail"]
    assert status(db)["write_lock_holders"] == []  # let go: nobody is named
