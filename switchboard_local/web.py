"""`serve`: the webhook receiver on Starlette and uvicorn, and the Redis adapters.

    POST /hooks/{name}   verify on the raw bytes, store the event and its todos,
                         and only then answer (202); 401 bad signature, 404
                         unknown or disabled source, 413 too large, 503 store
                         failure (the provider retries; nothing was stored)
    GET  /healthz        200 when the database is writable, else 503

A stop signal stops accepting, lets requests in flight finish their
transaction, and exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from types import FrameType

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from . import adapters, retention, routing, webhooks
from .errors import NotFound, StoreFault
from .events import NewEvent, ingest
from .redis_adapters import Supervisor
from .store import Store

log = logging.getLogger("switchboard_local.serve")

PRUNE_EVERY_SECONDS = 3600


def create_app(
    db: Path | None,
    *,
    prune_older_than_days: float = retention.DEFAULT_OLDER_THAN_DAYS,
    prune_max_events: int = retention.DEFAULT_MAX_EVENTS,
    store_options: dict | None = None,
) -> Starlette:
    state: dict[str, Store] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        store = await Store.open(db, **(store_options or {}))
        state["store"] = store
        pruner = asyncio.create_task(_prune_forever(store, prune_older_than_days, prune_max_events))
        stop_adapters = asyncio.Event()
        supervisor = asyncio.create_task(Supervisor(store).run(stop_adapters))
        try:
            yield
        finally:
            # In-flight requests have finished; adapters finish their batch
            # (commit, then ack) and leave everything else un-acked.
            stop_adapters.set()
            await supervisor
            pruner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pruner
            await store.close()

    async def hook(request: Request) -> Response:
        return await receive(state["store"], request)

    async def healthz(request: Request) -> Response:
        try:
            await state["store"].probe_writable()
        except StoreFault as exc:
            return JSONResponse({"ok": False, "error": str(exc)}, status_code=503)
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[Route("/hooks/{name}", hook, methods=["POST"]), Route("/healthz", healthz, methods=["GET"])],
        lifespan=lifespan,
    )


def _problem(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def receive(store: Store, request: Request) -> Response:
    name = request.path_params["name"]
    try:
        source = await adapters.get(store, name, family="webhook")
    except NotFound:
        source = None
    except StoreFault as exc:
        log.error("delivery source=%s outcome=store-failed error=%r", name, str(exc))
        return _problem(503, "the store cannot be read; retry later")
    if source is None or not source.enabled:
        log.info("delivery source=%s outcome=unknown-source", name)
        return _problem(404, f"no enabled webhook source named {name!r}")

    cap = source.config.get("max_body", webhooks.DEFAULT_MAX_BODY)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        log.info("delivery source=%s outcome=too-large bytes=%s", name, declared)
        return _problem(413, f"body larger than {cap} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:  # stop reading: never buffer past the cap
            log.info("delivery source=%s outcome=too-large", name)
            return _problem(413, f"body larger than {cap} bytes")
    raw = bytes(body)

    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        secrets = webhooks.resolve_secrets(source)
        verified = webhooks.verify(source, headers, raw, store.clock.now_ms() / 1000, secrets)
    except webhooks.SecretUnavailable as exc:
        log.error("delivery source=%s outcome=no-secret detail=%s", name, exc)
        return _problem(503, "the source's secret is not available on this server")
    except webhooks.Unverified as exc:
        # Nothing is stored for an unverified delivery, not even its key.
        log.warning("delivery source=%s outcome=rejected reason=%r", name, str(exc))
        return _problem(401, f"signature verification failed: {exc}")

    if verified.challenge is not None:
        log.info("delivery source=%s type=url_verification outcome=challenge-answered", name)
        return PlainTextResponse(verified.challenge)

    event = NewEvent(
        source=name,
        family="webhook",
        type=verified.type,
        external_id=verified.external_id,
        trust_mode=source.kind,
        verified=webhooks.needs_secret(source.kind),
        verify_detail=verified.detail,
        content_type=headers.get("content-type"),
        headers=webhooks.redact(headers, source),
        body=raw,
    )
    try:
        try:
            result = await routing.deliver(store, event)
        except StoreFault:
            raise
        except Exception as exc:
            # Routing could not make todos of it: keep the verified delivery as a
            # bare event (replay it once the cause is fixed) rather than have the
            # provider retry a delivery that will never route.
            result = await ingest(store, event, [])
            log.error("delivery source=%s type=%s event=%d kept without todos: %s: %s", name, verified.type,
                      result.event_id, type(exc).__name__, exc)  # fmt: skip
    except Exception as exc:  # nothing was stored: the provider should retry
        log.error("delivery source=%s type=%s outcome=store-failed error=%s: %s", name, verified.type,
                  type(exc).__name__, exc)  # fmt: skip
        return _problem(503, "the event could not be stored; retry later")
    log.info(
        "delivery source=%s type=%s event=%d outcome=%s todos=%s",
        name,
        verified.type,
        result.event_id,
        "duplicate" if result.duplicate else "stored",
        list(result.todo_ids),
    )
    return JSONResponse(
        {"event_id": result.event_id, "duplicate": result.duplicate, "todos": list(result.todo_ids)},
        status_code=202,
    )


async def _prune_forever(store: Store, older_than_days: float, max_events: int) -> None:
    while True:
        try:
            pruned = await retention.prune(store, older_than_days=older_than_days, max_events=max_events)
            if pruned.events or pruned.todos:
                log.info("prune events=%d todos=%d", pruned.events, pruned.todos)
        except StoreFault as exc:
            log.error("prune failed: %s", exc)
        await asyncio.sleep(PRUNE_EVERY_SECONDS)


class _Server(uvicorn.Server):
    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A stop signal asks for a graceful stop, not a death by signal: do not
        # re-raise it after shutdown (uvicorn's default), so the exit code is 0.
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


def server(app: Starlette, host: str, port: int) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,  # our own line per delivery says more and never a secret
        lifespan="on",
        timeout_graceful_shutdown=30,
    )
    return _Server(config)
