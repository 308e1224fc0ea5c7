"""The webhook receiver, a Starlette app (limits.py serves it on uvicorn; the process module runs it).

    POST /hooks/{name}   verify on the raw bytes, store the event and its todos,
                         and only then answer (202); 401 bad signature, 404
                         unknown or disabled source, 413 too large, 503 store
                         failure, a store busy past STORE_WAIT_SECONDS, or no
                         readable secret (the provider retries)
    GET  /healthz        200 when a delivery could be stored, else 503 and why

Every 503, of every route, carries Retry-After; a fault of the store that a
route does not answer itself is a 503, never a 500. Before the app sees a
request, its connection is held to the server's limits (limits.py: head size,
head and body deadlines, connections open at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..core import routing, sources, webhook_config
from ..core.errors import (
    Conflict,
    Forbidden,
    InvalidArgument,
    NotFound,
    StoreFault,
    SwitchboardError,
)
from ..core.events import NewEvent
from ..core.store.interface import Store
from ..core.text import digits
from . import verifiers as webhooks

log = logging.getLogger("switchboard_local.serve")

# How long a delivery waits for the store (its source's lookup and its commit, together) before
# it is answered 503: well inside a sender's own timeout (GitHub's is 10 s), whatever holds the
# store up (another process's write lock, a database server that does not answer).
STORE_WAIT_SECONDS = 4.0
RETRY_AFTER_SECONDS = 5  # sent with every 503: the store, or the server, may take this long to recover


# The receiver's own paths: whatever another edge adds beside them (the
# dashboard's routes and its guard) leaves these as they are.
RECEIVER_PATHS = ("/hooks/", "/healthz")


def create_app(
    store: Store, *, routes: Sequence[BaseRoute] = (), middleware: Sequence[Middleware] = ()
) -> Starlette:
    """The receiver's routes, on a store the process opened (and will close).

    ``routes`` are served beside the receiver's (after them: a receiver path
    is always the receiver's) and ``middleware`` wraps the whole app; the
    process module composes them from another edge (the dashboard).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for source in await sources_without_secret(store):
            # Said now, not at the first delivery's 503 (which may be days away).
            refs = ", ".join(sources.mask_secret(ref) for ref in source.secrets) or "none configured"
            log.warning("source %s: no secret can be read (%s); its deliveries will be answered 503",
                        shown(source.name), refs)  # fmt: skip
        yield

    # Concurrent deliveries are stored in batches (one transaction, executemany).
    intake = routing.Intake(store)

    async def hook(request: Request) -> Response:
        return await receive(store, request, intake)

    async def healthz(request: Request) -> Response:
        return await health(store)

    return Starlette(
        routes=[Route("/hooks/{name}", hook, methods=["POST"]), Route("/healthz", healthz, methods=["GET"]), *routes],
        # Outermost: every 503 of every route (the dashboard's and its guard's too) says when to retry.
        middleware=[Middleware(RetryAfter), *middleware],
        exception_handlers={SwitchboardError: _core_error},
        lifespan=lifespan,
    )


async def _core_error(request: Request, exc: Exception) -> Response:
    """A core error that a route left unanswered, by ``STATUS``: a fault of the store is a 503
    (never a 500 and a traceback), its words kept for the log."""
    status = status_of(exc)
    if status != 503:
        return _problem(status, str(exc))
    log.error("request path=%s outcome=store-failed error=%s", shown(request.url.path), shown(str(exc)))
    return _problem(status, "the store cannot be used right now; retry later")


class RetryAfter:
    """ASGI middleware: a 503 without a Retry-After header gets one (RETRY_AFTER_SECONDS)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 503:
                headers = MutableHeaders(scope=message)
                headers.setdefault("retry-after", str(RETRY_AFTER_SECONDS))
            await send(message)

        await self.app(scope, receive, sending)


async def health(store: Store) -> JSONResponse:
    """200 when a delivery could be stored now; else 503, each failed check saying why.

    {"ok", "checks": {"database": "ok" | why, "secrets": "ok" | why},
     "sources_without_secret": [names], "error": the failed checks (only when not ok)}
    """
    checks: dict[str, str] = {}
    try:
        await store.probe_writable()
        checks["database"] = "ok"
    except StoreFault as exc:
        checks["database"] = str(exc)
    missing: list[str] = []
    try:
        missing = [source.name for source in await sources_without_secret(store)]
        checks["secrets"] = f"no secret can be read for {', '.join(missing)}" if missing else "ok"
    except StoreFault as exc:
        checks["secrets"] = f"not checked: {exc}"
    failed = [f"{check}: {why}" for check, why in checks.items() if why != "ok"]
    body: dict[str, Any] = {"ok": not failed, "checks": checks, "sources_without_secret": missing}
    if failed:
        body["error"] = "; ".join(failed)
    return JSONResponse(body, status_code=503 if failed else 200)


async def sources_without_secret(store: Store) -> list[sources.Source]:
    """Enabled webhook sources none of whose secrets can be read: each delivery to them gets 503."""
    found = await sources.list_sources(store, family="webhook")
    return [source for source in found if source.enabled and not _secret_readable(source)]


def _secret_readable(source: sources.Source) -> bool:
    try:
        webhooks.resolve_secrets(source)
    except webhooks.SecretUnavailable:
        return False
    return True


# A value from a request goes into a log line bare only when it is a plain word;
# otherwise JSON-quoted (escapes for controls, quotes for spaces and "=") and cut.
_PLAIN = re.compile(r"[A-Za-z0-9._:/@+-]{1,200}")
_SHOWN_MAX = 200


def shown(value: str) -> str:
    if _PLAIN.fullmatch(value):
        return value
    cut = value[:_SHOWN_MAX]
    return json.dumps(cut) + ("..." if len(value) > _SHOWN_MAX else "")


# The one table from the core's errors to HTTP statuses: a fault of the store
# is the server's (503: the sender retries), the others are the request's.
STATUS: tuple[tuple[type[SwitchboardError], int], ...] = (
    (NotFound, 404),
    (Forbidden, 403),
    (Conflict, 409),
    (InvalidArgument, 400),
    (StoreFault, 503),
)


def status_of(exc: Exception) -> int:
    """The status answering ``exc``; 500 for anything the core did not raise on purpose."""
    return next((status for kind, status in STATUS if isinstance(exc, kind)), 500)


def _problem(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def receive(store: Store, request: Request, intake: routing.Intake) -> Response:
    name = request.path_params["name"]
    who = shown(name)
    # One budget for the store's two calls (the body's arrival has its own deadline: limits.py).
    started = time.monotonic()
    try:
        async with asyncio.timeout(STORE_WAIT_SECONDS):
            source = await sources.for_delivery(store, name, family="webhook")
    except NotFound:
        source = None
    except (StoreFault, TimeoutError) as exc:
        why = f"no answer within {STORE_WAIT_SECONDS:g} s" if isinstance(exc, TimeoutError) else str(exc)
        log.error("delivery source=%s outcome=store-failed error=%s", who, shown(why))
        return _problem(503, "the store cannot be read; retry later")
    waited = time.monotonic() - started
    if source is None or not source.enabled:
        log.info("delivery source=%s outcome=unknown-source", who)
        return _problem(404, f"no enabled webhook source named {name!r}")

    cap = source.config.get("max_body", webhook_config.DEFAULT_MAX_BODY)
    declared = request.headers.get("content-length")
    if declared is not None and (digits(declared) or 0) > cap:
        log.info("delivery source=%s outcome=too-large bytes=%s", who, shown(declared))
        store.tally.delivery(name, "too_large")
        return _problem(413, f"body larger than {cap} bytes")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > cap:  # stop reading: never buffer past the cap
                log.info("delivery source=%s outcome=too-large", who)
                store.tally.delivery(name, "too_large")
                return _problem(413, f"body larger than {cap} bytes")
    except ClientDisconnect:  # the client went away, or its body stopped arriving (answered 408)
        log.info("delivery source=%s outcome=body-incomplete bytes=%d", who, len(body))
        return _problem(400, "the body did not arrive")  # nobody reads it: the connection is gone
    raw = bytes(body)

    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        secrets = webhooks.resolve_secrets(source)
        verified = webhooks.verify(source, headers, raw, store.clock.now_ms() / 1000, secrets)
    except webhooks.SecretUnavailable as exc:
        log.error("delivery source=%s outcome=no-secret detail=%s", who, shown(str(exc)))
        return _problem(503, "the source's secret is not available on this server")
    except webhooks.Unverified as exc:
        # Nothing is stored for an unverified delivery, not even its key.
        log.warning("delivery source=%s outcome=rejected reason=%s", who, shown(str(exc)))
        store.tally.delivery(name, "unverified")
        return _problem(401, f"signature verification failed: {exc}")

    kind = shown(verified.type)
    if verified.challenge is not None:
        log.info("delivery source=%s type=%s outcome=challenge-answered", who, kind)
        return PlainTextResponse(verified.challenge)

    event = NewEvent(
        source=name,
        family="webhook",
        type=verified.type,
        external_id=verified.external_id,
        trust_mode=source.kind,
        verified=webhook_config.needs_secret(source.kind),
        verify_detail=verified.detail,
        content_type=headers.get("content-type"),
        headers=webhooks.redact(headers, source),
        body=raw,
        replay_window=webhook_config.replay_window(source),
    )
    try:
        # The delivery stays in its batch past the deadline (Intake shields it): a store that frees
        # up may still commit it, and the sender's retry is then answered as a duplicate.
        result = await asyncio.wait_for(intake.accept(source, event), max(0.0, STORE_WAIT_SECONDS - waited))
    except StoreFault as exc:
        result = exc
    except TimeoutError:
        log.error("delivery source=%s type=%s outcome=store-busy error=not committed within %g s", who, kind,
                  STORE_WAIT_SECONDS)  # fmt: skip
        store.tally.delivery(name, "failed")
        return _problem(503, f"the store is busy: the event was not committed within {STORE_WAIT_SECONDS:g} s; "
                        "retry later")  # fmt: skip
    if isinstance(result, Exception):  # nothing was stored: the provider should retry
        log.error("delivery source=%s type=%s outcome=store-failed error=%s: %s", who, kind,
                  type(result).__name__, shown(str(result)))  # fmt: skip
        store.tally.delivery(name, "failed")
        return _problem(503, "the event could not be stored; retry later")
    if result.unroutable is not None:
        log.error("delivery source=%s type=%s event=%d kept without todos: %s", who, kind,
                  result.event_id, shown(result.unroutable))  # fmt: skip
    log.info(
        "delivery source=%s type=%s event=%d outcome=%s todos=%s",
        who,
        kind,
        result.event_id,
        "duplicate" if result.duplicate else "stored",
        list(result.todo_ids),
    )
    store.tally.delivery(name, "duplicate" if result.duplicate else "stored")
    return JSONResponse(
        {"event_id": result.event_id, "duplicate": result.duplicate, "todos": list(result.todo_ids)},
        status_code=202,
    )
