"""The dashboard's guard: what a page on a local port must refuse (issue 14 §4).

A local page is reachable by every website the user visits, so before any
dashboard route runs, this ASGI middleware:

- refuses a ``Host`` that is not the bound address, ``localhost``,
  ``127.0.0.1`` or ``[::1]`` (with the bound port): a DNS-rebound name
  resolves to 127.0.0.1 but keeps its own Host (403);
- asks for the per-install token (a cookie set from ``/?token=…``, or
  ``Authorization: Bearer``) on every request, reads included: on loopback
  every local account can connect, and the pages show the owner-only
  database's payloads (401, and the connection is closed);
- holds an action (any method but GET and HEAD) to the CSRF token
  (``X-CSRF-Token``, from ``GET /api/session``) and to the same origin:
  ``Sec-Fetch-Site`` and ``Origin``, where the browser sends them (403);
- puts a strict Content-Security-Policy (self only, no inline script) and
  ``nosniff`` on every dashboard answer, so JSON is never rendered as HTML.

The webhook receiver's paths (``exempt``) pass untouched: providers reach
them through tunnels under their own Host names, and each delivery is
verified by its signature, not by this guard.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..core import access_token

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
SAFE_METHODS = ("GET", "HEAD")
CSRF_HEADER = "x-csrf-token"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
WILDCARDS = ("0.0.0.0", "::", "")


def cookie_values(headers: Headers, name: str) -> list[str]:
    """The values of every cookie called ``name`` in the request's Cookie headers, whatever else they hold.

    A browser sends a host's cookies to each of its ports, so any page on
    another local port can set one beside ours; a parser that gives up at the
    first pair it dislikes (``SimpleCookie`` at ``theme=dark mode``) would
    let it hide ours. So: pairs split on ``;``, each on its first ``=``,
    anything else skipped.
    """
    found = []
    for header in headers.getlist("cookie"):
        for pair in header.split(";"):
            key, sep, value = pair.partition("=")
            if sep and key.strip() == name:
                found.append(value.strip())
    return found


@dataclass(frozen=True)
class Policy:
    """Who may use the dashboard on ``host``:``port`` (the address the server is bound to)."""

    host: str
    port: int
    token: str
    exempt: tuple[str, ...] = ()
    hosts: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        bound = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        names = {*LOOPBACK_NAMES, bound}
        hosts = {f"{name}:{self.port}" for name in names}
        if self.port == 80:
            hosts |= names
        object.__setattr__(self, "hosts", frozenset(hosts))

    @property
    def any_host(self) -> bool:
        """Bound to every interface: the name the machine is reached by is not known
        here, so any Host passes, and the token (asked of every request) guards."""
        return self.host in WILDCARDS

    @property
    def cookie_name(self) -> str:
        # Per port: a browser sends a host's cookies to every port of it.
        return f"switchboard_token_{self.port}"

    @property
    def csrf_token(self) -> str:
        return access_token.derived(self.token, "csrf")

    def exempted(self, path: str) -> bool:
        """A path the guard leaves alone: one of ``exempt``, or under one that ends with a slash."""
        return any(path == p or (p.endswith("/") and path.startswith(p)) for p in self.exempt)

    def host_allowed(self, host: str | None) -> bool:
        if host is None:
            return False
        return self.any_host or host.lower() in self.hosts

    def authenticated(self, headers: Headers) -> bool:
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer " and access_token.matches(self.token, auth[7:].strip()):
            return True
        return any(access_token.matches(self.token, value) for value in cookie_values(headers, self.cookie_name))

    def same_origin(self, headers: Headers) -> str | None:
        """Why an action's request is not from the dashboard's own page (None: it is)."""
        site = headers.get("sec-fetch-site")
        if site is not None and site != "same-origin":
            return f"a cross-site request (Sec-Fetch-Site: {site})"
        origin = headers.get("origin")
        if origin is not None and origin.lower() != f"http://{headers.get('host', '').lower()}":
            return "a request from another origin"
        return None


class Guard:
    """The ASGI middleware enforcing ``policy`` on every path but the exempt ones."""

    def __init__(self, app: ASGIApp, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or self.policy.exempted(path):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            status, message, extra = refusal
            # Connection: close: a refused request holds nothing of the server's, not even a kept-alive connection.
            await _send_json(send, status, {"error": {"code": _CODES[status], "message": message}},
                             {**extra, "connection": "close"})  # fmt: skip
            return
        token_login = self._token_login(scope)
        if token_login is not None:
            await token_login(send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                response_headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    response_headers[name] = value
                response_headers.setdefault("cache-control", "no-store")
            await send(message)

        await self.app(scope, receive, secured)

    def _refusal(self, scope: Scope, headers: Headers) -> tuple[int, str, dict[str, str]] | None:
        policy = self.policy
        if not policy.host_allowed(headers.get("host")):
            return 403, "this Host is not the dashboard's address (use the URL `switchboard-local dashboard` prints)", {}
        action = scope["method"] not in SAFE_METHODS
        if not policy.authenticated(headers):
            if not action and _query_token(scope) is not None:
                return None  # checked by _token_login
            return 401, NO_TOKEN, {"www-authenticate": "Bearer"}
        if action:
            why_not = policy.same_origin(headers)
            if why_not is not None:
                return 403, f"{why_not} cannot act on the dashboard", {}
            if not access_token.matches(policy.csrf_token, headers.get(CSRF_HEADER)):
                return 403, "an action needs the CSRF token (X-CSRF-Token, from GET /api/session)", {}
        return None

    def _token_login(self, scope: Scope):  # type: ignore[no-untyped-def]
        """``GET /any?token=T``: T right sets the cookie and sends the browser on without it
        (the token leaves the address bar and the history); T wrong is refused."""
        given = _query_token(scope)
        if given is None or scope["method"] not in SAFE_METHODS:
            return None
        policy = self.policy
        rest = [(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
                if k != "token"]  # fmt: skip
        location = scope.get("path", "/") + (f"?{urlencode(rest)}" if rest else "")

        async def answer(send: Send) -> None:
            if not access_token.matches(policy.token, given):
                await _send_json(send, 401, {"error": {"code": "unauthorized", "message": "the dashboard token is wrong"}})
                return
            cookie = f"{policy.cookie_name}={policy.token}; Path=/; HttpOnly; SameSite=Strict"
            await _send_json(send, 303, {"location": location}, {"location": location, "set-cookie": cookie})

        return answer


_CODES = {401: "unauthorized", 403: "forbidden"}
NO_TOKEN = (
    "the dashboard needs its token: open the URL `switchboard-local dashboard` prints "
    "(a script sends Authorization: Bearer TOKEN, the token file beside the database)"
)


def _query_token(scope: Scope) -> str | None:
    query = scope.get("query_string", b"")
    if b"token=" not in query:
        return None
    for key, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if key == "token":
            return value
    return None


async def _send_json(send: Send, status: int, body: object, extra: dict[str, str] | None = None) -> None:
    raw = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(raw)).encode()),
        (b"cache-control", b"no-store"),
        *((name.encode(), value.encode()) for name, value in SECURITY_HEADERS.items()),
        *((name.encode(), value.encode("latin-1")) for name, value in (extra or {}).items()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})
