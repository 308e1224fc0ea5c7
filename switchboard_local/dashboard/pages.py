"""The dashboard's pages: server-rendered shells (Jinja2) and their static files.

Each page is HTML with its layout, navigation and filter forms; the rows in
it come from the JSON read API (`/api/...`), fetched by static/dashboard.js
and rebuilt when the page's one EventSource on `/api/stream` says something
changed. The page is a client of the API (one way to read, the same field
names as the CLI's `--json`), so nothing from the database is rendered here:
the shell carries only the page's name and the id it is about.

Everything the script writes goes in as text (`textContent`), never as HTML:
a payload or a delivery's body is shown, never interpreted. There is no
inline script or style (the Content-Security-Policy forbids both): the shell
loads /static/dashboard.js and /static/dashboard.css.

    GET /                  queues
    GET /todos             todos (filters in the query string)
    GET /todos/{id}        one todo
    GET /events            events (filters in the query string)
    GET /events/{id}       one event
    GET /dead              dead letters
    GET /sources           webhook sources and Redis adapters
    GET /static/{file}     the script, the style sheet, the icon
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

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

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,  # every value in a template is HTML-escaped
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render(template: str, *, page: str, title: str, **context: Any) -> HTMLResponse:
    html = _env.get_template(template).render(page=page, title=title, nav=NAV, **context)
    # Pages change with every release of the script: never cached stale.
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


async def queues_page(request: Request) -> Response:
    return render("queues.html", page="queues", title="Queues")


async def todos_page(request: Request) -> Response:
    return render("todos.html", page="todos", title="Todos")


async def todo_page(request: Request) -> Response:
    todo_id = request.path_params["todo_id"]
    return render("todo.html", page="todo", title=f"Todo {todo_id}", item_id=todo_id)


async def events_page(request: Request) -> Response:
    return render("events.html", page="events", title="Events")


async def event_page(request: Request) -> Response:
    event_id = request.path_params["event_id"]
    return render("event.html", page="event", title=f"Event {event_id}", item_id=event_id)


async def dead_page(request: Request) -> Response:
    return render("dead.html", page="dead", title="Dead letters")


async def sources_page(request: Request) -> Response:
    return render("sources.html", page="sources", title="Sources and adapters")


def routes(ctx: Context | None = None) -> list[BaseRoute]:
    """The pages and their static files, for the dashboard's app to mount beside the API
    (``ctx``, the dashboard's shared context, is not needed: a page reads nothing itself)."""
    return [
        Route("/", queues_page, methods=["GET"]),
        Route("/todos", todos_page, methods=["GET"]),
        Route("/todos/{todo_id:int}", todo_page, methods=["GET"]),
        Route("/events", events_page, methods=["GET"]),
        Route("/events/{event_id:int}", event_page, methods=["GET"]),
        Route("/dead", dead_page, methods=["GET"]),
        Route("/sources", sources_page, methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
