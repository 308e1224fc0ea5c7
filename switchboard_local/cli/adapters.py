"""`adapter`: the broker consumers that `serve` runs, one per adapter, whatever its broker.

Every broker's adapters are added, listed and shown the same way: what is
particular to a broker (its options, what it reads, its guarantee) is asked of
its entry in the broker registry, which the process module hands over
(``process.brokers()``); this edge imports no broker.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from .. import process
from ..core import adapters, leadership, sources
from ..core.adapters import Broker, Option
from ..core.errors import InvalidArgument, SwitchboardError
from ..core.sources import Source
from .common import INT, FloatRange, IntRange, Out, common, operator, table, warn, when

# The options every broker shares, given to its ``configure`` as they are (None: not given).
SHARED = ("url", "url_env", "batch", "queue", "ack")


def register(main: click.Group) -> None:
    main.add_command(adapter)


def _view(a: Source) -> dict[str, Any]:
    return {**a.to_dict(), **adapters.describe(a, process.brokers())}  # the URL's password masked


def _last_error(a: Source) -> str:
    if a.last_error is None:
        return "-"
    return a.last_error if a.consecutive_failures else f"(recovered since) {a.last_error}"


def _url(config: dict[str, Any]) -> str:
    if config.get("url"):
        return str(config["url"])
    return f"from ${config['url_env']}" if config.get("url_env") else "-"


def _entry(a: Source) -> Broker | None:
    try:
        return process.brokers().of(a)
    except SwitchboardError:
        return None


def _own(a: Source) -> list[tuple[str, Any]]:
    """The broker's own options as the adapter's config holds them (a secret one masked)."""
    entry = _entry(a)
    options = [] if entry is None else [o for o in entry.options if o.name in a.config]
    return [(o.name.replace("_", " "), "****" if o.secret else a.config[o.name]) for o in options]


def _text(a: Source) -> str:
    # Read with .get: a row edited by hand may lack any of it.
    c, said, entry = a.to_dict()["config"], adapters.describe(a, process.brokers()), _entry(a)
    reads = f" {said['reads']}" if said["reads"] else ""
    fields = [
        ("broker", said["description"] or said["broker"]),
        *([("url", _url(c))] if entry is None or entry.takes_url else []),  # none where the broker takes none
        ("guarantee", said["guarantee"]),
        ("ack", _ack(said["ack"])),
        ("queue", f"{c.get('queue') or a.name} (when no rule matches)"),
        ("batch", c.get("batch")),
        *_own(a),
        ("last poll", when(a.last_poll_at)),
        ("last error", _last_error(a)),
        ("failures", f"{a.consecutive_failures} in a row"),
        ("stored", f"{a.messages_stored} messages"),
    ]
    width = max(12, *(len(name) for name, _ in fields))  # a broker's option may have a longer name
    head = f"adapter {a.name}: {said['broker']}{reads} ({'enabled' if a.enabled else 'disabled'})"
    return "\n".join([head, *(f"  {name:<{width}} {value}" for name, value in fields)])


def _ack(mode: str) -> str:
    if mode == adapters.ON_COMPLETE:
        return f"{mode} (each message held unacked until its todos finish)"
    return f"{mode} (each message acked once stored)"


@click.group()
def adapter() -> None:
    """Broker adapters: each drains one broker's stream, list, queue or channel into events (`adapter add --broker`)."""


# ---------------------------------------------------------------- add


def _click_type(option: Option, choices: list[str]) -> Any:
    if choices:
        return click.Choice(choices)
    if option.type is int:
        return INT if option.min is None and option.max is None else IntRange(option.min, option.max)
    if option.type is float:
        return FloatRange(option.min, option.max)
    return str


def _broker_options() -> list[click.Option]:
    """One click option per broker option name, whichever brokers declare it; its help names them."""
    declared: dict[str, list[tuple[Broker, Option]]] = {}
    for entry in process.brokers().entries():
        for option in entry.options:
            declared.setdefault(option.name, []).append((entry, option))
    made = []
    for name, owners in declared.items():
        first = owners[0][1]
        choices = list(dict.fromkeys(c for _, o in owners for c in (o.choices or ())))
        help_text = "; ".join(f"{entry.name}: {option.help}" + (" [required]" if option.required else "")
                              for entry, option in owners)  # fmt: skip
        if first.type is bool:  # a flag: True when given, None (not given) else, as the other options
            made.append(click.Option([first.flag, name], is_flag=True, flag_value=True, default=None, help=help_text))
            continue
        made.append(click.Option([first.flag, name], type=_click_type(first, choices), default=None,
                                 metavar=first.metavar, help=help_text))  # fmt: skip
    return made


class BrokerCommand(click.Command):
    """`adapter add`: the shared options, then every broker's own, read from the registry when the
    command is parsed or its help shown (so no other command imports a broker's driver)."""

    _brokers: tuple[str, ...] = ()
    _added: tuple[click.Parameter, ...] = ()

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        names = process.brokers().names()
        if names != self._brokers:  # the first time, or a broker was added to the registry since
            self._brokers = names
            self.params = [p for p in self.params if p not in self._added]
            for param in self.params:
                if param.name == "broker":
                    param.type = click.Choice(names)
            self._added = tuple(_broker_options())
            at = next(i for i, p in enumerate(self.params) if p.name == "db")  # before --db and --json
            self.params[at:at] = self._added
        return super().get_params(ctx)


@adapter.command("add", cls=BrokerCommand)
@click.argument("name", help="The adapter's name: 1-64 letters, digits, '.', '_' or '-'.")
@click.option("--broker", type=click.Choice(process.brokers().names()), default=process.brokers().default,
              show_default=True,
              help="The broker its messages are read from; each takes its own options below.")  # fmt: skip
@click.option("--url", default=None, help="The broker's URL (kept in the owner-only database, shown with its password "
              "or token masked).")  # fmt: skip
@click.option("--url-env", default=None, metavar="VAR", help="Read the URL from this environment variable of `serve`.")
@click.option("--queue", default=None, help="Queue for messages no rule matches (default: the adapter name).")
@click.option("--batch", type=IntRange(1, 10_000), default=None, help="Messages per transaction (default 64, or the "
              "broker's most).")  # fmt: skip
@click.option("--ack", type=click.Choice(adapters.ACK_MODES), default=None,
              help="When a stored message is acked at the broker: on-store (default: once its commit is done) or "
                   "on-complete (held unacked until every todo made from it is finished, where the broker can hold "
                   "a message that long; refused, saying why, where it cannot).")  # fmt: skip
@common
def adapter_add(db: Path | None, as_json: bool | None, name: str, broker: str, **given: Any) -> None:
    """Add an adapter NAME reading from a broker (--broker, and that broker's options); its events have source NAME."""
    out = Out(db, as_json)
    try:
        entry = process.brokers().get(broker)
        options = _options_for(entry, given)
        config = entry.configure(options)
    except SwitchboardError as exc:
        out.fail(exc)
    added = out.run(
        lambda store: sources.add(store, name, family="queue", kind=entry.name, trust_mode="queue", config=config,
                                  by=operator())  # fmt: skip
    )
    env = adapters.url_env(config)
    if env and not os.environ.get(env):  # serve may have it: keep the row, but say so
        warn(f"${env} is not set here: start serve with it set, or adapter {name!r} cannot connect")
    out.emit(_view(added), _text(added))


def _options_for(entry: Broker, given: dict[str, Any]) -> dict[str, Any]:
    """The options for ``entry.configure``: the shared ones and its own (defaults filled in). An option
    of another broker is refused naming its broker; a missing required one as click says it."""
    own = {o.name: o for o in entry.options}
    for name, value in given.items():
        if value is not None and name not in SHARED and name not in own:
            owners = [e.name for e in process.brokers().entries() if any(o.name == name for o in e.options)]
            flag = "--" + name.replace("_", "-")
            raise InvalidArgument(f"{flag} is an option of --broker {' and '.join(owners)}, not of {entry.name}")
    ctx = click.get_current_context()
    for option in entry.options:
        if option.required and given.get(option.name) is None:
            param = next(p for p in ctx.command.get_params(ctx) if p.name == option.name)
            raise click.MissingParameter(ctx=ctx, param=param)
    options = {name: given.get(name) for name in SHARED}
    for option in entry.options:
        value = given.get(option.name)
        options[option.name] = option.default if value is None else value
    return options


# ---------------------------------------------------------------- list, status, show


@adapter.command("list")
@common
def adapter_list(db: Path | None, as_json: bool | None) -> None:
    """List adapters: broker, what each reads, when it acks, and whether it is enabled."""
    out = Out(db, as_json)
    found = out.run(lambda store: sources.list_sources(store, family="queue"))
    views = [_view(a) for a in found]
    rows = [[v["name"], v["broker"], v["reads"] or "-", v["ack"], "enabled" if v["enabled"] else "disabled"]
            for v in views]  # fmt: skip
    out.emit(views, table(["NAME", "BROKER", "READS", "ACK", "STATE"], rows) if rows else "no adapters")


@adapter.command("status")
@common
def adapter_status(db: Path | None, as_json: bool | None) -> None:
    """Health of every adapter: last poll, last error, failures in a row, messages stored."""
    out = Out(db, as_json)
    found, leader = out.run(lambda store: _with_leader(store, sources.list_sources(store, family="queue")))
    state = "enabled" if leader is not None else "enabled, not consumed"
    views = [_view(a) for a in found]
    rows = [
        [a.name, v["broker"], v["ack"], state if a.enabled else "disabled", when(a.last_poll_at),
         a.consecutive_failures, a.messages_stored, _last_error(a)]
        for a, v in zip(found, views, strict=True)
    ]  # fmt: skip
    headers = ["NAME", "BROKER", "ACK", "STATE", "LAST POLL", "FAILURES", "STORED", "LAST ERROR"]
    text = table(headers, rows) if rows else "no adapters"
    if rows and leader is None:
        text += "\nnobody consumes: no process leads ingest (start `switchboard-local serve`; see `switchboard-local status`)"
    consumed = {"consumed_by": None if leader is None else {"pid": leader.pid, "kind": leader.kind}}
    out.emit([{**v, **consumed} for v in views], text)


async def _with_leader(store: Any, listing: Any) -> tuple[Any, leadership.Leader | None]:
    return await listing, await leadership.current(store)


@adapter.command("show")
@click.argument("name", help="The adapter's name.")
@common
def adapter_show(db: Path | None, as_json: bool | None, name: str) -> None:
    """Show an adapter, its broker, its guarantee and its health (the URL's password or token masked)."""
    out = Out(db, as_json)
    found = out.run(lambda store: sources.get(store, name, family="queue"))
    out.emit(_view(found), _text(found))


@adapter.command("remove")
@click.argument("name", help="The adapter's name.")
@common
def adapter_remove(db: Path | None, as_json: bool | None, name: str) -> None:
    """Remove an adapter (what is pending stays with its broker: a consumer group, its pending entries)."""
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
adapter.command("disable", help="Stop consuming; what is pending stays with the broker.")(_toggle(False))
