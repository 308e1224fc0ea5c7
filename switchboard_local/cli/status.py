"""`status`: who leads ingest on this database, who stands by, and how each consumer does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..core import leadership, sources
from ..core.clock import rfc3339
from ..core.store import Store
from .common import Out, common, table


def register(main: click.Group) -> None:
    main.add_command(status_command)


async def _status(store: Store) -> dict[str, Any]:
    leader = await leadership.current(store)
    members = await leadership.members(store)
    consumers = [s for s in await sources.list_sources(store, family="queue") if s.enabled]
    standbys = [m for m in members if leader is None or (m.pid, m.host) != (leader.pid, leader.host)]
    return {
        "leader": None if leader is None else leader.to_dict(),
        "standbys": [m.to_dict() for m in standbys],
        "consumers": [
            {
                "name": s.name,
                "running": leader is not None,
                "last_poll_at": rfc3339(s.last_poll_at),
                "consecutive_failures": s.consecutive_failures,
                "messages_stored": s.messages_stored,
                "last_error": s.last_error,
            }
            for s in consumers
        ],
    }


def _text(view: dict[str, Any]) -> str:
    leader = view["leader"]
    if leader is None:
        lines = ["ingest: nobody leads: no Redis source is consumed and nothing is pruned "
                 "(start `switchboard-local serve`, or an `mcp` with --ingest auto)"]  # fmt: skip
    else:
        receiver = f", receiver {leader['http']}" if leader["http"] else ", no webhook receiver"
        lines = [f"ingest: led by {leader['kind']} pid {leader['pid']} on {leader['host']} since {leader['since']}"
                 f"{receiver} (fence {leader['fence']})"]  # fmt: skip
    standbys = view["standbys"]
    lines.append("standbys: " + (", ".join(f"{m['kind']} pid {m['pid']}" for m in standbys) or "none"))
    rows = [[c["name"], "consuming" if c["running"] else "not consumed", c["last_poll_at"] or "-",
             c["consecutive_failures"], c["messages_stored"], c["last_error"] or "-"] for c in view["consumers"]]  # fmt: skip
    if rows:
        lines.append(table(["ADAPTER", "STATE", "LAST POLL", "FAILURES", "STORED", "LAST ERROR"], rows))
    else:
        lines.append("no enabled adapters")
    return "\n".join(lines)


@click.command("status")
@common
def status_command(db: Path | None, as_json: bool | None) -> None:
    """Who leads ingest (the Redis consumers, the pruner, a receiver), the standbys, and each consumer's health."""
    out = Out(db, as_json)
    view = out.run(_status)
    out.emit(view, _text(view))
