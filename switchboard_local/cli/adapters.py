"""`adapter`: the Redis pull adapters that `serve` runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from .. import process
from ..core import leadership, redis_config, sources
from ..core.errors import SwitchboardError
from ..core.sources import Source
from .common import IntRange, Out, common, operator, table, warn, when


def register(main: click.Group) -> None:
    main.add_command(adapter)


def _guarantee(a: Source) -> str:
    return redis_config.GUARANTEES.get(a.config.get("mode"), "unknown: this adapter's mode is not one serve runs")


def _view(a: Source) -> dict[str, Any]:
    view = a.to_dict()  # the URL's password masked
    view["guarantee"] = _guarantee(a)
    return view


def _last_error(a: Source) -> str:
    if a.last_error is None:
        return "-"
    return a.last_error if a.consecutive_failures else f"(recovered since) {a.last_error}"


def _text(a: Source) -> str:
    c = a.to_dict()["config"]  # read with .get: a row edited by hand may lack any of it
    url = c.get("redis_url") or f"from ${c.get('redis_url_env')}"
    lines = [
        f"adapter {a.name}: redis {c.get('mode')} {c.get('key')!r} ({'enabled' if a.enabled else 'disabled'})",
        f"  redis        {url}",
        f"  guarantee    {_guarantee(a)}",
        f"  queue        {c.get('queue') or a.name} (when no rule matches)",
        f"  batch        {c.get('batch')}",
    ]
    if c.get("mode") == "stream":
        lines.append(f"  group        {c.get('group')} (consumer {c.get('consumer')}, takes over entries idle {c.get('claim_idle')} s)")
    lines += [
        f"  last poll    {when(a.last_poll_at)}",
        f"  last error   {_last_error(a)}",
        f"  failures     {a.consecutive_failures} in a row",
        f"  stored       {a.messages_stored} messages",
    ]
    return "\n".join(lines)


@click.group()
def adapter() -> None:
    """Redis pull adapters: streams, reliable lists, pub/sub."""


@adapter.command("add")
@click.argument("name", help="The adapter's name: 1-64 letters, digits, '.', '_' or '-'.")
@click.option("--redis-url", default=None, help="redis://[:password@]host:port/db (kept in the owner-only database).")
@click.option("--redis-url-env", default=None, metavar="VAR", help="Read the URL from this environment variable of `serve`.")
@click.option("--mode", required=True, type=click.Choice(redis_config.MODES),
              help="stream (a consumer group; recommended), list (a reliable list, via KEY:processing) or pubsub "
                   "(a channel: loss-tolerant only).")  # fmt: skip
@click.option("--key", required=True, help="The stream, list or channel.")
@click.option("--group", default=None, help="stream: consumer group (default switchboard).")
@click.option("--consumer", default=None, help="stream: consumer name (default: this host's name).")
@click.option("--queue", default=None, help="Queue for messages no rule matches (default: the adapter name).")
@click.option("--batch", type=IntRange(1, 10_000), default=None, help="Messages per transaction (default 64).")
@click.option("--claim-idle", type=IntRange(1, redis_config.MAX_CLAIM_IDLE), default=None, help="stream: take over others' entries idle this many seconds (default 60, at most a year).")
@common
def adapter_add(db: Path | None, as_json: bool | None, name: str, **options: Any) -> None:
    """Add a Redis adapter NAME (its events have source NAME and type KEY)."""
    out = Out(db, as_json)
    try:
        config = process.redis_source_config(options)
    except SwitchboardError as exc:
        out.fail(exc)
    added = out.run(
        lambda store: sources.add(store, name, family="queue", kind="redis", trust_mode="queue", config=config,
                                  by=operator())
    )
    env = config.get("redis_url_env")
    if env and not os.environ.get(env):  # serve may have it: keep the row, but say so
        warn(f"${env} is not set here: start serve with it set, or adapter {name!r} cannot connect")
    out.emit(_view(added), _text(added))


@adapter.command("list")
@common
def adapter_list(db: Path | None, as_json: bool | None) -> None:
    """List Redis adapters."""
    out = Out(db, as_json)
    found = out.run(lambda store: sources.list_sources(store, family="queue"))
    rows = [[a.name, a.config.get("mode"), a.config.get("key"), "enabled" if a.enabled else "disabled"] for a in found]
    out.emit([_view(a) for a in found], table(["NAME", "MODE", "KEY", "STATE"], rows) if rows else "no adapters")


@adapter.command("status")
@common
def adapter_status(db: Path | None, as_json: bool | None) -> None:
    """Health of every adapter: last poll, last error, failures in a row, messages stored."""
    out = Out(db, as_json)
    found, leader = out.run(lambda store: _with_leader(store, sources.list_sources(store, family="queue")))
    state = "enabled" if leader is not None else "enabled, not consumed"
    rows = [
        [a.name, state if a.enabled else "disabled", when(a.last_poll_at), a.consecutive_failures,
         a.messages_stored, _last_error(a)]
        for a in found
    ]  # fmt: skip
    headers = ["NAME", "STATE", "LAST POLL", "FAILURES", "STORED", "LAST ERROR"]
    text = table(headers, rows) if rows else "no adapters"
    if rows and leader is None:
        text += "\nnobody consumes: no process leads ingest (start `switchboard-local serve`; see `switchboard-local status`)"
    consumed = {"consumed_by": None if leader is None else {"pid": leader.pid, "kind": leader.kind}}
    out.emit([{**_view(a), **consumed} for a in found], text)


async def _with_leader(store: Any, listing: Any) -> tuple[Any, leadership.Leader | None]:
    return await listing, await leadership.current(store)


@adapter.command("show")
@click.argument("name", help="The adapter's name.")
@common
def adapter_show(db: Path | None, as_json: bool | None, name: str) -> None:
    """Show an adapter, its guarantee and its health (the URL's password masked)."""
    out = Out(db, as_json)
    found = out.run(lambda store: sources.get(store, name, family="queue"))
    out.emit(_view(found), _text(found))


@adapter.command("remove")
@click.argument("name", help="The adapter's name.")
@common
def adapter_remove(db: Path | None, as_json: bool | None, name: str) -> None:
    """Remove an adapter (its consumer group and pending entries stay in Redis)."""
    out = Out(db, as_json)
    out.run(lambda store: sources.remove(store, name, family="queue", by=operator()))
    out.emit({"removed": name}, f"removed adapter {name}")


def _toggle(enabled: bool) -> Any:
    @click.argument("name", help="The adapter's name.")
    @common
    def command(db: Path | None, as_json: bool | None, name: str) -> None:
        out = Out(db, as_json)
        changed = out.run(lambda store: sources.set_enabled(store, name, enabled, family="queue", by=operator()))
        out.emit(_view(changed), f"adapter {name} {'enabled' if enabled else 'disabled'} (a running serve follows within seconds)")

    return command


adapter.command("enable", help="Start consuming (a running serve picks it up).")(_toggle(True))
adapter.command("disable", help="Stop consuming; what is pending stays in Redis.")(_toggle(False))
