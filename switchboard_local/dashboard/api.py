"""The read API under the dashboard's pages: JSON, the field names of the CLI's --json and the MCP tools.

    GET /api/queues              every queue: counts, done in the last hour, per-minute created/finished
    GET /api/todos?queue=&state=&kind=&assignee=&q=&cursor=&limit=
    GET /api/todos/{id}          payload, result, last error, attempts, the event that made it
    GET /api/events?source=&type=&cursor=&limit=
    GET /api/events/{id}         redacted headers, the body's views, verification, the todos it made
    GET /api/sources             webhook sources: kind, enabled, last delivery, deliveries by outcome
    GET /api/adapters            Redis adapters: health, consecutive failures, lag (asked of Redis now)
    GET /api/dead                dead letters grouped by queue and last error
    GET /api/session             the CSRF token an action sends (only with the dashboard token)

A list answers ``{"items": [...], "next_cursor": str | null}``; pass
``next_cursor`` back as ``cursor`` for the next page. An error answers
``{"error": {"code", "message"}}`` with the status of ``STATUS``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ..core import browse
from ..core.errors import Conflict, Forbidden, InvalidArgument, NotFound, StoreFault, SwitchboardError
from ..core.events import Event
from ..core.health import PROBE_TIMEOUT
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


def answers_errors(handler: Handler) -> Handler:
    """The handler, with the core's errors answered by ``STATUS``."""

    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except SwitchboardError as exc:
            status = next((s for kind, s in STATUS if isinstance(exc, kind)), 500)
            return problem(status, exc.code, exc.message)

    return handle


def todo_row(todo: Todo) -> dict[str, Any]:
    """A todo in a list: without payload and result, with ``payload_size`` (as MCP's list_todos)."""
    row = todo.to_dict()
    row.pop("result", None)
    row["payload_size"] = len(json.dumps(row.pop("payload"), ensure_ascii=False, separators=(",", ":")).encode())
    return row


def _made_row(todo: Todo) -> dict[str, Any]:
    # As `events show --json` lists an event's todos.
    return {"id": todo.id, "queue": todo.queue, "state": todo.state, "dead_letter": todo.dead_letter, "title": todo.title}


def _int_param(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
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


def _text(request: Request, name: str) -> str | None:
    return request.query_params.get(name) or None


def _paged(page: browse.Page, row: Callable[[Any], dict[str, Any]]) -> JSONResponse:
    cursor = None if page.next_cursor is None else str(page.next_cursor)
    return JSONResponse({"items": [row(item) for item in page.items], "next_cursor": cursor})


def routes(ctx: Context) -> list[BaseRoute]:
    store = ctx.store

    async def queues(request: Request) -> Response:
        return JSONResponse({"items": [q.to_dict() for q in await browse.queues(store)]})

    async def todos(request: Request) -> Response:
        page = await browse.todos(
            store,
            queue=_text(request, "queue"),
            state=_text(request, "state"),
            kind=_text(request, "kind"),
            assignee=_text(request, "assignee"),
            text=_text(request, "q"),
            cursor=browse.parse_cursor(request.query_params.get("cursor")),
            limit=_int_param(request, "limit", browse.DEFAULT_LIMIT),
        )
        return _paged(page, todo_row)

    async def todo(request: Request) -> Response:
        found, event = await browse.todo(store, _id(request, "todo"))
        return JSONResponse({**found.to_dict(), "event": None if event is None else event.summary()})

    async def events(request: Request) -> Response:
        page = await browse.events(
            store,
            source=_text(request, "source"),
            type=_text(request, "type"),
            cursor=browse.parse_cursor(request.query_params.get("cursor")),
            limit=_int_param(request, "limit", browse.DEFAULT_LIMIT),
        )
        return _paged(page, Event.summary)

    async def event(request: Request) -> Response:
        found, made = await browse.event(store, _id(request, "event"))
        view = {**found.full(), **browse.body_views(found.body, found.content_type), "todos": [_made_row(t) for t in made]}
        return JSONResponse(view)

    async def sources(request: Request) -> Response:
        tally = store_tally(ctx)
        items = []
        for view in await browse.sources(store, family="webhook"):
            items.append({**view.to_dict(), "deliveries": tally.deliveries_of(view.source.name)})
        return JSONResponse({"items": items, "deliveries_since": tally.since_rfc3339()})

    async def adapters(request: Request) -> Response:
        items = []
        for view in await browse.sources(store, family="queue"):
            items.append({**view.to_dict(), **await ctx.lag(view.source, PROBE_TIMEOUT)})
        return JSONResponse({"items": items})

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
        ("/api/dead", dead),
        ("/api/session", session),
    ]
    return [Route(path, answers_errors(handler), methods=["GET"]) for path, handler in table]


def store_tally(ctx: Context) -> Any:
    return ctx.store.tally
