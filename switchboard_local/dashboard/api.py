"""The read API under the dashboard's pages: JSON, the field names of the CLI's --json and the MCP tools.

    GET /api/queues              every queue: counts, done in the last hour, per-minute created/finished
    GET /api/todos?queue=&state=&kind=&assignee=&q=&cursor=&limit=
    GET /api/todos/{id}          payload, result, last error, attempts, the event that made it
    GET /api/events?source=&type=&cursor=&limit=
    GET /api/events/{id}         redacted headers, the body's views, verification, the todos it made
    GET /api/sources             webhook sources: kind, enabled, last delivery, deliveries by outcome
    GET /api/adapters            adapters: broker, what it reads, guarantee, health, consecutive failures, lag
    GET /api/schedules           schedules: cron, zone, catch-up, last tick fired, next tick due, health
                                 (asked of the broker now)
    GET /api/dead                dead letters grouped by queue and last error
    GET /api/session             the CSRF token an action sends (only with the dashboard token)

A list answers ``{"items": [...], "next_cursor": str | null}``; pass
``next_cursor`` back as ``cursor`` for the next page. An error answers
``{"error": {"code", "message"}}`` with the status of ``STATUS``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ..core import browse, schedules
from ..core.adapters import PROBE_TIMEOUT
from ..core.errors import Conflict, Forbidden, InvalidArgument, NotFound, StoreFault, SwitchboardError
from ..core.events import Event
from ..core.text import digits
from ..core.todo_model import INT64_MAX, Todo
from .context import Context

# The one table from the core's errors to this edge's statuses.
STATUS: tuple[tuple[type[SwitchboardError], int], ...] = (
    (NotFound, 404),
    (Forbidden, 403),
    (Conflict, 409),
    (InvalidArgument, 400),
    (StoreFault, 503),
)

Handler = Callable[[Request], Awaitable[Response]]


def problem(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def status_of(exc: SwitchboardError) -> int:
    return next((s for kind, s in STATUS if isinstance(exc, kind)), 500)


def answers_errors(handler: Handler) -> Handler:
    """The handler, with the core's errors answered by ``STATUS``."""

    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except SwitchboardError as exc:
            return problem(status_of(exc), exc.code, exc.message)

    return handle


def todo_row(todo: Todo) -> dict[str, Any]:
    """A todo in a list: without payload and result, with ``payload_size`` (as MCP's list_todos)."""
    row = todo.to_dict()
    row.pop("result", None)
    row["payload_size"] = len(json.dumps(row.pop("payload"), ensure_ascii=False, separators=(",", ":")).encode())
    return row


def made_row(todo: Todo) -> dict[str, Any]:
    # As `events show --json` lists an event's todos.
    return {"id": todo.id, "queue": todo.queue, "state": todo.state, "dead_letter": todo.dead_letter, "title": todo.title}


def int_param(params: Mapping[str, str], name: str, default: int) -> int:
    value = params.get(name)
    if value is None or value == "":
        return default
    number = digits(value)
    if number is None:
        raise InvalidArgument(f"{name} must be a whole number in ASCII digits, got {value[:40]!r}")
    return number


def _id(request: Request, noun: str) -> int:
    value = request.path_params["id"]
    number = digits(value)
    if number is None or not 0 < number <= INT64_MAX:
        raise NotFound(f"{noun} {value[:40]!r} does not exist")
    return number


def _text(params: Mapping[str, str], name: str) -> str | None:
    return params.get(name) or None


def todo_filters(params: Mapping[str, str]) -> dict[str, Any]:
    """``browse.todos``' arguments from a query string (the API's and the todos page's)."""
    return {
        "queue": _text(params, "queue"),
        "state": _text(params, "state"),
        "kind": _text(params, "kind"),
        "assignee": _text(params, "assignee"),
        "text": _text(params, "q"),
        "cursor": browse.parse_cursor(params.get("cursor")),
        "limit": int_param(params, "limit", browse.DEFAULT_LIMIT),
    }


def event_filters(params: Mapping[str, str]) -> dict[str, Any]:
    """``browse.events``' arguments from a query string (the API's and the events page's)."""
    return {
        "source": _text(params, "source"),
        "type": _text(params, "type"),
        "cursor": browse.parse_cursor(params.get("cursor")),
        "limit": int_param(params, "limit", browse.DEFAULT_LIMIT),
    }


def paged(page: browse.Page, row: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    cursor = None if page.next_cursor is None else str(page.next_cursor)
    return {"items": [row(item) for item in page.items], "next_cursor": cursor}


def todo_view(found: Todo, event: Event | None) -> dict[str, Any]:
    return {**found.to_dict(), "event": None if event is None else event.summary()}


def event_view(found: Event, made: list[Todo]) -> dict[str, Any]:
    return {**found.full(), **browse.body_views(found.body, found.content_type), "todos": [made_row(t) for t in made]}


async def source_rows(ctx: Context) -> dict[str, Any]:
    """Webhook sources with this process's deliveries by outcome (and since when it counts them)."""
    tally = store_tally(ctx)
    items = [{**view.to_dict(), "deliveries": tally.deliveries_of(view.source.name)}
             for view in await browse.sources(ctx.store, family="webhook")]  # fmt: skip
    return {"items": items, "deliveries_since": tally.since_rfc3339()}


async def adapter_rows(ctx: Context) -> dict[str, Any]:
    """Adapters, what their broker says of them, and what waits there now."""
    items = []
    for view in await browse.sources(ctx.store, family="queue"):
        items.append({**view.to_dict(), **ctx.broker(view.source), **await ctx.lag(view.source, PROBE_TIMEOUT)})
    return {"items": items}


async def schedule_rows(ctx: Context) -> dict[str, Any]:
    """Schedules, each with its last tick fired and its next one due (in its zone and in UTC)."""
    now = ctx.store.clock.now_ms()
    items = []
    for view in await browse.sources(ctx.store, family=schedules.FAMILY):
        timing = schedules.describe(view.source, now, 1)
        upcoming = timing["next"][0] if timing["next"] and view.source.enabled else {"due": None, "local": None}
        items.append({**view.to_dict(), "cron": timing["cron"], "tz": timing["tz"], "catch_up": timing["catch_up"],
                      "queue": timing["queue"], "last_tick": timing["last_tick"],
                      "last_tick_local": timing["last_tick_local"], "next_tick": upcoming["due"],
                      "next_tick_local": upcoming["local"], "problem": timing["problem"]})  # fmt: skip
    return {"items": items}


def routes(ctx: Context) -> list[BaseRoute]:
    store = ctx.store

    async def queues(request: Request) -> Response:
        return JSONResponse({"items": [q.to_dict() for q in await browse.queues(store)]})

    async def todos(request: Request) -> Response:
        page = await browse.todos(store, **todo_filters(request.query_params))
        return JSONResponse(paged(page, todo_row))

    async def todo(request: Request) -> Response:
        return JSONResponse(todo_view(*await browse.todo(store, _id(request, "todo"))))

    async def events(request: Request) -> Response:
        page = await browse.events(store, **event_filters(request.query_params))
        return JSONResponse(paged(page, Event.summary))

    async def event(request: Request) -> Response:
        return JSONResponse(event_view(*await browse.event(store, _id(request, "event"))))

    async def sources(request: Request) -> Response:
        return JSONResponse(await source_rows(ctx))

    async def adapters(request: Request) -> Response:
        return JSONResponse(await adapter_rows(ctx))

    async def schedules_(request: Request) -> Response:
        return JSONResponse(await schedule_rows(ctx))

    async def dead(request: Request) -> Response:
        return JSONResponse({"items": [g.to_dict() for g in await browse.dead_groups(store)]})

    async def session(request: Request) -> Response:
        if not ctx.policy.authenticated(request.headers):
            return problem(401, "unauthorized", "no dashboard token: open the URL `switchboard-local dashboard` prints")
        return JSONResponse({"csrf_token": ctx.policy.csrf_token, "csrf_header": "X-CSRF-Token"})

    table: list[tuple[str, Handler]] = [
        ("/api/queues", queues),
        ("/api/todos", todos),
        ("/api/todos/{id}", todo),
        ("/api/events", events),
        ("/api/events/{id}", event),
        ("/api/sources", sources),
        ("/api/adapters", adapters),
        ("/api/schedules", schedules_),
        ("/api/dead", dead),
        ("/api/session", session),
    ]
    return [Route(path, answers_errors(handler), methods=["GET"]) for path, handler in table]


def store_tally(ctx: Context) -> Any:
    return ctx.store.tally
