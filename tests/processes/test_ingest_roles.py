"""Who runs ingest (issue 13 §1), with real processes: `serve` and `mcp --ingest auto|on|off`,
as `status` and `adapter status` tell it."""

from __future__ import annotations

import json
import time
from pathlib import Path

from support.cli import as_json, invoke, run_cli
from support.mcp import RawServer
from support.receiver import serve_process
from support.redis_server import free_port, started_redis_server


def status(db: Path) -> dict:
    """`status --json`, asked in this process (a look is then milliseconds, not a Python start):
    what it reports is what the real processes under test wrote."""
    answer = invoke(db, "status", "--json")
    assert answer.code == 0, answer.err
    return json.loads(answer.out)


def until_status(db: Path, ok, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while not ok(seen := status(db)):
        assert time.monotonic() < deadline, f"status never became what was wanted; last: {seen}"
        time.sleep(0.1)
    return seen


def test_with_no_process_running_nobody_leads_and_adapters_are_not_consumed(cli, db_path: Path) -> None:
    added = run_cli("adapter", "add", "orders", "--redis-url", "redis://127.0.0.1:6399/0", "--mode", "list",
                    "--key", "orders", db=db_path)  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert status(db_path)["leader"] is None
    text = run_cli("status", db=db_path).stdout
    assert text.startswith("ingest: nobody leads") and "not consumed" in text
    adapters = run_cli("adapter", "status", db=db_path).stdout
    assert "enabled, not consumed" in adapters and "nobody consumes" in adapters
    assert [a["consumed_by"] for a in as_json(cli, "adapter", "status")] == [None]


def test_serve_leads_with_its_receiver_and_an_mcp_stands_by(db_path: Path) -> None:
    with serve_process(db_path) as serve:
        receiver = serve.wait_serving()
        led = until_status(db_path, lambda s: s["leader"] is not None)
        assert (led["leader"]["kind"], led["leader"]["pid"]) == ("serve", serve.proc.pid)
        assert led["leader"]["http"] == f"http://127.0.0.1:{receiver.port}"
        standby = RawServer(db_path, "--ingest", "auto")
        try:
            seen = until_status(db_path, lambda s: [m["pid"] for m in s["standbys"]] == [standby.proc.pid])
            assert seen["leader"]["pid"] == serve.proc.pid  # an mcp never takes over on its own
        finally:
            standby.close()


def test_an_mcp_leads_when_none_does_and_serve_takes_over_only_when_asked(db_path: Path) -> None:
    mcp = RawServer(db_path, "--ingest", "auto")
    try:
        led = until_status(db_path, lambda s: s["leader"] is not None)
        assert (led["leader"]["kind"], led["leader"]["http"]) == ("mcp", None)
        with serve_process(db_path) as waiting:
            waiting.wait_serving()
            until_status(db_path, lambda s: waiting.proc.pid in [m["pid"] for m in s["standbys"]])
            assert status(db_path)["leader"]["pid"] == mcp.proc.pid
        with serve_process(db_path, "--take-over") as taking:
            taking.wait_serving()
            taken = until_status(db_path, lambda s: s["leader"] is not None and s["leader"]["kind"] == "serve")
            assert taken["leader"]["pid"] == taking.proc.pid
            assert mcp.proc.pid in [m["pid"] for m in until_status(db_path, lambda s: s["standbys"])["standbys"]]
    finally:
        mcp.close()


def test_an_mcp_with_ingest_off_never_leads(db_path: Path) -> None:
    mcp = RawServer(db_path, "--ingest", "off")
    try:
        time.sleep(2)  # longer than a standby takes to look and lead
        assert status(db_path) == {"leader": None, "standbys": [], "write_lock_holders": [], "consumers": [],
                                  "schedules": []}
    finally:
        mcp.close()


def test_a_leader_that_exits_cleanly_hands_over_at_once(db_path: Path) -> None:
    first = RawServer(db_path, "--ingest", "auto")
    second = RawServer(db_path, "--ingest", "auto")
    try:
        led = until_status(db_path, lambda s: s["leader"] is not None)
        leader, other = (first, second) if led["leader"]["pid"] == first.proc.pid else (second, first)
        assert leader.close() == 0
        taken = until_status(db_path, lambda s: s["leader"] is not None and s["leader"]["pid"] == other.proc.pid,
                             timeout=5)  # fmt: skip
        assert taken["leader"]["fence"] == led["leader"]["fence"] + 1
    finally:
        first.kill()
        second.kill()


def test_an_mcp_that_leads_runs_the_receiver_only_where_http_listen_says(db_path: Path) -> None:
    import urllib.request

    from support.redis_server import free_port

    assert run_cli("source", "add", "anyone", "--kind", "open", db=db_path).returncode == 0
    quiet = RawServer(db_path, "--ingest", "auto")
    try:
        led = until_status(db_path, lambda s: s["leader"] is not None)
        assert led["leader"]["http"] is None  # no setting: no port opened
    finally:
        quiet.close()
    port = free_port()
    assert run_cli("config", "set", "http.listen", f"127.0.0.1:{port}", db=db_path).returncode == 0
    listening = RawServer(db_path, "--ingest", "auto")
    try:
        led = until_status(db_path, lambda s: s["leader"] is not None and s["leader"]["http"] is not None)
        assert led["leader"]["http"] == f"http://127.0.0.1:{port}"
        request = urllib.request.Request(f"http://127.0.0.1:{port}/hooks/anyone", data=b'{"hello": 1}',
                                         headers={"Content-Type": "application/json"}, method="POST")  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status in (200, 202)
    finally:
        assert listening.close() == 0
    events = json.loads(run_cli("events", "list", "--source", "anyone", "--json", db=db_path).stdout)
    assert len(events) == 1


def test_status_asks_each_adapters_redis_how_much_waits(cli, db_path: Path, tmp_path: Path) -> None:
    server = started_redis_server(tmp_path)
    try:
        server.client().rpush("orders", b"1", b"2", b"3")
        for name, url in (("orders", server.url), ("gone", f"redis://127.0.0.1:{free_port()}/0")):
            added = run_cli("adapter", "add", name, "--redis-url", url, "--mode", "list", "--key", "orders", db=db_path)
            assert added.returncode == 0, added.stderr
        consumers = {c["name"]: c for c in status(db_path)["consumers"]}
        assert (consumers["orders"]["waiting"], consumers["orders"]["unacked"], consumers["orders"]["lag_error"]) == (3, 0, None)
        assert consumers["gone"]["waiting"] is None and consumers["gone"]["lag_error"].startswith("unreachable (")
        rows = {line.split()[0]: line for line in run_cli("status", db=db_path).stdout.splitlines()[2:]}
        assert rows["orders"].split()[1:4] == ["not", "consumed", "3"]
        assert "? (unreachable" in rows["gone"]
    finally:
        server.stop()
