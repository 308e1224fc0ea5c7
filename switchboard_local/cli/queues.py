"""`queue`: pause, resume and limit a queue, and list the queues.

A paused queue keeps receiving todos; no claim takes from it until it is
resumed. Leases already held on it keep working. A limited queue gives at
most so many claimed todos at once, or so many claims a minute; its other
todos wait, ready.
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
    """Pause, resume, limit and list queues."""


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


def _limit_text(limit: queues.Limit) -> str:
    if not limit.limited:
        return f"queue {limit.queue} has no limit"
    parts = []
    if limit.max_claimed is not None:
        parts.append(f"at most {limit.max_claimed} claimed at once ({limit.claimed} now)")
    if limit.max_per_minute is not None:
        parts.append(f"at most {limit.max_per_minute} claims a minute ({limit.claims_last_minute} in the last minute)")
    return f"queue {limit.queue}: " + "; ".join(parts)


@queue_group.command("limit")
@click.argument("queue", help="The queue's name (it need not have todos yet).")
@click.option("--max-claimed", type=int, default=None, metavar="N",
              help="At most N of its todos claimed at once (1 to 1000000).")  # fmt: skip
@click.option("--max-per-minute", type=int, default=None, metavar="N",
              help="At most N claims of its todos in any rolling 60 seconds (1 to 1000000).")  # fmt: skip
@click.option("--clear", is_flag=True, help="Remove both limits.")
@click.option("--by", default=None, help="Who sets it (default: your user name).")
@common
def queue_limit(
    db: Path | None, as_json: bool | None, queue: str, max_claimed: int | None, max_per_minute: int | None,
    clear: bool, by: str | None,
) -> None:  # fmt: skip
    """Limit how many of QUEUE's todos are claimed at once, or a minute; with no option, show its limits.

    Every claim holds the limit (by id, the next in line, batches, from any
    process); the queue's other todos wait, ready. A limit given alone keeps the
    other as it was. Leases held already are kept when a limit is lowered.
    """
    out = Out(db, as_json)
    if max_claimed is None and max_per_minute is None and not clear:
        shown = out.run(lambda store: queues.get_limit(store, queue))
    else:
        shown = out.run(lambda store: queues.set_limit(
            store, queue, max_claimed=max_claimed, max_per_minute=max_per_minute, clear=clear, by=by or operator()))  # fmt: skip
    out.emit(shown.to_dict(), _limit_text(shown))


@queue_group.command("list")
@common
def queue_list(db: Path | None, as_json: bool | None) -> None:
    """Every queue that has todos, is paused or is limited, with its counts and how close it is to its limits."""
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
            q.stats.limit_text or "-",
        ]
        for q in found
    ]
    headers = ["QUEUE", "PAUSED", "READY", "DELAYED", "BLOCKED", "CLAIMED", "DONE", "DEAD", "CANCELLED", "LIMIT"]
    out.emit({"queues": [q.to_dict() for q in found]}, table(headers, rows) if rows else "no queues")
