"""`queue`: pause and resume a queue, and list the queues.

A paused queue keeps receiving todos; no claim takes from it until it is
resumed. Leases already held on it keep working.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..core import queues
from .common import Out, common, operator, table, when


def register(main: click.Group) -> None:
    main.add_command(queue_group)


@click.group("queue")
def queue_group() -> None:
    """Pause, resume and list queues."""


def _no_todos(paused: queues.Paused) -> str:
    return "" if paused.has_todos else f"\n{paused.queue} has no todos yet"


@queue_group.command("pause")
@click.argument("queue", help="The queue's name (it need not have todos yet).")
@click.option("--by", default=None, help="Who pauses it (default: your user name).")
@common
def queue_pause(db: Path | None, as_json: bool | None, queue: str, by: str | None) -> None:
    """Stop every claim from QUEUE; its todos keep arriving and leases held on it keep working."""
    out = Out(db, as_json)
    paused = out.run(lambda store: queues.pause(store, queue, by=by or operator()))
    if paused.changed:
        text = f"paused queue {paused.queue}: todos still arrive, none is claimed until 'queue resume {paused.queue}'"
    else:
        text = f"queue {paused.queue} was paused already, since {when(paused.paused_at)} by {paused.paused_by}"
    out.emit(paused.to_dict(), text + _no_todos(paused))


@queue_group.command("resume")
@click.argument("queue", help="The queue's name.")
@common
def queue_resume(db: Path | None, as_json: bool | None, queue: str) -> None:
    """Let claims take from QUEUE again."""
    out = Out(db, as_json)
    resumed = out.run(lambda store: queues.resume(store, queue, by=operator()))
    if resumed.changed:
        text = f"resumed queue {resumed.queue}: its todos can be claimed again"
    else:
        text = f"queue {resumed.queue} was not paused"
    out.emit(resumed.to_dict(), text + _no_todos(resumed))


@queue_group.command("list")
@common
def queue_list(db: Path | None, as_json: bool | None) -> None:
    """Every queue that has todos or is paused, with its counts."""
    out = Out(db, as_json)
    found = out.run(queues.list_queues)
    rows = [
        [
            q.name,
            f"since {when(q.paused_at)} by {q.paused_by}" if q.paused else "no",
            q.stats.ready,
            q.stats.delayed,
            q.stats.blocked,
            q.stats.claimed,
            q.stats.done,
            q.stats.dead,
            q.stats.cancelled,
        ]
        for q in found
    ]
    headers = ["QUEUE", "PAUSED", "READY", "DELAYED", "BLOCKED", "CLAIMED", "DONE", "DEAD", "CANCELLED"]
    out.emit({"queues": [q.to_dict() for q in found]}, table(headers, rows) if rows else "no queues")
