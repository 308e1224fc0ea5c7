"""The dashboard's pages: server-rendered HTML (Jinja2, autoescaped) with their data, and their static files.

Each page arrives with what it shows: it reads through the same core reads as
the read API (core/browse.py) and renders the API's own dicts (the field names
of the CLI's --json), so a page is useful before its script runs, without it,
and in a headless screenshot. The script (static/dashboard.js) then keeps it
live: on a change the page's one EventSource names, it fetches the page again
and swaps in the parts marked ``data-live``; it fetches nothing at load. A
page's ``data-since`` is the live stream's fingerprint read before the page's
data, so the stream can say what moved in between (stream.py).

Every value goes in autoescaped: a payload, a title or a delivery's body is
shown, never interpreted. There is no inline script or style (the
Content-Security-Policy forbids both).

    GET /                  queues, and the latest events
    GET /todos             todos (filters in the query string; cursor, limit and rows page)
    GET /todos/{id}        one todo
    GET /events            events (filters in the query string; cursor, limit and rows page)
    GET /events/{id}       one event (?view=pretty|text|hex|base64: the body's view)
    GET /dead              dead letters
    GET /sources           webhook sources, adapters and schedules
    GET /static/{file}     the script, the style sheet, the icon

``rows`` asks for more rows than a page's ``limit`` from the top (the script
refreshing a list it has extended), while the links to the next page keep
``limit``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..core import browse
from ..core.errors import NotFound, SwitchboardError
from ..core.events import Event
from ..core.sources import list_sources
from ..core.todo_model import INT64_MAX
from ..core.todos import stats
from . import api, present
from .context import Context

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

# Nav order: (page, path, label).
NAV = [
    ("queues", "/", "Queues"),
    ("todos", "/todos", "Todos"),
    ("events", "/events", "Events"),
    ("dead", "/dead", "Dead letters"),
    ("sources", "/sources", "Sources"),
]
LATEST_EVENTS = 8  # under the queues
DEAD_ROWS = 200  # failed todos read to fill the dead-letter groups' tables
DEAD_SHOWN = 10  # rows shown per group
TODO_FILTERS = ("queue", "state", "kind", "assignee", "q")
EVENT_FILTERS = ("source", "type")

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,  # every value in a template is HTML-escaped
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.globals.update(present.GLOBALS)

# A page's reads: what its template shows, from the request and the dashboard's context.
Reader = Callable[[Request, Context], Awaitable[dict[str, Any]]]


def render(template: str, *, page: str, title: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = _env.get_template(template).render(page=page, title=title, nav=NAV, **context)
    # A page is the data as it is now: never cached stale.
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


def _filters(params: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    return {name: params.get(name, "") for name in names}


def _href(path: str, filters: Mapping[str, str], **extra: Any) -> str:
    query = {k: v for k, v in {**filters, **extra}.items() if v not in (None, "")}
    return path + ("?" + urlencode(query) if query else "")


def _rows(params: Mapping[str, str], filters: dict[str, Any]) -> dict[str, Any]:
    """``filters`` reading ``rows`` rows when the script asks for more than ``limit``."""
    return {**filters, "limit": max(filters["limit"], api.int_param(params, "rows", 0))}


def _pager(path: str, params: Mapping[str, str], filters: dict[str, str], next_cursor: str | None) -> dict[str, Any]:
    keep = {**filters, "limit": params.get("limit", "")}
    return {
        "older": None if next_cursor is None else _href(path, keep, cursor=next_cursor),
        "newest": _href(path, keep) if params.get("cursor") else None,
    }


def _id(request: Request, name: str, noun: str) -> int:
    value = request.path_params[name]
    if not 0 < value <= INT64_MAX:
        raise NotFound(f"{noun} {value} does not exist")
    return int(value)


async def read_queues(request: Request, ctx: Context) -> dict[str, Any]:
    latest = await browse.events(ctx.store, limit=LATEST_EVENTS)
    return {
        "queues": [q.to_dict() for q in await browse.queues(ctx.store)],
        "events": [e.summary() for e in latest.items],
    }


async def read_todos(request: Request, ctx: Context) -> dict[str, Any]:
    params = request.query_params
    shown = _filters(params, TODO_FILTERS)
    listed = api.paged(await browse.todos(ctx.store, **_rows(params, api.todo_filters(params))), api.todo_row)
    return {"items": listed["items"], **_pager("/todos", params, shown, listed["next_cursor"])}


async def read_todo(request: Request, ctx: Context) -> dict[str, Any]:
    return {"t": api.todo_view(*await browse.todo(ctx.store, _id(request, "todo_id", "todo")))}


async def read_events(request: Request, ctx: Context) -> dict[str, Any]:
    params = request.query_params
    shown = _filters(params, EVENT_FILTERS)
    listed = api.paged(await browse.events(ctx.store, **_rows(params, api.event_filters(params))), Event.summary)
    return {"items": listed["items"], **_pager("/events", params, shown, listed["next_cursor"])}


async def read_event(request: Request, ctx: Context) -> dict[str, Any]:
    event = api.event_view(*await browse.event(ctx.store, _id(request, "event_id", "event")))
    views = present.body_views(event)
    wanted = request.query_params.get("view", "")
    return {"e": event, "views": views, "view": wanted if wanted in views else next(iter(views))}


async def read_dead(request: Request, ctx: Context) -> dict[str, Any]:
    groups = [g.to_dict() for g in await browse.dead_groups(ctx.store)]
    failed = await browse.todos(ctx.store, state="failed", limit=DEAD_ROWS)
    rows: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for todo in failed.items:
        rows.setdefault((todo.queue, todo.last_error), []).append(api.todo_row(todo))
    by_queue: dict[str, dict[str, Any]] = {}
    for group in groups:
        queue = by_queue.setdefault(group["queue"], {"queue": group["queue"], "groups": [], "total": 0})
        queue["groups"].append({**group, "shown": rows.get((group["queue"], group["last_error"]), [])[:DEAD_SHOWN]})
        queue["total"] += group["count"]
    return {"by_queue": list(by_queue.values())}


async def read_sources(request: Request, ctx: Context) -> dict[str, Any]:
    webhooks = await api.source_rows(ctx)
    adapters = await api.adapter_rows(ctx)
    timed = await api.schedule_rows(ctx)
    return {
        "sources": webhooks["items"],
        "deliveries_since": webhooks["deliveries_since"],
        "adapters": adapters["items"],
        "schedules": timed["items"],
    }


async def queue_names(request: Request, ctx: Context) -> dict[str, Any]:
    """The todos filter's choice of queues (and the one asked for, were it gone)."""
    names = [s.queue for s in await stats(ctx.store)]
    asked = request.query_params.get("queue")
    return {"queue_names": names + ([asked] if asked and asked not in names else [])}


async def source_names(request: Request, ctx: Context) -> dict[str, Any]:
    names = [s.name for s in await list_sources(ctx.store)]
    asked = request.query_params.get("source")
    return {"source_names": names + ([asked] if asked and asked not in names else [])}


def _list_defaults(names: tuple[str, ...], choices: str) -> Callable[[Request], dict[str, Any]]:
    return lambda r: {
        "filters": _filters(r.query_params, names),
        choices: [],
        "items": [],
        "older": None,
        "newest": None,
    }


# page name -> (template, title, reader, what the template holds before (or without) the reader's answer)
PAGES: dict[str, tuple[str, str, Reader, Callable[[Request], dict[str, Any]]]] = {
    "queues": ("queues.html", "Queues", read_queues, lambda r: {"queues": [], "events": []}),
    "todos": ("todos.html", "Todos", read_todos, _list_defaults(TODO_FILTERS, "queue_names")),
    "todo": ("todo.html", "Todo {id}", read_todo, lambda r: {"t": None}),
    "events": ("events.html", "Events", read_events, _list_defaults(EVENT_FILTERS, "source_names")),
    "event": ("event.html", "Event {id}", read_event, lambda r: {"e": None}),
    "dead": ("dead.html", "Dead letters", read_dead, lambda r: {"by_queue": []}),
    "sources": ("sources.html", "Sources, adapters and schedules", read_sources,
                lambda r: {"sources": [], "adapters": [], "schedules": [], "deliveries_since": None}),
}  # fmt: skip
# Reads that fill a page's filter form.
FORM_READS: dict[str, Reader] = {"todos": queue_names, "events": source_names}


def page_route(ctx: Context, page: str) -> Callable[[Request], Awaitable[Response]]:
    template, title, reader, defaults = PAGES[page]

    async def handle(request: Request) -> Response:
        item_id = next(iter(request.path_params.values()), "")
        context: dict[str, Any] = {**defaults(request), "item_id": item_id, "now_ms": ctx.store.clock.now_ms()}
        context.update(error=None, since=None)
        status = 200
        try:
            # The fingerprint first: a change while the page reads makes the stream say so (never the reverse).
            context["since"] = json.dumps(await browse.fingerprint(ctx.store), separators=(",", ":"), default=str)
            context.update(await reader(request, ctx))
        except SwitchboardError as exc:
            status = api.status_of(exc)
            context.update(since=None, error=exc.message)
        if page in FORM_READS:
            with contextlib.suppress(SwitchboardError):  # the form offers fewer choices
                context.update(await FORM_READS[page](request, ctx))
        return render(template, page=page, title=title.format(id=item_id), status=status, **context)

    return handle


def routes(ctx: Context) -> list[BaseRoute]:
    """The pages and their static files, for the dashboard's app to mount beside the API."""
    return [
        Route("/", page_route(ctx, "queues"), methods=["GET"]),
        Route("/todos", page_route(ctx, "todos"), methods=["GET"]),
        Route("/todos/{todo_id:int}", page_route(ctx, "todo"), methods=["GET"]),
        Route("/events", page_route(ctx, "events"), methods=["GET"]),
        Route("/events/{event_id:int}", page_route(ctx, "event"), methods=["GET"]),
        Route("/dead", page_route(ctx, "dead"), methods=["GET"]),
        Route("/sources", page_route(ctx, "sources"), methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
