"""The real dashboard for its tests: what `serve` runs (receiver and dashboard on one
loopback port, process.Service in a thread), and a client speaking real HTTP to it.

    with serving_dashboard(db_path) as board:
        board.get_json("/api/queues")                 # with the token (token=None: without)
        board.act("/api/todos/3/redrive")            # token, CSRF token and Origin as the page sends them
        with board.stream("queues,todos") as events:  # server-sent events
            events.next(timeout=10)
        board.login_url                               # what a browser opens: /?token=… (sets the cookie)
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from switchboard_local.core import access_token
from switchboard_local.http.limits import Limits

from .receiver import Answer, Receiver, serving


@dataclass
class SSE:
    """One server-sent event as it arrived."""

    event: str | None = None
    data: str = ""
    id: str | None = None
    retry: int | None = None

    def json(self) -> Any:
        return json.loads(self.data)


class EventStream:
    """An open ``GET /api/stream``: ``next()`` reads the next event (comments and pings skipped)."""

    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        self.conn = conn
        self.response = response
        self.status = response.status
        self.headers = {k.lower(): v for k, v in response.getheaders()}
        self.retry: int | None = None

    def next(self, timeout: float = 10.0, *, event: str | None = None) -> SSE:
        """The next event (of type ``event`` when given); raises TimeoutError after ``timeout`` seconds."""
        sock = self.conn.sock
        assert sock is not None
        sock.settimeout(timeout)
        current = SSE()
        lines: list[str] = []
        while True:
            try:
                raw = self.response.readline()
            except (TimeoutError, socket.timeout):
                raise TimeoutError(f"no server-sent event within {timeout} s") from None
            if not raw:
                raise EOFError("the stream ended")
            line = raw.decode("utf-8").rstrip("\r\n")
            if line == "":
                if current.retry is not None:
                    self.retry = current.retry
                if lines and (event is None or current.event == event):
                    current.data = "\n".join(lines)
                    return current
                current, lines = SSE(), []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                lines.append(value)
            elif name == "event":
                current.event = value
            elif name == "id":
                current.id = value
            elif name == "retry" and value.isdigit():
                current.retry = int(value)

    def close(self) -> None:
        self.conn.close()


@dataclass
class Board:
    """A client of the dashboard at 127.0.0.1:``port``; ``token`` is the install's."""

    receiver: Receiver
    token: str
    csrf_token: str = field(init=False)

    def __post_init__(self) -> None:
        self.csrf_token = access_token.derived(self.token, "csrf")

    @property
    def port(self) -> int:
        return self.receiver.port

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def login_url(self) -> str:
        """What `switchboard-local dashboard` prints: opening it sets the token's cookie."""
        return f"{self.origin}/?token={self.token}"

    def _with_token(self, token: str | None, headers: Mapping[str, str]) -> dict[str, str]:
        sent = {} if token is None else {"authorization": f"Bearer {token or self.token}"}
        return {**sent, **headers}

    def get(self, path: str, headers: Mapping[str, str] = {}, *, token: str | None = "") -> Answer:
        """GET as a script holding the token sends it; pass None to leave the token out, or a value to send that."""
        return self.receiver.request("GET", path, headers=self._with_token(token, headers))

    def get_json(self, path: str, headers: Mapping[str, str] = {}, *, token: str | None = "") -> Any:
        answer = self.get(path, headers, token=token)
        assert answer.status == 200, (path, answer.status, answer.body[:500])
        return answer.json()

    def act(
        self,
        path: str,
        body: Any = None,
        *,
        token: str | None = "",
        csrf: str | None = "",
        origin: str | None = "",
        headers: Mapping[str, str] = {},
    ) -> Answer:
        """POST an action as the dashboard's page sends it; pass None to leave out the
        token, the CSRF token or the Origin, or a value to send that instead."""
        sent: dict[str, str] = {"content-type": "application/json"}
        if token is not None:
            sent["authorization"] = f"Bearer {token or self.token}"
        if csrf is not None:
            sent["x-csrf-token"] = csrf or self.csrf_token
        if origin is not None:
            sent["origin"] = origin or self.origin
        sent.update(headers)
        raw = b"" if body is None else json.dumps(body).encode()
        return self.receiver.request("POST", path, raw, sent)

    @contextlib.contextmanager
    def stream(
        self, topics: str | None = None, headers: Mapping[str, str] = {}, *, token: str | None = ""
    ) -> Iterator[EventStream]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        path = "/api/stream" + (f"?topics={topics}" if topics else "")
        conn.request("GET", path, headers=self._with_token(token, {"accept": "text/event-stream", **headers}))
        opened = EventStream(conn, conn.getresponse())
        try:
            yield opened
        finally:
            opened.close()


@contextlib.contextmanager
def serving_dashboard(db_path: Path, limits: Limits = Limits(), *, host: str = "127.0.0.1") -> Iterator[Board]:
    """`serve`'s app on a free loopback port with its dashboard, and a client holding the install's token
    (``host``: bind that address instead; the client still connects over loopback)."""
    with serving(db_path, limits, host=host) as receiver:
        yield Board(receiver, access_token.read_or_create(db_path))
