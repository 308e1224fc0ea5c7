"""What one client may hold of `serve`, tried with raw sockets: the size of a
request head (431), a head or body that stops arriving (408), and the number
of connections open at once (503). Each refusal closes the connection and
stores nothing; deliveries on a kept-alive connection are measured one by one.
"""

from __future__ import annotations

import json
import select
import socket
import time

import pytest

from switchboard_local.http.app import RETRY_AFTER_SECONDS
from switchboard_local.http.limits import Limits

from support.cli import invoke
from support.receiver import Receiver, add_source, serve_process, serving
from support.signing import github, secret_for
from support.sql import counts

pytestmark = pytest.mark.anyio

SECRET = secret_for("github")
KIB = 1024
WAIT = 10  # seconds: only ever reached when the server fails to answer


def connect(receiver: Receiver) -> socket.socket:
    return socket.create_connection((receiver.host, receiver.port), timeout=WAIT)


def read_answer(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or WAIT passes)."""
    answer = b""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            chunk = conn.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        answer += chunk
    return answer


def read_one(conn: socket.socket) -> tuple[int, bytes]:
    """One answer (status and body, by its content-length) on a connection left open."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"closed before an answer: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += conn.recv(65536)
    return int(head.split(b" ")[1]), body


def head_of(path: str, header_bytes: int, *, extra: str = "") -> bytes:
    """A GET head whose X-Filler header makes it ``header_bytes`` long in all."""
    start = f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}X-Filler: ".encode()
    return start + b"a" * (header_bytes - len(start) - 4) + b"\r\n\r\n"


def delivery(body: bytes, n: int) -> bytes:
    headers = {"X-GitHub-Event": "push", "X-GitHub-Delivery": f"d-{n}", "Content-Type": "application/json"}
    headers |= github(body, SECRET)
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"POST /hooks/gh HTTP/1.1\r\nHost: localhost\r\n{lines}Content-Length: {len(body)}\r\n\r\n".encode() + body


@pytest.fixture
def receiver(store, db_path):
    """The default deadlines, which no loaded machine reaches: what is tested here is size."""
    with serving(db_path) as running:
        yield running


@pytest.fixture
def impatient(store, db_path):
    """Half-second deadlines, for the tests that wait for one to pass."""
    with serving(db_path, Limits(head_timeout=0.5, body_timeout=0.5)) as running:
        yield running


# ---------------------------------------------------------------- head size


async def test_a_request_head_over_64_kib_is_answered_431_and_the_connection_closed(receiver):
    with connect(receiver) as conn:
        conn.sendall(head_of("/healthz", 70 * KIB))
        answer = read_answer(conn)  # returns only once the server has closed
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"connection: close" in answer.lower()


async def test_a_head_that_never_ends_is_refused_431_once_past_64_kib_without_reading_the_rest(receiver):
    # 64 MiB of one header line that never ends (the report's was 300 MB): the
    # answer comes while the client is still sending, long before the end.
    total, sent, answer = 64 * 1024 * KIB, 0, b""
    piece = b"a" * (256 * KIB)
    with connect(receiver) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Filler: ")
        conn.setblocking(False)
        deadline = time.monotonic() + WAIT
        while b"\r\n\r\n" not in answer and time.monotonic() < deadline:
            readable, writable, _ = select.select([conn], [conn] if sent < total else [], [], 0.5)
            if readable:
                try:
                    chunk = conn.recv(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                answer += chunk
            if writable:
                try:
                    sent += conn.send(piece)
                except (BrokenPipeError, ConnectionResetError, BlockingIOError):
                    pass
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert sent < total


async def test_a_head_just_under_64_kib_is_served(receiver):
    with connect(receiver) as conn:
        conn.sendall(head_of("/healthz", 63 * KIB))
        status, _ = read_one(conn)
    assert status == 200


async def test_each_head_on_a_kept_alive_connection_is_measured_on_its_own(store, receiver, db_path):
    await add_source(store, "gh", "github", SECRET)
    with connect(receiver) as conn:
        for n in (1, 2):  # two deliveries and two 40 KiB heads: 160 KiB on one connection, all served
            conn.sendall(delivery(json.dumps({"n": n}).encode(), n))
            assert read_one(conn)[0] == 202
            conn.sendall(head_of("/healthz", 40 * KIB))
            assert read_one(conn)[0] == 200
        conn.sendall(head_of("/healthz", 65 * KIB))  # the next one alone is too large
        answer = read_answer(conn)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert counts(db_path) == (2, 2)


# ---------------------------------------------------------------- deadlines


async def test_a_head_that_stops_arriving_is_answered_408_and_the_connection_closed(impatient):
    with connect(impatient) as conn:
        conn.sendall(b"POST /hooks/gh HTTP/1.1\r\nHost: localhost\r\nContent-Type: appl")
        answer = read_answer(conn)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"head" in answer


async def test_a_head_dribbled_a_byte_at_a_time_is_answered_408_at_its_deadline(impatient):
    # Each byte comes well within any idle timeout; the head as a whole never does.
    endless = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n" + b"X-Slow: " + b"z" * 10_000
    answer = b""
    with connect(impatient) as conn:
        conn.settimeout(0.05)
        deadline = time.monotonic() + WAIT
        for byte in endless:
            if time.monotonic() > deadline:
                break
            try:
                conn.send(bytes([byte]))
                answer += conn.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            if b"\r\n\r\n" in answer:
                break
    assert answer.startswith(b"HTTP/1.1 408 "), answer


async def test_a_connection_that_sends_nothing_is_closed_at_the_head_deadline(impatient):
    with connect(impatient) as conn:
        assert read_answer(conn) == b""
        assert conn.recv(1) == b""  # closed, not merely slow


async def test_empty_lines_between_kept_alive_requests_do_not_hold_the_connection_past_the_head_deadline(impatient):
    # httptools skips a CRLF before a request without starting one; each used
    # to cancel the keep-alive timer with no head deadline running instead.
    answer = b""
    with connect(impatient) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert read_one(conn)[0] == 200
        conn.settimeout(0.1)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                conn.sendall(b"\r\n")
                chunk = conn.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 "), answer


async def test_a_body_shorter_than_its_content_length_is_answered_408_and_nothing_is_stored(store, impatient, db_path):
    await add_source(store, "gh", "github", SECRET)
    body = json.dumps({"action": "opened"}).encode()
    whole = delivery(body, 1).replace(f"Content-Length: {len(body)}".encode(), f"Content-Length: {len(body) + 100}".encode())
    with connect(impatient) as conn:
        conn.sendall(whole)  # 100 bytes short: the rest never comes
        answer = read_answer(conn)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"body" in answer
    assert counts(db_path) == (0, 0)


async def test_a_chunked_body_that_stops_arriving_is_answered_408_and_nothing_is_stored(store, impatient, db_path):
    await add_source(store, "gh", "github", SECRET)
    head = b"POST /hooks/gh HTTP/1.1\r\nHost: localhost\r\nX-GitHub-Event: push\r\nTransfer-Encoding: chunked\r\n\r\n"
    with connect(impatient) as conn:
        conn.sendall(head + b"5\r\n{\"a\":\r\n")  # no last chunk
        answer = read_answer(conn)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert counts(db_path) == (0, 0)


# ---------------------------------------------------------------- connections


async def test_a_request_beyond_max_connections_is_answered_503_and_served_once_one_closes(store, db_path):
    with serving(db_path, Limits(max_connections=2)) as receiver:
        held = [connect(receiver), connect(receiver)]
        try:
            held[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert read_one(held[0])[0] == 200  # both held connections are open and served
            with connect(receiver) as third:
                third.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                answer = read_answer(third)
            assert answer.startswith(b"HTTP/1.1 503 "), answer
        finally:
            for conn in held:
                conn.close()
        deadline = time.monotonic() + WAIT
        while receiver.request("GET", "/healthz").status == 503 and time.monotonic() < deadline:
            time.sleep(0.05)  # the server sees the closes a moment later
        assert receiver.request("GET", "/healthz").status == 200


async def test_a_connection_beyond_max_connections_is_answered_503_before_its_head_is_read(store, db_path):
    # Refused at once, not after the head it may buffer (up to 64 KiB) has come:
    # the limit bounds what connections hold, not only the requests served.
    with serving(db_path, Limits(max_connections=2)) as receiver:
        held = [connect(receiver), connect(receiver)]
        try:
            with connect(receiver) as third:
                answer = read_answer(third)  # sends nothing
        finally:
            for conn in held:
                conn.close()
    assert answer.startswith(b"HTTP/1.1 503 "), answer
    assert f"\r\nretry-after: {RETRY_AFTER_SECONDS}\r\n".encode() in answer, answer  # as every 503 says


# ---------------------------------------------------------------- `serve` as a process


def add_github_source(db_path) -> None:
    done = invoke(db_path, "source", "add", "gh", "--kind", "github", "--secret", SECRET)
    assert done.code == 0, done.err


def test_serve_answers_408_to_a_body_that_stops_arriving_after_its_body_timeout(db_path):
    add_github_source(db_path)
    body = json.dumps({"action": "opened"}).encode()
    with serve_process(db_path, "--body-timeout", "0.5") as serve:
        receiver = serve.wait_serving()
        with connect(receiver) as conn:
            conn.sendall(delivery(body, 1)[:-5])  # the last 5 bytes never come
            answer = read_answer(conn)
        assert serve.stop() == 0
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert counts(db_path) == (0, 0)
    assert "Traceback" not in serve.stderr


def test_a_client_that_goes_away_mid_body_leaves_no_traceback_and_stores_nothing(db_path):
    add_github_source(db_path)
    body = json.dumps({"action": "opened"}).encode()
    with serve_process(db_path) as serve:
        receiver = serve.wait_serving()
        with connect(receiver) as conn:
            conn.sendall(delivery(body, 1)[:-5])  # then the connection closes
        deadline = time.monotonic() + WAIT
        while "outcome=body-incomplete" not in serve.stderr and time.monotonic() < deadline:
            time.sleep(0.05)
        assert serve.stop() == 0
    assert "Traceback" not in serve.stderr
    assert "source=gh outcome=body-incomplete" in serve.stderr
    assert counts(db_path) == (0, 0)


def test_a_stop_signal_gives_a_body_still_arriving_a_short_grace_then_answers_503_and_exits_0(db_path):
    # The body timeout (an hour here) is not waited out, nor is the request
    # cancelled past uvicorn's graceful 30 s (a traceback and a 500).
    add_github_source(db_path)
    body = json.dumps({"action": "opened"}).encode()
    with serve_process(db_path, "--body-timeout", "3600") as serve:
        receiver = serve.wait_serving()
        with connect(receiver) as conn:
            conn.sendall(delivery(body, 1)[:-5])  # the last 5 bytes never come
            time.sleep(0.3)  # the head has reached the server
            assert serve.stop(timeout=20) == 0
            answer = read_answer(conn)
    assert answer.startswith(b"HTTP/1.1 503 "), answer
    assert counts(db_path) == (0, 0)
    assert "Traceback" not in serve.stderr
    assert "ERROR" not in serve.stderr
