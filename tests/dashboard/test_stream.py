"""The live stream (issue 14 §1 "Live"): server-sent events on the commit watch, from any process."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from switchboard_local.core import todos
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.dashboard import stream
from switchboard_local.http.limits import Limits

from support.dashboard import serving_dashboard
from support.html import parse
from support.receiver import add_source
from support.signing import github, secret_for

pytestmark = pytest.mark.anyio

SECRET = secret_for("github")


def post_from_another_process(port: int, name: str, delivery: str) -> int:
    """A signed GitHub delivery sent by a separate Python process; its HTTP status."""
    body = json.dumps({"action": "opened", "issue": {"title": "from afar"}}).encode()
    headers = {"Content-Type": "application/json", "X-GitHub-Event": "issues", "X-GitHub-Delivery": delivery,
               **github(body, SECRET)}  # fmt: skip
    script = textwrap.dedent(f"""
        import http.client, sys
        conn = http.client.HTTPConnection("127.0.0.1", {port}, timeout=10)
        conn.request("POST", "/hooks/{name}", body={body!r}, headers={headers!r})
        print(conn.getresponse().status)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True)
    return int(done.stdout.strip())


async def test_the_stream_says_ready_first_and_tells_the_browser_when_to_reconnect(board):
    with board.stream("queues,todos") as events:
        assert events.status == 200
        assert events.headers["content-type"].startswith("text/event-stream")
        first = events.next()
        assert first.event == "ready" and first.json() == {"topics": ["queues", "todos"]}
        assert events.retry is not None and events.retry > 0


async def test_a_webhook_posted_from_another_process_shows_up_on_the_stream(store, board):
    await add_source(store, "gh", "github", secret=SECRET, queue="triage")
    with board.stream() as events:
        events.next(event="ready")
        assert post_from_another_process(board.port, "gh", "d-1") == 202
        change = events.next(timeout=15, event="change")
        assert {"events", "todos", "queues"} <= set(change.json()["topics"])


@pytest.mark.both_backends
async def test_a_todo_created_by_another_process_on_the_file_shows_up_on_the_stream(board, db_path):
    with board.stream("queues") as events:
        events.next(event="ready")
        subprocess.run([sys.executable, "-m", "switchboard_local", "todo", "create", "--queue", "triage",
                        "--title", "from the CLI", "--db", str(db_path)], check=True, capture_output=True, timeout=30)  # fmt: skip
        assert events.next(timeout=15, event="change").json() == {"topics": ["queues"]}


@pytest.mark.both_backends
async def test_a_queue_limit_changed_by_another_process_shows_up_on_the_queues_stream(board, db_path):
    def limit(n: int) -> None:
        subprocess.run([sys.executable, "-m", "switchboard_local", "queue", "limit", "deploy", "--max-claimed", str(n),
                        "--db", str(db_path)], check=True, capture_output=True, timeout=30)  # fmt: skip

    limit(2)  # the queue's row is there before the stream starts: only its limit changes below
    with board.stream("queues") as events:
        events.next(event="ready")
        limit(3)
        assert "queues" in events.next(timeout=15, event="change").json()["topics"]


async def test_a_stream_hears_only_the_topics_it_asked_for(store, board, db_path):
    await add_source(store, "gh", "github", secret=SECRET, queue="triage")
    with board.stream("dead") as quiet, board.stream("events") as told:
        quiet.next(event="ready")
        told.next(event="ready")
        assert post_from_another_process(board.port, "gh", "d-2") == 202
        assert told.next(timeout=15, event="change").json() == {"topics": ["events"]}
        with pytest.raises(TimeoutError):
            quiet.next(timeout=2.5, event="change")


async def test_an_unknown_topic_is_refused_by_name(board):
    answer = board.get("/api/stream?topics=queues,bogus")
    assert answer.status == 400
    assert "'bogus'" in answer.json()["error"]["message"]


async def test_the_stream_is_guarded_like_every_dashboard_path(board):
    assert board.get("/api/stream", headers={"Host": "rebound.example:80"}).status == 403


# ---------------------------------------------------------------- streams hold connections: their own budget

LIMITS = Limits(max_connections=16)  # the streams may hold 2 of them


def open_stream(port: int, token: str | None) -> tuple[int, bytes, socket.socket]:
    """A raw ``GET /api/stream``: its status, what it read, and the socket, held open by the
    caller. An accepted stream is read to its ``ready`` event; a refused one to the end
    of the connection, which the server closed (so it holds nothing of the server's)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    sock.sendall(f"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n".encode())
    got = b""
    while b"\r\n\r\n" not in got or (got.startswith(b"HTTP/1.1 200") and b"event: ready" not in got):
        chunk = sock.recv(65536)
        assert chunk, f"the connection ended after {got!r}"
        got += chunk
    status = int(got.split(b" ", 2)[1])
    if status != 200:
        while chunk := sock.recv(65536):
            got += chunk
    return status, got, sock


@contextlib.contextmanager
def held() -> Iterator[list[socket.socket]]:
    sockets: list[socket.socket] = []
    try:
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def deliver(board, delivery: str) -> int:
    body = json.dumps({"action": "opened"}).encode()
    headers = {"Content-Type": "application/json", "X-GitHub-Event": "issues", "X-GitHub-Delivery": delivery,
               **github(body, SECRET)}  # fmt: skip
    return board.receiver.post("gh", body, headers).status


async def test_the_dashboard_s_streams_cannot_take_the_receiver_s_connections(store, db_path):
    await add_source(store, "gh", "github", secret=SECRET, queue="triage")
    with serving_dashboard(db_path, LIMITS) as board, held() as sockets:
        answers = []
        for _ in range(LIMITS.max_connections):  # as many streams as the server has connections
            status, got, sock = open_stream(board.port, board.token)
            sockets.append(sock)
            answers.append(status)
            if status != 200:
                assert status == 503 and b"retry-after: 3" in got.lower() and b"live streams" in got
        assert answers.count(200) == LIMITS.max_streams == 2
        assert deliver(board, "d-1") == 202


async def test_a_stream_without_the_token_is_refused_at_once_and_holds_nothing(store, db_path):
    await add_source(store, "gh", "github", secret=SECRET, queue="triage")
    with serving_dashboard(db_path, LIMITS) as board, held() as sockets:
        for _ in range(2 * LIMITS.max_connections):
            status, got, sock = open_stream(board.port, None)
            sockets.append(sock)  # the client keeps its end open; the server closed its own
            assert status == 401 and b"switchboard-local dashboard" in got
        assert deliver(board, "d-1") == 202
        with board.stream() as events:  # and the streams' budget is whole
            assert events.next().event == "ready"


async def test_a_stream_ends_after_its_lifetime_and_gives_its_place_back(db_path, monkeypatch):
    monkeypatch.setattr(stream, "LIFETIME_SECONDS", 0.5)
    with serving_dashboard(db_path, LIMITS) as board:
        for _ in range(LIMITS.max_streams + 1):  # one more than the budget, one after another
            with board.stream() as events:
                assert events.next().event == "ready"
                with pytest.raises(EOFError):
                    while True:
                        events.next(timeout=30)


def rendered_since(board, path: str) -> str:
    """A page's data-since: the fingerprint it was rendered with."""
    answer = board.get(path)
    assert answer.status == 200
    return parse(answer.body).one("body").attrs["data-since"]


async def test_a_page_rendered_before_a_change_hears_of_it_as_the_stream_opens(store, board):
    since = rendered_since(board, "/")
    await add_source(store, "gh", "github", secret=SECRET, queue="triage")
    assert post_from_another_process(board.port, "gh", "d-3") == 202
    with board.stream(f"queues,events&since={quote(since)}") as events:
        events.next(event="ready")
        assert set(events.next(timeout=15, event="change").json()["topics"]) == {"queues", "events"}


async def test_a_page_rendered_with_the_latest_data_is_told_of_nothing_until_something_moves(store, board):
    since = rendered_since(board, "/")
    with board.stream(f"queues,events&since={quote(since)}") as events:
        events.next(event="ready")
        await todos.create(store, NewTodo(queue="triage", title="made after the page"))  # no event: queues alone move
        # The first change is this todo's, not a catch-up naming the events too.
        assert events.next(timeout=15, event="change").json() == {"topics": ["queues"]}


async def test_a_since_that_is_not_a_pages_fingerprint_is_refused(board):
    answer = board.get("/api/stream?since=" + quote("[1, 2]"))
    assert answer.status == 400
    assert "since must be" in answer.json()["error"]["message"]
