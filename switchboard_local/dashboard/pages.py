"""The dashboard's HTML pages (server-rendered; a client of the read API).

A placeholder until the pages land: ``/`` says where the API is.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from .context import Context

_PLACEHOLDER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>switchboard-local</title></head>
<body><h1>switchboard-local</h1><p>The read API is under <a href="/api/queues">/api/queues</a>;
metrics at <a href="/metrics">/metrics</a>.</p></body></html>
"""


def routes(ctx: Context) -> list[BaseRoute]:
    async def index(request: Request) -> Response:
        return HTMLResponse(_PLACEHOLDER)

    return [Route("/", index, methods=["GET"])]
