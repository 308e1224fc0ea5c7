"""Fuzzed HTTP against a real `serve` process (one per module, on a free loopback port).

Random methods, paths (percent-encoded controls, long ones), headers (odd
names, odd bytes, huge values), bodies (JSON, garbage, other encodings, over
the cap) and content types, to a github source (signed or not) and to
sources and paths that do not exist. After each request: an answer below 500
(a healthy database leaves no cause for 503), the process alive, no traceback
and no raw control character on its stderr. After each test: the database
passes PRAGMA integrity_check and holds exactly the events answered 202.

The budget is support.fuzz.FUZZ_EXAMPLES (25 in CI; more with
SWITCHBOARD_FUZZ_EXAMPLES=2000).
"""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.cli import invoke
from support.fuzz import fuzz_settings
from support.receiver import Receiver, ServeProcess, serve_process
from support.signing import github, secret_for

pytestmark = pytest.mark.fuzz

SECRET = secret_for("github")
WAIT = 10  # seconds for any one exchange: reached only if the server fails to answer
MAX_BODY = 64 * 1024  # the source's cap, so that bodies over it stay cheap to send
FRAMING = {b"content-length", b"transfer-encoding", b"connection"}  # set by the test, never fuzzed


@dataclass
class Served:
    db: Path
    serve: ServeProcess
    receiver: Receiver
    accepted: set[int] = field(default_factory=set)  # event ids answered 202


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    db = tmp_path_factory.mktemp("fuzz-http") / "switchboard.db"
    for args in (
        ["source", "add", "gh", "--kind", "github", "--secret", SECRET, "--max-body", str(MAX_BODY)],
        ["rule", "add", "--source", "gh", "--where", "action=opened", "--queue", "review", "--title", "{pull_request.title}"],
    ):
        done = invoke(db, *args)
        assert done.code == 0, done.err
    # Short deadlines: a request whose framing a fuzzed header broke costs 2 s, not 30.
    with serve_process(db, "--head-timeout", "2", "--body-timeout", "2") as serve:
        yield Served(db, serve, serve.wait_serving())
        assert serve.stop() == 0, serve.stderr


# ---------------------------------------------------------------- strategies

TOKEN = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
KNOWN_HEADERS = ["X-GitHub-Event", "X-GitHub-Delivery", "X-Hub-Signature-256", "Authorization", "Content-Type",
                 "Expect", "User-Agent", "Accept-Encoding", "Cookie", "Host"]  # fmt: skip
CONTENT_TYPES = [
    "application/json", "application/json; charset=utf-16", "application/x-www-form-urlencoded",
    "text/plain; charset=latin-1", "multipart/form-data; boundary=x", "", "\x00/\xff", "a" * 300,
]  # fmt: skip

not_surrogate = st.characters(blacklist_categories=("Cs",))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(not_surrogate),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(not_surrogate, max_size=8), inner, max_size=4),
    max_leaves=12,
)
bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"action": st.sampled_from(["opened", "closed"]),
                           "pull_request": st.fixed_dictionaries({"title": st.text(not_surrogate)})}).map(
        lambda v: json.dumps(v, ensure_ascii=False).encode()),
    st.binary(max_size=2000),
    st.text(not_surrogate, max_size=200).map(lambda t: t.encode("utf-16")),
    st.dictionaries(st.text(not_surrogate, max_size=10), st.text(not_surrogate, max_size=50), max_size=4).map(
        lambda d: urlencode(d).encode()),
    st.integers(MAX_BODY - 2, MAX_BODY + 2).map(lambda n: b"{" + b" " * (n - 2) + b"}"),  # at and over the cap
)  # fmt: skip
header_names = st.one_of(  # weighted to well-formed names: a single odd one gets the whole request a 400
    st.sampled_from(KNOWN_HEADERS),
    st.sampled_from(KNOWN_HEADERS),
    st.text(TOKEN, min_size=1, max_size=30),
    st.text(TOKEN, min_size=1, max_size=30),
    st.binary(min_size=1, max_size=20).map(lambda b: b.decode("latin-1")),  # odd bytes: most are refused 400
).filter(lambda n: "\r" not in n and "\n" not in n and n.strip().lower().encode("latin-1") not in FRAMING)
header_values = st.one_of(
    st.text(string.printable.strip("\r\n\x0b\x0c"), max_size=100),
    st.binary(max_size=100).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"").decode("latin-1")),
    st.text(not_surrogate, max_size=50).map(lambda t: t.encode().decode("latin-1").replace("\r", "").replace("\n", "")),
    st.integers(30_000, 100_000).map(lambda n: "v" * n),  # alone or together, over the 64 KiB head limit
)
headers = st.lists(st.tuples(header_names, header_values), max_size=6)
names = st.text(not_surrogate, min_size=1, max_size=40) | st.integers(1, 80_000).map(lambda n: "n" * n)
methods = st.sampled_from(["POST", "GET", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]) | st.text(
    string.ascii_uppercase, min_size=1, max_size=10
)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes

    def raw(self) -> bytes:
        head = f"{self.method} {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in self.headers)
        head += f"Content-Length: {len(self.body)}\r\nConnection: close\r\n\r\n"
        return head.encode("latin-1") + self.body


@st.composite
def to_github_source(draw: st.DrawFn) -> Request:
    body = draw(bodies)
    extra = draw(st.lists(st.tuples(header_names, header_values), max_size=3))
    if draw(st.booleans()):  # signed, as GitHub would: these are stored unless something else is off
        extra += [("X-GitHub-Event", draw(header_values.filter(lambda v: len(v) < 200))),
                  ("X-GitHub-Delivery", draw(st.text(TOKEN, min_size=1, max_size=40)))]  # fmt: skip
        extra += list(github(body, SECRET).items())
        extra += [("Content-Type", draw(st.sampled_from(CONTENT_TYPES)))]
    method = "POST" if draw(st.integers(0, 9)) else draw(methods)
    path = "/hooks/gh" + draw(st.sampled_from(["", "", "", "?x=1", "/", "%2F..", "#frag"]))
    return Request(method, path, draw(st.permutations(extra)), body)


@st.composite
def to_anywhere(draw: st.DrawFn) -> Request:
    path = draw(
        st.one_of(
            names.map(lambda n: "/hooks/" + quote(n, safe="")),  # percent-encoded controls, spaces, bidi, long
            st.text(string.ascii_letters + "/%.?#&=;", max_size=60).map(lambda p: "/" + p),
            st.sampled_from(["/healthz", "/hooks/", "/hooks", "*", "//", "/hooks/gh/x"]),
        )
    )
    return Request(draw(methods), path, draw(headers), draw(bodies))


# ---------------------------------------------------------------- exchange and invariants


def exchange(receiver: Receiver, request: bytes, *, half_close: bool = False) -> bytes:
    """Send, then read until the server closes (every request says Connection: close)."""
    answer = b""
    with socket.create_connection((receiver.host, receiver.port), timeout=WAIT) as conn:
        try:
            conn.sendall(request)
            if half_close:
                conn.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the whole request was read (431, 413): the answer may still be there
        try:
            while chunk := conn.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    return answer


def status_of(answer: bytes) -> int | None:
    found = re.match(rb"HTTP/1\.[01] (\d{3}) ", answer)
    return int(found.group(1)) if found else None


def check_process(served: Served, note: object) -> None:
    assert served.serve.proc.poll() is None, f"serve died after {note!r}\n{served.serve.stderr}"
    stderr = served.serve.stderr
    assert "Traceback" not in stderr, f"after {note!r}:\n{stderr}"
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", stderr), stderr


def check_answer(served: Served, request: Request, answer: bytes) -> None:
    status = status_of(answer)
    assert status is None or status < 500, f"{status} for {request!r}: {answer[:300]!r}"
    if status is not None:  # one answer, whole, and nothing after it
        head, _, body = answer.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length: *(\d+)\r?$", head)
        assert length is not None, answer[:300]
        whole = {0, int(length.group(1))} if request.method == "HEAD" else {int(length.group(1))}  # HEAD: no body
        assert len(body) in whole, answer[:300]
    if status == 202:
        served.accepted.add(json.loads(answer.split(b"\r\n\r\n", 1)[1])["event_id"])
    check_process(served, request)


def check_database(served: Served) -> None:
    conn = sqlite3.connect(served.db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        stored = {row[0] for row in conn.execute("SELECT id FROM events WHERE family <> 'operator'")}
    finally:
        conn.close()
    assert stored == served.accepted  # nothing refused was kept, nothing answered 202 was lost
    assert served.receiver.request("GET", "/healthz").status == 200


# ---------------------------------------------------------------- the fuzz


def test_fuzzed_deliveries_to_a_github_source_store_exactly_those_answered_202(served: Served) -> None:
    @fuzz_settings
    @given(request=to_github_source())
    def deliver(request: Request) -> None:
        check_answer(served, request, exchange(served.receiver, request.raw()))

    deliver()
    check_database(served)


def test_fuzzed_requests_to_unknown_sources_and_paths_answer_below_500_and_store_nothing(served: Served) -> None:
    @fuzz_settings
    @given(request=to_anywhere())
    def send(request: Request) -> None:
        check_answer(served, request, exchange(served.receiver, request.raw()))

    deliver_count = len(served.accepted)
    send()
    assert len(served.accepted) == deliver_count
    check_database(served)


def test_fuzzed_raw_bytes_never_reach_a_5xx_a_traceback_or_the_database(served: Served) -> None:
    prefixes = st.sampled_from([b"", b"POST /hooks/gh HTTP/1.1\r\n", b"GET /healthz HTTP/1.1\r\nHost: x\r\n"])

    @fuzz_settings
    @given(prefix=prefixes, noise=st.binary(max_size=500))
    def send(prefix: bytes, noise: bytes) -> None:
        answer = exchange(served.receiver, prefix + noise, half_close=True)
        status = status_of(answer)
        assert status is None or status < 500, (prefix + noise, answer[:300])
        check_process(served, prefix + noise)

    deliver_count = len(served.accepted)
    send()
    assert len(served.accepted) == deliver_count
    check_database(served)
