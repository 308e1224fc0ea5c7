"""The dashboard's operator actions: POST only, each one core verb, each in the audit trail.

    POST /api/todos/{id}/redrive      a dead letter back to pending (todo.redrive)
    POST /api/todos/{id}/cancel       {"reason"?}: a pending or claimed todo cancelled (todo.cancel)
    POST /api/todos/{id}/release      a claimed todo released without its token (todo.release)
    POST /api/dead/redrive            {"queue", "last_error"}: one dead-letter group redriven (todo.redrive)
    POST /api/events/{id}/replay      route a stored event again (event.replay)
    POST /api/queues/{name}/purge     {"state": done|failed|cancelled, "before"?: ms}: finished todos deleted (todo.purge)
    POST /api/queues/{name}/pause     claims stop (queue.pause); …/resume: they go on (queue.resume)

The guard has already asked for the token, the CSRF token and the same
origin. The audit trail names the actor ``dashboard:USER`` (the OS user the
server runs as: the token is the install's, so its holder is that user).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ..core import queues, routing, todos
from ..core.errors import InvalidArgument
from .api import Handler, _id, answers_errors
from .context import Context

MAX_BODY = 64 * 1024  # an action's arguments are a few fields


async def _arguments(request: Request, allowed: tuple[str, ...]) -> dict[str, Any]:
    """The action's JSON object (empty body: no arguments); a field it does not take is refused."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise InvalidArgument(f"the body is larger than {MAX_BODY} bytes")
    if not raw.strip():
        return {}
    try:
        found = json.loads(raw)
    except ValueError:
        raise InvalidArgument("the body must be a JSON object") from None
    if not isinstance(found, dict):
        raise InvalidArgument("the body must be a JSON object")
    unknown = sorted(set(found) - set(allowed))
    if unknown:
        takes = ", ".join(allowed) or "no fields"
        raise InvalidArgument(f"unknown field {unknown[0]!r} (this action takes {takes})")
    return found


def _queue(request: Request) -> str:
    return request.path_params["name"]


def routes(ctx: Context) -> list[BaseRoute]:
    store = ctx.store
    by = ctx.actor

    async def redrive(request: Request) -> Response:
        await _arguments(request, ())
        return JSONResponse((await todos.redrive(store, _id(request, "todo"), by=by)).to_dict())

    async def cancel(request: Request) -> Response:
        args = await _arguments(request, ("reason",))
        return JSONResponse((await todos.cancel(store, _id(request, "todo"), by=by, reason=args.get("reason"))).to_dict())

    async def release(request: Request) -> Response:
        await _arguments(request, ())
        return JSONResponse((await todos.force_release(store, _id(request, "todo"), by=by)).to_dict())

    async def redrive_group(request: Request) -> Response:
        args = await _arguments(request, ("queue", "last_error"))
        if "queue" not in args:
            raise InvalidArgument("queue is required (and last_error: the group's, null for none)")
        done = await todos.redrive_group(store, queue=args["queue"], last_error=args.get("last_error"), by=by)
        return JSONResponse(done.to_dict())

    async def replay(request: Request) -> Response:
        await _arguments(request, ())
        event_id = _id(request, "event")
        return JSONResponse({"event_id": event_id, "todos": await routing.replay(store, event_id, by=by)})

    async def purge(request: Request) -> Response:
        args = await _arguments(request, ("state", "before"))
        if "state" not in args:
            raise InvalidArgument(f"state is required: one of {', '.join(todos.PURGEABLE)}")
        before = args.get("before")
        if before is not None and (not isinstance(before, int) or isinstance(before, bool)):
            raise InvalidArgument("before must be a time in milliseconds since the epoch")
        purged = await todos.purge(store, queue=_queue(request), state=args["state"], before=before, by=by)
        return JSONResponse({"queue": _queue(request), "state": args["state"], "purged": purged})

    async def pause(request: Request) -> Response:
        await _arguments(request, ())
        return JSONResponse((await queues.pause(store, _queue(request), by=by)).to_dict())

    async def resume(request: Request) -> Response:
        await _arguments(request, ())
        return JSONResponse((await queues.resume(store, _queue(request), by=by)).to_dict())

    table: list[tuple[str, Handler]] = [
        ("/api/todos/{id}/redrive", redrive),
        ("/api/todos/{id}/cancel", cancel),
        ("/api/todos/{id}/release", release),
        ("/api/dead/redrive", redrive_group),
        ("/api/events/{id}/replay", replay),
        ("/api/queues/{name}/purge", purge),
        ("/api/queues/{name}/pause", pause),
        ("/api/queues/{name}/resume", resume),
    ]
    return [Route(path, answers_errors(handler), methods=["POST"]) for path, handler in table]
