"""Schedules on the command line: `source add --kind schedule`'s options and text, `schedule next`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ..core import schedules, sources
from ..core.sources import Source
from ..core.store.interface import Store
from .common import INT, JsonValue, Out, common, operator, table, when

# `source add`'s options that only a schedule takes (None where not given).
OPTIONS = ("cron", "tz", "title", "payload", "catch_up")


def options(fn: Any) -> Any:
    """`source add`'s options for --kind schedule."""
    fn = click.option("--catch-up", type=click.Choice(schedules.CATCH_UPS), default=None,
                      help=f"schedule: ticks missed while nobody led: none skips them, last fires the newest, all "
                           f"fires each (at most {schedules.MAX_CATCH_UP}) (default {schedules.DEFAULT_CATCH_UP}).")(fn)  # fmt: skip
    fn = click.option("--payload", type=JsonValue(), default=None,
                      help="schedule: JSON carried in each tick's body (JSON, @FILE or @-).")(fn)  # fmt: skip
    fn = click.option("--title", default=None, help="schedule: the title of each tick's todo (default: NAME: tick TIME).")(fn)
    fn = click.option("--tz", default=None, metavar="ZONE",
                      help="schedule: the IANA time zone the cron expression is read in (default UTC).")(fn)  # fmt: skip
    fn = click.option("--cron", default=None, metavar="EXPR",
                      help="schedule: when it ticks: 5 cron fields, or 6 with seconds first ('*/10 * * * * *').")(fn)  # fmt: skip
    return fn


def add(out: Out, name: str, queue: str | None, given: dict[str, Any]) -> None:
    """`source add NAME --kind schedule`: checked whole before anything is written."""
    if given.get("cron") is None:
        raise click.UsageError("--kind schedule needs --cron EXPR")
    added = out.run(lambda store: _added(store, name, queue, given))
    out.emit(*added)


async def _added(store: Store, name: str, queue: str | None, given: dict[str, Any]) -> tuple[dict[str, Any], str]:
    source = await schedules.add(store, name, queue=queue, by=operator(), **{k: given.get(k) for k in OPTIONS})
    return shown(source, store.clock.now_ms())


def shown(source: Source, now: int, count: int = 3) -> tuple[dict[str, Any], str]:
    """A schedule as `source show` shows it: JSON, and text."""
    view = schedules.describe(source, now, count)
    lines = [
        f"schedule {source.name}: {view['cron']} in {view['tz']} ({'enabled' if source.enabled else 'disabled'})",
        f"  queue        {view['queue']} (when no rule matches)",
        f"  catch-up     {view['catch_up']}",
    ]
    if view["title"]:
        lines.append(f"  title        {view['title']}")
    if view["payload"] is not None:
        lines.append(f"  payload      {json.dumps(view['payload'], ensure_ascii=False)}")
    last = f"{view['last_tick_local']} ({view['last_tick']})" if view["last_tick"] else "-"
    lines.append(f"  last tick    {last}")
    if view["problem"]:
        lines.append(f"  problem      {view['problem']}")
    for n, due in enumerate(view["next"]):
        lines.append(f"  {'next' if n == 0 else '':<12} {due['local']} ({due['due']})")
    lines.append(f"  created      {when(source.created_at)}")
    return {**source.to_dict(), "schedule": view}, "\n".join(lines)


def register(main: click.Group) -> None:
    main.add_command(schedule)


@click.group()
def schedule() -> None:
    """Schedules: sources whose events are the ticks of a cron expression (`source add --kind schedule`)."""


@schedule.command("next")
@click.argument("name", help="The schedule's name.")
@click.option("--count", type=INT, default=5, show_default=True,
              help=f"How many due instants to show (1-{schedules.MAX_NEXT}).")  # fmt: skip
@common
def schedule_next(db: Path | None, as_json: bool | None, name: str, count: int) -> None:
    """Show the next instants schedule NAME is due, in its time zone (and in UTC)."""
    out = Out(db, as_json)

    async def due(store: Store) -> tuple[Source, list[int]]:
        source = await sources.get(store, name, family=schedules.FAMILY)
        return source, schedules.next_due(source, store.clock.now_ms(), count)

    source, instants = out.run(due)
    timing = schedules.Spec.of(source)
    rows = [{"due": when(t), "local": timing.local(t)} for t in instants]
    text = f"schedule {name}: {timing.cron} in {timing.zone}\n" + table(
        [f"DUE ({timing.zone})", "DUE (UTC)"], [[r["local"], r["due"]] for r in rows]
    )
    out.emit({"name": name, "cron": timing.cron, "tz": timing.zone, "next": rows}, text)
