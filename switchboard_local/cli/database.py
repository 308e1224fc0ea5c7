"""`db copy`: the database's data into another, empty one (a SQLite file or PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import click

from ..core import copy
from .common import Out, common, table

# The rows of `db copy`'s answer, in the order they were copied, as people read them.
LABELS = {
    "sources": "sources", "rules": "rules", "agents": "agents", "settings": "settings", "queues": "queue settings",
    "events": "events", "todos": "todos", "event_todos": "event-to-todo links",
    "todo_deps": "dependencies", "attempts": "attempts",
    "delivery_keys": "delivery keys", "queue_claims": "logged claims of rate-limited queues",
}  # fmt: skip


def register(db_group: click.Group) -> None:
    db_group.add_command(db_copy)


@click.command("copy")
@click.option("--to", "target", required=True, metavar="TARGET",
              help="An empty database: a SQLite file's path, or a postgresql:// URL.")  # fmt: skip
@common
def db_copy(db: Path | None, as_json: bool | None, target: str) -> None:
    """Copy this database's data into TARGET, which must be empty.

    Sources, rules, agents, settings (not a machine's own: http.listen),
    paused queues, events with their bodies, todos in every state (a claimed
    one keeps its lease: its holder completes it in the target), the links
    from events to todos, the attempts history and the delivery keys. Ids are
    kept; new ids in TARGET continue after the source's.

    The source is read in one transaction, as one snapshot (on SQLite its
    writers wait until the copy ends: stop them first; on PostgreSQL they go
    on, and what they commit after the copy began is not copied), and TARGET
    is written in one: a copy that fails or is refused leaves it as it was. A TARGET that holds any data is
    refused, naming what it holds.
    """
    out = Out(db, as_json)
    copied = out.run(lambda store: copy.copy(store, target))
    rows = [[LABELS[name], count] for name, count in copied.counts.items()] + [["total", copied.total]]
    text = f"copied {copied.source} to {copied.target}\n" + table(["WHAT", "ROWS"], rows)
    if copied.left_behind:
        text += "\nleft behind (this machine's settings): " + ", ".join(copied.left_behind)
    out.emit(copied.to_dict(), text)
