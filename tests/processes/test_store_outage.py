"""A PostgreSQL server that goes away under `serve` (issue 28 §3.5): every webhook sender and every
dashboard route is answered 2xx or 503 with Retry-After, never a 500, and what was acknowledged
is stored. A real server of the test's own is stopped and started again under real HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from switchboard_local.core import access_token

from support.cli import run_cli
from support.postgres import PostgresServer
from support.receiver import Answer, Receiver, serve_process
from support.sql import rows
from support.waits import until

SENDERS = 4
DASHBOARD = ("/", "/api/queues", "/api/todos", "/api/events", "/metrics", "/healthz")
ENOUGH = 10  # answers of a kind that show a phase under way (all of them are checked, however many)


@pytest.fixture
def own_server(tmp_path, monkeypatch) -> Iterator[PostgresServer]:
    """A server of the test's own, to stop and start again (the session's serves every other test)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the dashboard token's folder, ours and serve's
    server = PostgresServer(fsync=False).start()
    try:
        yield server
    finally:
        server.stop()


class Traffic:
    """Senders posting deliveries and a reader going round the dashboard's routes, each answer kept."""

    def __init__(self, receiver: Receiver, token: str) -> None:
        self.receiver = receiver
        self.token = token
        self.answers: list[tuple[str, Answer | str, bytes | None]] = []  # (path, answer or why none, body sent)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._send, args=(k,), daemon=True) for k in range(SENDERS)]
        self.threads.append(threading.Thread(target=self._browse, daemon=True))
        for thread in self.threads:
            thread.start()

    def _keep(self, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> None:
        try:
            if body is not None:
                answer: Answer | str = self.receiver.post("anyone", body, {"Content-Type": "application/json"})
            else:
                answer = self.receiver.request("GET", path, headers=headers or {})
        except OSError as exc:  # no answer within the client's 10 s, or the connection cut
            answer = f"no answer: {exc!r}"
        with self.lock:
            self.answers.append((path, answer, body))

    def _send(self, sender: int) -> None:
        n = 0
        while not self.stop.is_set():
            body = json.dumps({"sender": sender, "n": n}).encode()
            self._keep("/hooks/anyone", body)
            n += 1

    def _browse(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        while not self.stop.is_set():
            for path in DASHBOARD:
                self._keep(path, headers=headers)

    def seen(self, since: int = 0) -> list[tuple[str, Answer | str, bytes | None]]:
        with self.lock:
            return self.answers[since:]

    def count(self, since: int, path_prefix: str, status: int) -> int:
        return sum(1 for path, a, _ in self.seen(since)
                   if path.startswith(path_prefix) and isinstance(a, Answer) and a.status == status)  # fmt: skip

    def wrong(self) -> list[tuple[str, object]]:
        """The answers that are neither 2xx nor 503 (or never came)."""
        return [(path, a if isinstance(a, str) else (a.status, a.body[:300])) for path, a, _ in self.seen()
                if isinstance(a, str) or not (200 <= a.status < 300 or a.status == 503)]  # fmt: skip

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)


@pytest.mark.postgres
def test_a_postgresql_outage_is_answered_503_with_retry_after_on_every_route_and_each_2xx_is_stored(own_server) -> None:
    url = own_server.empty_database()
    added = run_cli("source", "add", "anyone", "--kind", "open", db=url)
    assert added.returncode == 0, added.stderr
    with serve_process(url) as serve:
        receiver = serve.wait_serving()
        traffic = Traffic(receiver, access_token.read_or_create(url))
        watch = {"dead": lambda: f"wrong answers: {traffic.wrong()[:3]}" if traffic.wrong() else None,
                 "context": lambda: serve.stderr[-3000:]}  # fmt: skip
        try:
            until(lambda: traffic.count(0, "/hooks/", 202) >= ENOUGH, True, **watch)
            own_server.halt()
            down = len(traffic.seen())
            until(lambda: (traffic.count(down, "/hooks/", 503) >= ENOUGH, traffic.count(down, "/api/", 503) >= 1),
                  (True, True), **watch)  # fmt: skip
            own_server.resume()
            up = len(traffic.seen())
            until(lambda: traffic.count(up, "/hooks/", 202) >= ENOUGH, True, **watch)
        finally:
            traffic.finish()
    answers = traffic.seen()
    assert not traffic.wrong(), traffic.wrong()[:5]
    unsaid = [path for path, a, _ in answers
              if isinstance(a, Answer) and a.status == 503 and "retry-after" not in a.headers]  # fmt: skip
    assert not unsaid, unsaid[:5]
    acknowledged = {a.json()["event_id"]: body for path, a, body in answers
                    if path.startswith("/hooks/") and isinstance(a, Answer) and a.status == 202}  # fmt: skip
    stored = dict(rows(url, "SELECT id, body FROM events WHERE source = 'anyone'"))
    assert {i: bytes(stored.get(i, b"")) for i in acknowledged} == acknowledged
    assert "Traceback" not in serve.stderr, serve.stderr[-3000:]
