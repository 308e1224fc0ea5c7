"""`status`: who leads ingest on this database, who stands by, how each consumer does, and each
schedule's last and next tick.

A process that keeps the database's write lock (stopped inside a write
transaction, or holding it past LOCK_WAIT_SECONDS) is named: while it does,
nothing is written, whoever leads (core/write_lock.py). A consumer's lag is
asked of its broker now (its entry's probe, the one `doctor` uses: one second
for each connect and reply, never a write); its health is what the leader last
recorded."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import click

from .. import process
from ..core import adapters, leadership, schedules, sources, write_lock
from ..core.adapters import PROBE_TIMEOUT
from ..core.clock import rfc3339
from ..core.store.interface import Store
from .common import Out, common, table


def register(main: click.Group) -> None:
    main.add_command(status_command)


LOCK_WAIT_SECONDS = 1.0  # how long a process may hold the write lock before `status` names it


async def _status(store: Store) -> dict[str, Any]:
    leader = await leadership.current(store)
    members = await leadership.members(store)
    holding = await write_lock.holders(store, LOCK_WAIT_SECONDS)
    consumers = [s for s in await sources.list_sources(store, family="queue") if s.enabled]
    keeping = {h.pid for h in holding}  # a process keeping the lock stands by for nothing
    standbys = [m for m in members if (leader is None or (m.pid, m.host) != (leader.pid, leader.host))
                and not (m.pid in keeping and m.host == socket.gethostname())]  # fmt: skip
    brokers = process.brokers()
    lags = await asyncio.gather(*(adapters.backlog(s, brokers, PROBE_TIMEOUT) for s in consumers))
    now = store.clock.now_ms()
    timed = await sources.list_sources(store, family=schedules.FAMILY)
    return {
        "leader": None if leader is None else leader.to_dict(),
        "standbys": [m.to_dict() for m in standbys],
        # Who keeps the database's write lock (stopped, or past LOCK_WAIT_SECONDS): nothing is written meanwhile.
        "write_lock_holders": [h.to_dict() for h in holding],
        "consumers": [
            {
                "name": s.name,
                "running": leader is not None,
                "last_poll_at": rfc3339(s.last_poll_at),
                "consecutive_failures": s.consecutive_failures,
                "messages_stored": s.messages_stored,
                "last_error": s.last_error,
                **adapters.describe(s, brokers),
                **lag,
            }
            for s, lag in zip(consumers, lags, strict=True)
        ],
        # Each schedule's last tick fired and its next one due (fired by the leader: none fire while nobody leads).
        "schedules": [_schedule(s, now, firing=leader is not None) for s in timed],
    }


def _schedule(source: sources.Source, now: int, *, firing: bool) -> dict[str, Any]:
    view = schedules.describe(source, now, 1)
    upcoming = view["next"][0] if view["next"] else {"due": None, "local": None}
    return {
        "name": source.name,
        "enabled": source.enabled,
        "firing": firing and source.enabled and view["problem"] is None,
        "cron": view["cron"],
        "tz": view["tz"],
        "catch_up": view["catch_up"],
        "last_tick": view["last_tick"],
        "last_tick_local": view["last_tick_local"],
        "next_tick": upcoming["due"] if source.enabled else None,
        "next_tick_local": upcoming["local"] if source.enabled else None,
        "problem": view["problem"] or source.last_error,
    }


def _text(view: dict[str, Any]) -> str:
    leader = view["leader"]
    if leader is None and view["write_lock_holders"]:
        lines = ["ingest: nobody leads: no standby can take over while the write lock is kept (below)"]
    elif leader is None:
        lines = ["ingest: nobody leads: no adapter is consumed and nothing is pruned "
                 "(start `switchboard-local serve`, or an `mcp` with --ingest auto)"]  # fmt: skip
    else:
        receiver = f", receiver {leader['http']}" if leader["http"] else ", no webhook receiver"
        lines = [f"ingest: led by {leader['kind']} pid {leader['pid']} on {leader['host']} since {leader['since']}"
                 f"{receiver} (fence {leader['fence']})"]  # fmt: skip
    for holder in view["write_lock_holders"]:
        lines.append(_holding(holder))
    standbys = view["standbys"]
    lines.append("standbys: " + (", ".join(f"{m['kind']} pid {m['pid']}" for m in standbys) or "none"))
    rows = [[c["name"], "consuming" if c["running"] else "not consumed", _waiting(c), c["last_poll_at"] or "-",
             c["consecutive_failures"], c["messages_stored"], c["broker"], c["last_error"] or "-"]
            for c in view["consumers"]]  # fmt: skip
    if rows:
        lines.append(table(["ADAPTER", "STATE", "WAITING", "LAST POLL", "FAILURES", "STORED", "BROKER", "LAST ERROR"],
                           rows))  # fmt: skip
        lines += [f"  {c['name']}: {c['broker']} {c['reads'] or ''}".rstrip() + f"; {c['guarantee']}"
                  + (f"; backlog ({c['lag_note']})" if c["lag_note"] else "") for c in view["consumers"]]  # fmt: skip
    else:
        lines.append("no enabled adapters")
    rows = [[s["name"], _firing(s), f"{s['cron']} {s['tz']}", s["last_tick_local"] or "-", s["next_tick_local"] or "-",
             s["problem"] or "-"] for s in view["schedules"]]  # fmt: skip
    if rows:
        lines.append(table(["SCHEDULE", "STATE", "CRON", "LAST TICK", "NEXT TICK", "PROBLEM"], rows))
    return "\n".join(lines)


def _firing(schedule: dict[str, Any]) -> str:
    if not schedule["enabled"]:
        return "disabled"
    return "firing" if schedule["firing"] else "not fired"


def _holding(holder: dict[str, Any]) -> str:
    """What a process keeping the write lock means, and what lets it go."""
    who = f"{holder['kind'] or 'a process'} pid {holder['pid']}"
    if holder["state"] == "stopped":
        return (f"write lock: held by {who}, which is stopped: nothing can be written and no standby can take "
                f"over until it continues (kill -CONT {holder['pid']}) or ends; webhooks are answered 503")  # fmt: skip
    return (f"write lock: held by {who} ({holder['state']}) for over {LOCK_WAIT_SECONDS:g} s: writes wait for it, "
            "webhooks are answered 503 after a few seconds")  # fmt: skip


def _waiting(consumer: dict[str, Any]) -> str:
    """The lag column: waiting (+ read but not acked), or why it is unknown."""
    if consumer["lag_error"]:
        return f"? ({consumer['lag_error']})"
    if consumer["waiting"] is None and consumer["unacked"] is None:
        return "-"
    waiting = "?" if consumer["waiting"] is None else str(consumer["waiting"])
    return f"{waiting} (+{consumer['unacked']} unacked)" if consumer["unacked"] else waiting


@click.command("status")
@common
def status_command(db: Path | None, as_json: bool | None) -> None:
    """Who leads ingest (the adapters' consumers, the schedules' ticks, the pruner, a receiver), the standbys, a
    process keeping the write lock, each consumer's health, backlog and guarantee, and each schedule's last and
    next tick."""
    out = Out(db, as_json)
    view = out.run(_status)
    out.emit(view, _text(view))
