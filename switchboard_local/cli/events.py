"""`events`, `prune` and `serve`: the audit surface and the receiver."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from ..core import events, retention, routing, sources
from ..core.store.interface import Store
from ..core.text import SafeFormatter, escape_controls
from ..core.todo_model import INT64_MAX, MAX_LIST_LIMIT, Todo
from . import live
from .common import EXIT_CANNOT_LISTEN, ID, Duration, FloatRange, IntRange, Out, common, table, when


class SinceValue(click.ParamType):
    """An event id (events after it), an RFC 3339 / ISO time, or an age (``10m``, ``2h``, ``1d``: that long ago).

    A bare number is an id; an age always has its unit (s, m, h or d).
    """

    name = "TIME|ID"
    AGE = re.compile(r"\s*[0-9]{1,9}\s*[smhd]\s*")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        if value.isascii() and value.isdigit():
            if int(value) > INT64_MAX:
                self.fail(f"{value} is beyond any event id", param, ctx)
            return ("id", int(value))
        if self.AGE.fullmatch(value):
            return ("ago", Duration().convert(value, param, ctx))
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            self.fail(
                f"{value!r} is neither an event id, a time like 2026-11-29T12:00:00Z, nor an age like 10m, 2h or 1d",
                param,
                ctx,
            )
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return ("time", round(moment.timestamp() * 1000))


def register(main: click.Group) -> None:
    main.add_command(events_group)
    main.add_command(prune_command)
    main.add_command(serve_command)


@click.group("events")
def events_group() -> None:
    """Stored deliveries: list, tail, show, replay."""


@events_group.command("list")
@click.option("--source", default=None, help="Only this source (or adapter).")
@click.option("--type", "type_", default=None, help="Only this event type (exactly).")
@click.option("--since", type=SinceValue(), default=None,
              help="Events after this id, or received since this time or age (10m, 2h, 1d: that long ago).")  # fmt: skip
@click.option("--limit", type=IntRange(1, MAX_LIST_LIMIT), default=50, show_default=True,
              help=f"Show at most this many (1-{MAX_LIST_LIMIT}).")  # fmt: skip
@common
def events_list(db: Path | None, as_json: bool | None, source: str | None, type_: str | None, since: Any, limit: int) -> None:
    """List events, oldest first (without --since: the newest LIMIT)."""
    out = Out(db, as_json)
    if since is None:
        found = out.run(lambda store: events.recent_events(store, source=source, type=type_, limit=limit))
    else:
        kind, value = since
        after_id = value if kind == "id" else None

        def since_ms(store: Store) -> int | None:
            if kind == "ago":  # measured on the store's clock, as received_at is
                return store.clock.now_ms() - value * 1000
            return value if kind == "time" else None

        found = out.run(
            lambda store: events.list_events(
                store, source=source, type=type_, after_id=after_id, since=since_ms(store), limit=limit
            )
        )
    rows = [[e.id, when(e.received_at), e.source, e.type, "yes" if e.verified else "NO", e.size, e.external_id] for e in found]
    text = table(["ID", "RECEIVED", "SOURCE", "TYPE", "VERIFIED", "BYTES", "DELIVERY"], rows) if rows else "no events"
    out.emit([e.summary() for e in found], text)


@events_group.command("tail")
@click.option("--source", default=None, help="Only this source (or adapter).")
@click.option("--since-id", type=ID, default=None,
              help="Start with event N (included), then follow. Default: only events stored from now on.")  # fmt: skip
@common
def events_tail(db: Path | None, as_json: bool | None, source: str | None, since_id: int | None) -> None:
    """Follow new events as they are stored, from any process, one line each, until Ctrl-C.

    --json writes one JSON object per line (JSON Lines; the fields of events
    list --json). The view ends quietly (exit 0) once nothing reads its output
    any more (piped to head, say).
    """
    out = Out(db, as_json)
    live.follow(
        out,
        lambda store: events.follow_events(store, from_id=since_id, source=source),
        line=live.event_line,
        to_json=events.Event.summary,
    )


@events_group.command("show")
@click.argument("event_id", metavar="ID", type=ID, help="The event's id.")
@click.option("--raw", is_flag=True, help="Write the body bytes exactly as received, and nothing else.")
@common
def events_show(db: Path | None, as_json: bool | None, event_id: int, raw: bool) -> None:
    """Show one event: its headers (redacted), its body and the todos it produced."""
    out = Out(db, as_json)
    if raw:
        event = out.run(lambda store: events.get_event(store, event_id))
        sys.stdout.buffer.write(event.body)
        sys.stdout.buffer.flush()
        return

    async def with_todos(store: Store) -> tuple[events.Event, list[Todo]]:
        return await events.get_event(store, event_id), await events.todos_of_event(store, event_id)

    event, made = out.run(with_todos)
    made_view = [{"id": t.id, "queue": t.queue, "state": t.state, "dead_letter": t.dead_letter, "title": t.title}
                 for t in made]  # fmt: skip
    view = {**event.full(), "todos": made_view}
    lines = [f"event {event.id}: {event.type} from {event.source}"]
    shown = {**event.summary(), "verified": "yes" if event.verified else "NO"}
    lines += [f"  {k:<14} {v}" for k, v in shown.items() if k not in ("id", "type", "source")]
    if made:
        rows = [[t.id, "dead letter" if t.dead_letter else t.state, t.queue, t.title] for t in made]
        lines.append("  todos:")
        lines.append("    " + table(["ID", "STATE", "QUEUE", "TITLE"], rows).replace("\n", "\n    "))
    else:
        lines.append(f"  {'todos':<14} none")
    lines += [f"  header {k}: {v}" for k, v in event.headers.items()]
    lines.append(f"  body ({view['body_encoding']}):")
    lines.append("    " + view["body"].replace("\n", "\n    "))
    out.emit(view, "\n".join(lines))


@events_group.command("replay")
@click.argument("event_id", metavar="ID", type=ID, help="The event's id.")
@common
def events_replay(db: Path | None, as_json: bool | None, event_id: int) -> None:
    """Route a stored event again (its new todos are marked as a replay)."""
    out = Out(db, as_json)
    ids = out.run(lambda store: routing.replay(store, event_id))
    out.emit({"event_id": event_id, "todos": ids}, f"event {event_id} replayed: todos {', '.join(map(str, ids)) or 'none'}")


@click.command("prune")
@click.option("--older-than", "older_than", type=FloatRange(0, 36500), default=retention.DEFAULT_OLDER_THAN_DAYS,
              show_default=True, help="Days: finished todos and events older than this are deleted.")  # fmt: skip
@click.option(
    "--max-events",
    type=IntRange(0, INT64_MAX),
    default=retention.DEFAULT_MAX_EVENTS,
    show_default=True,
    help="Keep at most this many of the newest events (and those live todos point to).",
)
@click.option("--dedup-horizon", type=FloatRange(0, 36500), default=retention.DEFAULT_DEDUP_HORIZON_DAYS,
              show_default=True, help="Days a pruned event's delivery key is kept: a redelivery within them is a duplicate.")  # fmt: skip
@common
def prune_command(db: Path | None, as_json: bool | None, older_than: float, max_events: int, dedup_horizon: float) -> None:
    """Delete old events and finished todos; live work and its events stay."""
    out = Out(db, as_json)
    pruned = out.run(
        lambda store: retention.prune(
            store, older_than_days=older_than, max_events=max_events, dedup_horizon_days=dedup_horizon
        )
    )
    out.emit(
        {"events": pruned.events, "todos": pruned.todos, "delivery_keys": pruned.delivery_keys},
        f"pruned {pruned.events} events and {pruned.todos} todos"
        + (f"; forgot {pruned.delivery_keys} delivery keys past the dedup horizon" if pruned.delivery_keys else ""),
    )


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Listen address (loopback unless told otherwise).")
@click.option("--port", type=IntRange(0, 65535), default=8787, show_default=True, help="0: any free port (logged).")
@click.option(
    "--prune-older-than",
    type=FloatRange(0, 36500),
    default=retention.DEFAULT_OLDER_THAN_DAYS,
    show_default=True,
    help="Days: the hourly prune deletes finished todos and events older than this.",
)
@click.option("--prune-max-events", type=IntRange(min=0), default=retention.DEFAULT_MAX_EVENTS, show_default=True,
              help="The hourly prune keeps at most this many of the newest events (see prune).")  # fmt: skip
@click.option("--dedup-horizon", type=FloatRange(0, 36500), default=retention.DEFAULT_DEDUP_HORIZON_DAYS,
              show_default=True, help="Days a pruned event's delivery key is kept (see prune).")  # fmt: skip
@click.option("--max-connections", type=IntRange(1, 100_000), default=256, show_default=True,
              help="Connections open at once; one more gets 503.")  # fmt: skip
@click.option("--head-timeout", type=FloatRange(0.1, 3600), default=10.0, show_default=True,
              help="Seconds for a request's line and headers to arrive (else 408).")  # fmt: skip
@click.option("--body-timeout", type=FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Seconds for a request's body to arrive once its headers have (else 408).")  # fmt: skip
@click.option("--take-over", is_flag=True,
              help="Take the ingest side over from the process that leads it (an `mcp`) instead of standing by.")  # fmt: skip
@click.option("--workers", type=IntRange(1, 64), default=None,
              help="Processes answering webhooks on the address, this one included (default: one per two cores, "
                   "at most 4). Limits such as --max-connections are each one's.")  # fmt: skip
@click.option("--listen-fd", type=IntRange(0), default=None, hidden=True,
              help="A worker's: the listening socket its `serve` gave it.")  # fmt: skip
@common
def serve_command(
    db: Path | None,
    as_json: bool | None,
    host: str,
    port: int,
    prune_older_than: float,
    prune_max_events: int,
    dedup_horizon: float,
    max_connections: int,
    head_timeout: float,
    body_timeout: float,
    take_over: bool,
    workers: int | None,
    listen_fd: int | None,
) -> None:
    """Run the webhook receiver (POST /hooks/NAME, GET /healthz) and lead ingest, until stopped.

    Ingest (the adapters' consumers and the pruner) runs in one process per
    database at a time: this one leads when no other does, and otherwise
    stands by and takes over when the leader goes (--take-over: at once).
    With --workers N, N - 1 more processes answer webhooks on the same
    address beside it (each stores what it receives before answering).
    """
    from .. import process  # starlette, uvicorn and the brokers' drivers only for this command
    from .. import workers as pool

    out = Out(db, as_json)
    out.run(sources.list_sources)  # a database that cannot be used stops us here, with its exit code
    handler = logging.StreamHandler(sys.stderr)
    who = "" if listen_fd is None else "worker %(process)d: "
    handler.setFormatter(SafeFormatter(f"%(asctime)s %(levelname)s {who}%(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    limits = process.http_limits(head_timeout=head_timeout, body_timeout=body_timeout, max_connections=max_connections)
    if listen_fd is not None:  # one of a serve's workers: its socket is given, it leads nothing
        if not process.Worker(out.db, limits=limits).run(pool.inherited_socket(listen_fd)):
            sys.exit(1)
        return
    try:
        sock = process.listen(host, port)
    except OSError as exc:  # taken, not ours to bind, or a name that does not resolve
        why = exc.strerror or str(exc)
        message = f"cannot listen on {host}:{port}: {why[:1].lower()}{why[1:]}"
        if out.json:
            click.echo(json.dumps({"error": {"code": "cannot_listen", "message": message}}))
        click.echo(f"switchboard-local: cannot_listen: {escape_controls(message)}", err=True)
        sys.exit(EXIT_CANNOT_LISTEN)
    upkeep = process.Upkeep(older_than_days=prune_older_than, max_events=prune_max_events,
                            dedup_horizon_days=dedup_horizon)  # fmt: skip
    service = process.Service(out.db, upkeep=upkeep, limits=limits, take_over=take_over,
                              workers=pool.default_count() if workers is None else workers)  # fmt: skip
    # Logs "serving on …" once bound and started; returns at a stop signal.
    if not service.run(sock):
        sys.exit(1)
