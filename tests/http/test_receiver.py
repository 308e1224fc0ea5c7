"""The receiver around verification: body cap, unknown sources, store failures,
Slack's challenge, /healthz, routing rules through real deliveries, and
`serve` as a real process stopped by SIGTERM or SIGINT (issue 3 §1, §3, §4).

Each test here uses one signature kind (mostly GitHub's) as a means; what each
kind accepts or refuses is in test_signature_kinds.py (over HTTP) and
test_verifiers.py (pure functions). Routing rules without a delivery
(`rule test`) are in tests/core/test_routing.py.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import anyio
import pytest

from switchboard_local.cli.common import EXIT_CANNOT_LISTEN
from switchboard_local.core import rules, sources, webhook_config
from switchboard_local.core.text import SafeFormatter
from switchboard_local.http import app as web

from support.cli import invoke
from support.receiver import Answer, Receiver, add_source, serve_process, serving
from support.signing import github, secret_for, slack
from support.sql import counts, drop_trigger, refuse_inserts, rows

pytestmark = pytest.mark.anyio

SECRET = secret_for("github")


@pytest.fixture
def receiver(store, db_path):
    with serving(db_path) as running:
        yield running


def push(receiver: Receiver, name: str, payload: dict, *, n: int = 1, event: str = "pull_request") -> Answer:
    """A GitHub delivery of ``payload``, correctly signed."""
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "X-GitHub-Event": event, "X-GitHub-Delivery": f"{name}-{n}"}
    return receiver.post(name, body, headers | github(body, SECRET))


def accepted(answer: Answer) -> dict:
    assert answer.status == 202, answer.body
    return answer.json()


def todos_of(db_path: Path) -> list[tuple]:
    return rows(db_path, "SELECT id, queue, title, event_id FROM todos ORDER BY id")


def raw_exchange(receiver: Receiver, head: bytes, body_start: bytes) -> bytes:
    """Send a request head and the start of its body, never the rest; read the answer."""
    with socket.create_connection((receiver.host, receiver.port), timeout=5) as conn:
        conn.sendall(head + body_start)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer


# ---------------------------------------------------------------- body cap


async def capped(store, max_body=1024):
    await add_source(store, "gh", "github", SECRET, max_body=max_body)


async def test_a_body_at_the_cap_is_accepted(store, receiver, db_path):
    await capped(store)
    body = b"{" + b" " * 1022 + b"}"
    accepted(receiver.post("gh", body, github(body, SECRET) | {"X-GitHub-Event": "push"}))
    assert counts(db_path) == (1, 1)


async def test_a_body_over_the_cap_with_a_content_length_gets_413_and_stores_nothing(store, receiver, db_path):
    await capped(store)
    body = b"{" + b" " * 2046 + b"}"
    answer = receiver.post("gh", body, github(body, SECRET) | {"X-GitHub-Event": "push"})
    assert answer.status == 413, answer.body
    assert counts(db_path) == (0, 0)


async def test_a_chunked_body_over_the_cap_gets_413_and_stores_nothing(store, receiver, db_path):
    await capped(store)
    body = b"{" + b" " * 4094 + b"}"
    pieces = (body[i : i + 512] for i in range(0, len(body), 512))  # no length known: chunked
    answer = receiver.post("gh", pieces, github(body, SECRET) | {"X-GitHub-Event": "push"})
    assert answer.status == 413, answer.body
    assert counts(db_path) == (0, 0)


async def test_a_declared_oversize_body_is_refused_before_it_is_sent(store, receiver, db_path):
    await capped(store)
    head = (
        b"POST /hooks/gh HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: 104857600\r\n\r\n"
    )
    answer = raw_exchange(receiver, head, b"")  # 100 MB announced, not one byte sent
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert counts(db_path) == (0, 0)


async def test_a_chunked_body_is_refused_once_past_the_cap_without_waiting_for_the_rest(store, receiver, db_path):
    await capped(store)
    head = b"POST /hooks/gh HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
    first = b"800\r\n" + b"x" * 2048 + b"\r\n"  # one 2 KiB chunk; the body never ends
    answer = raw_exchange(receiver, head, first)
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert counts(db_path) == (0, 0)


# ---------------------------------------------------------------- sources


async def test_an_unknown_source_gets_404(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET)
    assert push(receiver, "nope", {"action": "opened"}).status == 404
    assert counts(db_path) == (0, 0)


async def test_a_queue_adapter_is_not_a_webhook_source(store, receiver, db_path):
    await sources.add(store, "jobs", family="queue", kind="stream", trust_mode="queue", config={})
    assert push(receiver, "jobs", {"action": "opened"}).status == 404
    assert counts(db_path) == (0, 0)


async def test_a_source_whose_secret_cannot_be_read_gets_503_and_stores_nothing(store, receiver, db_path):
    # The provider should retry once the server is given its secret.
    await sources.add(
        store, "gh", family="webhook", kind="github", trust_mode="github",
        config=webhook_config.source_config("github", {}), secrets=[sources.secret_ref(env="SWITCHBOARD_TEST_UNSET_SECRET")],
    )  # fmt: skip
    assert "SWITCHBOARD_TEST_UNSET_SECRET" not in os.environ
    assert push(receiver, "gh", {"action": "opened"}).status == 503
    assert counts(db_path) == (0, 0)


async def test_a_disabled_source_gets_404_until_it_is_enabled_again(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET)
    await sources.set_enabled(store, "gh", False)
    assert push(receiver, "gh", {"action": "opened"}).status == 404
    assert counts(db_path) == (0, 0)

    await sources.set_enabled(store, "gh", True)
    accepted(push(receiver, "gh", {"action": "opened"}))
    assert counts(db_path) == (1, 1)


# ---------------------------------------------------------------- store failure


@pytest.mark.both_backends
async def test_a_failed_commit_gets_503_stores_nothing_and_the_retry_is_stored_once(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET)
    refuse_inserts(db_path, "boom", "events", "injected")
    refused = push(receiver, "gh", {"action": "opened"})
    assert (refused.status, refused.headers["retry-after"]) == (503, str(web.RETRY_AFTER_SECONDS))
    assert counts(db_path) == (0, 0)

    drop_trigger(db_path, "boom", "events")
    got = accepted(push(receiver, "gh", {"action": "opened"}))
    assert got["duplicate"] is False
    assert counts(db_path) == (1, 1)


# ---------------------------------------------------------------- replays (hardening §4)


async def test_a_captured_github_body_reposted_with_a_new_delivery_id_is_answered_as_a_duplicate(store, receiver,
                                                                                              db_path):  # fmt: skip
    await add_source(store, "gh", "github", SECRET)
    first = accepted(push(receiver, "gh", {"action": "opened", "number": 1}, n=1))
    replayed = accepted(push(receiver, "gh", {"action": "opened", "number": 1}, n=2))
    assert replayed == {"event_id": first["event_id"], "duplicate": True, "todos": first["todos"]}
    assert counts(db_path) == (1, 1)


async def test_a_source_with_its_replay_window_off_takes_the_same_body_under_a_new_id(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET, replay_window=0)
    accepted(push(receiver, "gh", {"action": "opened", "number": 1}, n=1))
    again = accepted(push(receiver, "gh", {"action": "opened", "number": 1}, n=2))
    assert again["duplicate"] is False
    assert counts(db_path) == (2, 2)


# ---------------------------------------------------------------- Slack's challenge, health


async def test_a_signed_slack_url_verification_is_answered_with_its_challenge_and_stores_nothing(store, receiver, db_path):
    secret = secret_for("slack")
    await add_source(store, "sl", "slack", secret)
    body = b'{"token": "legacy", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}'

    answer = receiver.post("sl", body, {"Content-Type": "application/json"} | slack(body, secret, int(time.time())))

    assert answer.status == 200
    assert answer.body.decode() == "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    assert counts(db_path) == (0, 0)


async def test_an_unsigned_slack_url_verification_is_refused(store, receiver, db_path):
    await add_source(store, "sl", "slack", secret_for("slack"))
    body = b'{"challenge": "abc", "type": "url_verification"}'
    answer = receiver.post("sl", body, {"Content-Type": "application/json"})
    assert answer.status == 401
    assert b"abc" not in answer.body
    assert counts(db_path) == (0, 0)


async def test_healthz_answers_200_when_the_database_is_writable(receiver):
    answer = receiver.request("GET", "/healthz")
    assert answer.status == 200
    assert answer.json() == {"ok": True, "checks": {"database": "ok", "secrets": "ok"}, "sources_without_secret": []}


async def test_healthz_answers_503_while_the_database_cannot_be_written(receiver, db_path):
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        answer = await anyio.to_thread.run_sync(receiver.request, "GET", "/healthz")
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert answer.status == 503
    assert answer.json()["ok"] is False
    assert receiver.request("GET", "/healthz").status == 200


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """The file read-only for real: root ignores modes, so make it immutable then."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o400)
        try:
            yield
        finally:
            path.chmod(0o600)


async def test_healthz_answers_503_when_the_database_file_is_read_only_as_every_delivery_does(store, db_path):
    await add_source(store, "gh", "github", SECRET)
    with read_only(db_path), serving(db_path) as receiver:
        answer = await anyio.to_thread.run_sync(receiver.request, "GET", "/healthz")
        delivered = await anyio.to_thread.run_sync(push, receiver, "gh", PR)
    assert delivered.status == 503, delivered.body
    assert answer.status == 503, answer.body
    got = answer.json()
    assert got["ok"] is False and got["checks"]["secrets"] == "ok"
    assert "cannot be written" in got["checks"]["database"] and "cannot be written" in got["error"]
    assert counts(db_path) == (0, 0)


async def test_healthz_answers_503_naming_the_enabled_sources_whose_secret_cannot_be_read(store, receiver):
    await sources.add(
        store, "gh", family="webhook", kind="github", trust_mode="github",
        config=webhook_config.source_config("github", {}), secrets=[sources.secret_ref(env="SWITCHBOARD_TEST_UNSET_SECRET")],
    )  # fmt: skip
    await add_source(store, "fine", "github", SECRET)
    await add_source(store, "anyone", "open")  # needs no secret
    assert "SWITCHBOARD_TEST_UNSET_SECRET" not in os.environ

    answer = await anyio.to_thread.run_sync(receiver.request, "GET", "/healthz")

    assert answer.status == 503
    got = answer.json()
    assert got["ok"] is False and got["checks"]["database"] == "ok"
    assert got["sources_without_secret"] == ["gh"]
    assert "gh" in got["checks"]["secrets"] and "gh" in got["error"]

    await sources.set_enabled(store, "gh", False)  # a disabled source gets 404 anyway, not 503
    assert (await anyio.to_thread.run_sync(receiver.request, "GET", "/healthz")).status == 200


# ---------------------------------------------------------------- routing


PR = {"action": "opened", "pull_request": {"title": "Fix the flaky test", "number": 42, "base": {"ref": "main"}}}


@pytest.mark.both_backends
async def test_every_matching_rule_adds_a_todo_on_its_queue(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET)
    await rules.add(store, source="gh", type="pull_request", where=["action=opened"], queue="review")
    await rules.add(store, source="gh", where=["action=closed"], queue="never")
    await rules.add(store, source="gh", where=["pull_request.base.ref~ma*"], queue="ci")

    got = accepted(push(receiver, "gh", PR))

    assert [(t[0], t[1], t[3]) for t in todos_of(db_path)] == [
        (got["todos"][0], "review", got["event_id"]),
        (got["todos"][1], "ci", got["event_id"]),
    ]


async def test_two_matching_rules_on_one_queue_make_two_todos(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET)
    await rules.add(store, source="gh", queue="review", title="first look")
    await rules.add(store, source="gh", queue="review", title="second look")

    got = accepted(push(receiver, "gh", PR))

    assert len(got["todos"]) == 2
    assert [(t[1], t[2]) for t in todos_of(db_path)] == [("review", "first look"), ("review", "second look")]


async def test_a_stop_rule_ends_routing_after_its_own_todo(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET)
    await rules.add(store, source="gh", where=["action=opened"], queue="first", stop=True)
    await rules.add(store, source="gh", queue="second")

    got = accepted(push(receiver, "gh", PR))

    assert len(got["todos"]) == 1
    assert [t[1] for t in todos_of(db_path)] == ["first"]


async def test_a_drop_rule_makes_no_todo_but_the_event_is_stored(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET)
    await rules.add(store, source="gh", type="pull_request", where=["action=opened"], drop=True)
    await rules.add(store, source="gh", queue="after-the-drop")

    got = accepted(push(receiver, "gh", PR))

    assert got["todos"] == []
    assert counts(db_path) == (1, 0)
    assert rows(db_path, "SELECT id FROM events")[0][0] == got["event_id"]


async def test_a_form_encoded_delivery_routes_on_its_payload_field(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET)
    await rules.add(store, source="gh", where=["action=opened"], queue="review", title="{pull_request.title}")
    body = urlencode({"payload": json.dumps(PR)}).encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded", "X-GitHub-Event": "pull_request"}

    accepted(receiver.post("gh", body, headers | github(body, SECRET)))

    assert [(t[1], t[2]) for t in todos_of(db_path)] == [("review", "Fix the flaky test")]
    assert bytes(rows(db_path, "SELECT body FROM events")[0][0]) == body


async def test_an_event_no_rule_matches_goes_to_the_source_name_queue(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET)
    await add_source(store, "other", "github", SECRET)
    await rules.add(store, source="gh", type="issues", queue="issues-only")
    await rules.add(store, source="other", queue="other-sources-rule")  # not a rule of gh

    accepted(push(receiver, "gh", PR))

    assert [t[1] for t in todos_of(db_path)] == ["gh"]


async def test_an_event_no_rule_matches_goes_to_the_sources_configured_queue(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET, queue="triage")

    accepted(push(receiver, "gh", PR))

    assert [t[1] for t in todos_of(db_path)] == ["triage"]


async def test_a_title_template_fills_payload_fields_and_renders_a_missing_one_empty(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET)
    await rules.add(
        store, source="gh", queue="review", title="PR #{pull_request.number}: {pull_request.title} by {pull_request.user.login}."
    )

    accepted(push(receiver, "gh", PR))

    assert [t[2] for t in todos_of(db_path)] == ["PR #42: Fix the flaky test by ."]


async def test_a_rule_added_while_serving_applies_to_the_next_delivery(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET)
    accepted(push(receiver, "gh", PR, n=1))

    await rules.add(store, source="gh", queue="added-live")
    accepted(push(receiver, "gh", {**PR, "number": 2}, n=2))

    assert [t[1] for t in todos_of(db_path)] == ["gh", "added-live"]


# ---------------------------------------------------------------- `serve` as a process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(proc: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            if Receiver("127.0.0.1", port).request("GET", "/healthz").status == 200:
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError("serve did not answer /healthz")


def read_head(sock: socket.socket) -> bytes:
    """One response head off the socket (an interim 100 Continue, here)."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)  # a byte at a time: nothing past the head is taken from http.client
        assert chunk, f"the connection closed after {head!r}"
        head += chunk
    return head


def until_refused(port: int, timeout: float = 20) -> None:
    """Until connections to ``port`` are refused (a stopping server closed its socket)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except ConnectionRefusedError:
            return
        assert time.monotonic() < deadline, f"port {port} still accepts connections {timeout:g} s after the stop"
        time.sleep(0.05)


@pytest.mark.both_backends
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_stores_signed_deliveries_and_exits_0_on_a_stop_signal_finishing_the_request_in_flight(stop, db_path):
    secret = "process-secret-value"
    added = invoke(db_path, "source", "add", "gh", "--kind", "github", "--secret-env", "GH_WEBHOOK_SECRET")
    assert added.code == 0, added.err
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "switchboard_local", "serve", "--port", str(port), "--db", str(db_path)],
        env={**os.environ, "GH_WEBHOOK_SECRET": secret},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_healthy(proc, port)
        first = json.dumps(PR).encode()
        answer = Receiver("127.0.0.1", port).post(
            "gh", first, {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-1"} | github(first, secret)
        )
        assert answer.status == 202, answer.body

        # A second delivery is in flight (the app is reading its body) when the signal arrives.
        second = json.dumps({**PR, "action": "synchronize"}).encode()
        headers = {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-2"} | github(second, secret)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.putrequest("POST", "/hooks/gh")
        for name, value in {**headers, "Content-Length": str(len(second)), "Expect": "100-continue"}.items():
            conn.putheader(name, value)
        conn.endheaders()
        assert read_head(conn.sock).startswith(b"HTTP/1.1 100 ")  # sent once the app asks for the body
        proc.send_signal(stop)
        until_refused(port)  # it stopped accepting
        conn.send(second)
        in_flight = conn.getresponse()
        assert in_flight.status == 202, in_flight.read()
        conn.close()

        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    stored = rows(db_path, "SELECT id, external_id, verified, body FROM events WHERE source = 'gh' ORDER BY id")
    assert [(r[1], r[2], bytes(r[3])) for r in stored] == [("d-1", 1, first), ("d-2", 1, second)]
    assert secret not in stderr
    logged = [line for line in stderr.splitlines() if "source=gh" in line]
    assert len(logged) == 2, stderr  # one line per delivery: source, type, event id, outcome
    for line, event_id in zip(logged, (r[0] for r in stored)):
        assert all(part in line for part in ("type=pull_request", f"event={event_id}", "outcome=stored")), line


async def test_healthz_answers_503_when_the_disk_is_nearly_full(receiver, monkeypatch):
    from switchboard_local.core.store.sqlite import store as store_module

    monkeypatch.setattr(store_module, "MIN_FREE_BYTES", 2**62)  # no disk has that much free
    answer = await anyio.to_thread.run_sync(receiver.request, "GET", "/healthz")
    assert answer.status == 503 and "free" in answer.json()["error"]


def test_serve_on_a_taken_port_exits_5_saying_it_cannot_listen_and_never_that_it_serves(db_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "switchboard_local", "serve", "--port", str(port), "--db", str(db_path)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == EXIT_CANNOT_LISTEN == 5, done.stderr
    assert f"switchboard-local: cannot_listen: cannot listen on 127.0.0.1:{port}: address already in use" in done.stderr
    assert "serving on" not in done.stderr


def test_serve_on_port_0_logs_the_address_it_bound_once_it_serves(db_path):
    with serve_process(db_path) as serve:
        receiver = serve.wait_serving()
        assert receiver.port != 0
        assert receiver.request("GET", "/healthz").status == 200  # the logged port is the one that answers
        assert serve.stop() == 0
    assert "serving on http://127.0.0.1:0" not in serve.stderr
    assert len([line for line in serve.stderr.splitlines() if "serving on" in line]) == 1


def test_serve_warns_at_start_of_each_enabled_source_whose_secret_cannot_be_read(cli, db_path):
    for args in (
        ["source", "add", "gh", "--kind", "github", "--secret-env", "SWITCHBOARD_TEST_UNSET_GH"],
        ["source", "add", "files", "--kind", "gitea", "--secret-file", str(db_path.parent / "no-such-file")],
        ["source", "add", "quiet", "--kind", "github", "--secret-env", "SWITCHBOARD_TEST_UNSET_QUIET"],
        ["source", "disable", "quiet"],
        ["source", "add", "fine", "--kind", "github", "--secret-env", "SWITCHBOARD_TEST_SET"],
    ):
        done = cli(*args)
        assert done.code == 0, done.err
    with serve_process(db_path, env={"SWITCHBOARD_TEST_SET": "a-secret-value"}) as serve:
        receiver = serve.wait_serving()
        health = receiver.request("GET", "/healthz")
        assert serve.stop() == 0
    warned = [line for line in serve.stderr.splitlines() if "WARNING" in line]
    assert len(warned) == 2, serve.stderr  # one line per source, by name
    assert "source files:" in warned[0] and "no-such-file" in warned[0] and "503" in warned[0]
    assert "source gh:" in warned[1] and "env:SWITCHBOARD_TEST_UNSET_GH" in warned[1] and "503" in warned[1]
    assert health.status == 503 and health.json()["sources_without_secret"] == ["files", "gh"]
    assert "a-secret-value" not in serve.stderr


def test_a_source_name_with_control_characters_is_logged_on_one_line_escaped(db_path):
    with serve_process(db_path) as serve:
        receiver = serve.wait_serving()
        forged = "/hooks/x%0A2026-01-01%2000:00:00,000%20INFO%20FAKE%20delivery%1B[31m%E2%80%AEred%0D"
        assert receiver.request("POST", forged, b"{}").status == 404
        assert serve.stop() == 0
    logged = [line for line in serve.stderr.splitlines() if "FAKE" in line]
    assert len(logged) == 1, serve.stderr
    assert "outcome=unknown-source" in logged[0]
    assert "\\n2026-01-01" in logged[0] and "\\u001b[31m" in logged[0] and "\\u202e" in logged[0]
    assert not any(ch in serve.stderr for ch in "\x1b\r\u202e")


def test_the_serve_log_formatter_escapes_the_message_and_keeps_a_tracebacks_own_lines():
    formatter = SafeFormatter("%(levelname)s %(message)s")
    try:
        raise ValueError("bad \x1b[2J value")
    except ValueError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "source=%s", ("x\nFAKE\x1b[31m",), sys.exc_info())
    text = formatter.format(record)
    first, *traceback = text.splitlines()
    assert first == "ERROR source=x\\x0aFAKE\\x1b[31m"
    assert traceback[0] == "Traceback (most recent call last):"
    assert traceback[-1] == "ValueError: bad \\x1b[2J value"
