"""The queue family as the core knows it: adapters, whose broker it never names.

An adapter is a source of family ``queue``, drained by a broker consumer
(``switchboard_local.brokers``). Its config is opaque here: the broker's
entry validated it at `adapter add` (``Broker.configure``) and reads it back;
the core reads only the keys every broker shares:

    broker    the broker's name (a row stored before there were several has
              none: ``Brokers.of`` reads it as the registry's default broker)
    url       the broker's URL, kept in this owner-only database, shown masked
    url_env   the environment variable that holds the URL instead
    batch     messages stored per transaction
    queue     the queue for messages no rule matches (default: the adapter's name)
    ack       when a stored message is acked at its broker: ``on-store`` (after
              its commit; a row without the key) or ``on-complete`` (once every
              todo made from it is finished; held unacked until then)

What only a broker's library can tell (its backlog, its delivery guarantee,
where it reads) is asked of its entry through ``Broker``, handed in by the
process module (``process.brokers()``) to the CLI, `doctor`, `status` and the
dashboard, as the doctor's probes were: the core imports no broker.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .sources import Source

PROBE_TIMEOUT = 1.0  # seconds a broker has to answer a backlog probe
URL, URL_ENV = "url", "url_env"
ACK = "ack"
ON_STORE, ON_COMPLETE = "on-store", "on-complete"
ACK_MODES = (ON_STORE, ON_COMPLETE)


@dataclass(frozen=True)
class Option:
    """One option a broker's `adapter add` takes beyond the shared ones: ``--NAME`` on the
    command line ('_' written '-'), ``NAME`` in the options ``configure`` is given.

    ``type``: str, int, float or bool (a flag: ``--NAME`` alone gives True, its absence
    None); ``choices`` (str) and ``min``/``max`` (numbers) are
    checked by the CLI before ``configure`` sees them (``configure`` checks again: it
    is also called without the CLI). ``required``: ``configure`` refuses a missing one
    (the CLI cannot: the option belongs to one broker of several). ``secret``: its value
    is kept in the database but never shown back. ``help``: one sentence that does not
    name the broker (`adapter add --help` puts "BROKER: " before it, and "[required]" after).
    """

    name: str
    help: str
    type: type = str
    default: Any = None
    required: bool = False
    secret: bool = False
    choices: tuple[str, ...] | None = None
    min: float | None = None
    max: float | None = None
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Backlog:
    """What an adapter's broker says waits there now; a probe never raises, it answers one of these.

    ``waiting``: messages not delivered to us yet; ``unacked``: delivered but not
    acknowledged (read, maybe stored, not acked yet). None where the broker cannot
    tell (``note`` says why, e.g. a pub/sub channel keeps no backlog; or what the
    numbers are, e.g. approximate: `status`, `doctor` and the dashboard show it
    beside them). ``error``:
    why the broker could not be asked (unreachable: ``reachable`` False) or could
    not answer; never a secret. ``fix``: what to do when it is unreachable, when
    the broker can say (start the server on that port, ...).
    """

    reachable: bool
    waiting: int | None = None
    unacked: int | None = None
    error: str | None = None
    note: str | None = None
    fix: str | None = None


class Broker(Protocol):
    """What the program asks of one broker (an entry of ``brokers/registry.py``).

    ``takes_url``: whether its adapters name a URL (``--url`` or ``--url-env``, exactly one).
    ``optional_env``: those of ``env``'s names a consumer can do without (one way among several).
    """

    name: str
    description: str
    options: tuple[Option, ...]
    takes_url: bool
    optional_env: frozenset[str]

    def configure(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """`adapter add`'s options (this broker's and the shared url, url_env, batch, queue, ack; None
        where not given) validated into the config stored with the adapter, ``broker`` included.
        Raises InvalidArgument naming the option (``--ack on-complete`` where this broker, or this
        config of it, cannot hold a message that long: saying why); never quotes a URL; no network I/O."""
        ...

    def guarantee(self, config: Mapping[str, Any]) -> str:
        """The delivery guarantee, in one line."""
        ...

    def where(self, config: Mapping[str, Any]) -> str:
        """What it reads, in a few words ("stream 'orders' group switchboard"): never a secret."""
        ...

    def env(self, config: Mapping[str, Any]) -> list[str]:
        """The environment variables a consumer of this config reads (`service install`, `doctor`)."""
        ...

    async def probe(self, config: Mapping[str, Any], env: Mapping[str, str], timeout: float) -> Backlog:
        """Its backlog now, each connect and reply within ``timeout`` s; only asks, never raises."""
        ...


class Brokers(Protocol):
    """The registry (``brokers/registry.py``), as the process module hands it in."""

    default: str  # the broker of `adapter add` without --broker, and of a row that names none

    def names(self) -> tuple[str, ...]:
        """Every broker, the default first."""
        ...

    def get(self, name: str) -> Broker:
        """A broker by name; InvalidArgument naming the known ones when there is none."""
        ...

    def of(self, source: Source) -> Broker | None:
        """An adapter's broker (its config's ``broker``, else the default); None when this version has none."""
        ...


def url_env(config: Mapping[str, Any]) -> str | None:
    """The variable an adapter's URL is read from, when that is where it is."""
    name = config.get(URL_ENV)
    return name if isinstance(name, str) and name else None


def url(config: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """An adapter's URL: kept in its config, else read from ``env``; None when neither has one."""
    kept = config.get(URL)
    if isinstance(kept, str) and kept:
        return kept
    name = url_env(config)
    return (env.get(name) or None) if name else None


def ack_mode(config: Mapping[str, Any]) -> str:
    """When an adapter acks a stored message: ``on-complete`` when its config says so, else ``on-store``."""
    return ON_COMPLETE if config.get(ACK) == ON_COMPLETE else ON_STORE


def broker_name(source: Source, brokers: Brokers) -> str:
    """The name of an adapter's broker, as its config says (a row without one: the default)."""
    name = source.config.get("broker")
    return name if isinstance(name, str) and name else brokers.default


async def backlog(source: Source, brokers: Brokers | None, timeout: float = PROBE_TIMEOUT,
                  env: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """What waits at an adapter's broker now: {"waiting", "unacked", "lag_error", "lag_note"} (None where
    unknown; ``lag_note``: what the broker says of its numbers, e.g. that they are approximate).

    `status`, the dashboard and /metrics ask it. A URL in a variable this
    process lacks is not asked for (the lag error says so).
    """
    env = os.environ if env is None else env
    if brokers is None:
        return _unknown("not probed by this process")
    broker = brokers.of(source)
    if broker is None:
        return _unknown(f"no broker {broker_name(source, brokers)!r} here")
    name = url_env(source.config)
    if broker.takes_url and url(source.config, env) is None:
        return _unknown(f"${name} is not set here" if name else "no URL in its config")
    found = await broker.probe(source.config, env, timeout)
    error = found.error if found.reachable else f"unreachable ({found.error})"
    return {"waiting": found.waiting, "unacked": found.unacked, "lag_error": error, "lag_note": found.note}


def _unknown(why: str) -> dict[str, Any]:
    return {"waiting": None, "unacked": None, "lag_error": why, "lag_note": None}


def describe(source: Source, brokers: Brokers | None) -> dict[str, Any]:
    """What an adapter's broker says of it, for people and scripts: {"broker", "description",
    "reads", "guarantee", "ack"}. Never fails: a row stored by another version, or edited by hand,
    is still shown (with what cannot be said of it as None, or the guarantee saying why)."""
    name = source.config.get("broker") if brokers is None else broker_name(source, brokers)
    found = {"broker": name, "description": None, "reads": None, "guarantee": None, "ack": ack_mode(source.config)}
    try:
        broker = None if brokers is None else brokers.of(source)
        if broker is None:
            why = "not known here" if brokers is None else f"no broker {name!r} in this version"
            return {**found, "guarantee": f"unknown: {why}"}
        return {**found, "description": broker.description, "reads": broker.where(source.config),
                "guarantee": broker.guarantee(source.config)}  # fmt: skip
    except Exception as exc:  # a broker's words on a row it cannot read must not hide the row
        return {**found, "guarantee": f"unknown: its config cannot be read ({type(exc).__name__})"}


def env_of(source: Source, brokers: Brokers | None, here: Mapping[str, str] | None = None) -> list[str]:
    """The environment variables an adapter's consumer reads (its broker's word; at least its URL's).

    Given ``here`` (an environment), those its broker can do without are named only when ``here``
    sets them: what `service install` tells the service will lack is what this shell has and it would not.
    """
    names = [name] if (name := url_env(source.config)) else []
    try:
        broker = None if brokers is None else brokers.of(source)
        if broker is not None:
            optional = broker.optional_env if here is not None else frozenset()
            names += [n for n in broker.env(source.config) if n not in optional or (here or {}).get(n)]
    except Exception:  # a row its broker cannot read: its URL's variable is still one
        pass
    return list(dict.fromkeys(names))
