"""The command line: a thin edge over the core verbs.

Every command takes ``--db PATH`` (or $SWITCHBOARD_DB) and ``--json`` (one
JSON value on stdout). Exit codes and the one error format: common.py.
The MCP SDK is never imported here: it costs about a second per command.
"""

from __future__ import annotations

from pathlib import Path

import click

from .. import __version__
from ..core import todos
from ..core.errors import SwitchboardError
from ..core.store.shared import default_path, describe
from .common import Commands, Out, common, listed_whole, table

# ---------------------------------------------------------------- commands


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@common
@click.version_option(__version__, prog_name="switchboard-local")
@click.pass_context
def main(ctx: click.Context, db: Path | None, as_json: bool | None) -> None:
    """switchboard-local: events in, durable todos out, drained by agents."""
    ctx.obj = {"db": db, "json": as_json}


@main.command("stats")
@common
def stats_command(db: Path | None, as_json: bool | None) -> None:
    """Counts per queue: ready, delayed (a delay or a retry's backoff), blocked (waiting for
    todos not done), claimed, done, dead, cancelled.

    OLDEST READY is the age of the oldest todo claimable now (since it was
    created); a paused queue says so; LIMIT shows a limited queue's claimed
    todos and claims in the last minute against its limits ('queue limit').
    """
    out = Out(db, as_json)
    found = out.run(todos.stats)
    rows = [
        [
            s.queue,
            s.ready,
            s.delayed,
            s.blocked,
            s.claimed,
            s.done,
            s.dead,
            s.cancelled,
            "-" if s.oldest_ready_age_seconds is None else f"{s.oldest_ready_age_seconds:.0f}s",
            "paused" if s.paused else "",
            s.limit_text,
        ]
        for s in found
    ]
    headers = ["QUEUE", "READY", "DELAYED", "BLOCKED", "CLAIMED", "DONE", "DEAD", "CANCELLED", "OLDEST READY", "PAUSED",
               "LIMIT"]
    out.emit({"queues": [s.to_dict() for s in found]}, table(headers, rows) if rows else "no todos")


@main.group("db")
def db_group() -> None:
    """The database: where it is, and copying it into another."""


@db_group.command("path")
@common
def db_path(db: Path | None, as_json: bool | None) -> None:
    """Print the database path in use."""
    out = Out(db, as_json)
    try:
        path = out.db if out.db is not None else default_path()
    except SwitchboardError as exc:  # $SWITCHBOARD_DB in the home of no user
        out.fail(exc)
    shown = describe(path)  # a URL's password is never printed
    out.emit({"path": shown}, shown)


def _register_edges() -> None:
    from . import adapters as cli_adapters
    from . import agents as cli_agents
    from . import config as cli_config
    from . import dashboard as cli_dashboard
    from . import database as cli_database
    from . import doctor as cli_doctor
    from . import events as cli_events
    from . import queues as cli_queues
    from . import service as cli_service
    from . import sources as cli_sources
    from . import status as cli_status
    from . import todos as cli_todos

    cli_todos.register(main)
    cli_sources.register(main)
    cli_config.register(main)
    cli_adapters.register(main)
    cli_events.register(main)
    cli_agents.register(main)  # `mcp` imports the SDK only inside its body
    cli_queues.register(main)
    cli_status.register(main)
    cli_service.register(main)
    cli_doctor.register(main)
    cli_dashboard.register(main)
    cli_database.register(db_group)
    listed_whole(main)


_register_edges()
