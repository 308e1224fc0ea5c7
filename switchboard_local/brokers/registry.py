"""The brokers, by name: everything the rest of the program asks of one.

A broker is one module in this folder (or a small package), declaring at
module level:

    NAME          "nats": the name `adapter add --broker` takes, kept in each config as ``broker``
    DESCRIPTION   one line: what its adapters read ("NATS JetStream: a durable pull consumer")
    OPTIONS       tuple of core.adapters.Option: what `adapter add` takes beyond the shared
                  --url/--url-env/--batch/--queue/--ack (CLI ``--stream``, config key ``stream``);
                  no name of SHARED below; a help that does not name the broker (the CLI does)
    URL           False when its adapters name no URL (SQS: the AWS environment says where);
                  left out, it is True: exactly one of --url and --url-env is required
    configure(options) -> dict
                  `adapter add`'s options (its OPTIONS' names and url, url_env, batch, queue;
                  None where not given) validated into the config stored with the adapter.
                  Raises core.errors.InvalidArgument naming the option (``--stream must …``);
                  never quotes a URL (it may hold a password); does no network I/O. The
                  registry adds ``"broker": NAME`` and ``"ack"`` (checked here, with
                  cannot_hold). brokers/options.py has the shared checks.
    cannot_hold(config) -> str | None
                  None when this config's reader can hold a stored message unacked until
                  every todo made from it is finished (``--ack on-complete``: its Reader
                  has ``hold``, reader.py); else why not, which `adapter add` says when it
                  refuses --ack on-complete. Left out, the broker cannot: refused, saying so
    guarantee(config) -> str   the delivery guarantee, one line (CLI, `status`, the dashboard)
    where(config) -> str       what it reads, no secret ("stream ORDERS subject orders.>")
    env(config) -> list[str]   the environment variables it reads (`service install`, `doctor`)
    OPTIONAL_ENV  those of env()'s names a consumer can do without (one way among several to find
                  credentials or a region): `service install` names one only when its shell sets it.
                  Left out, none is: each name env() gives is one a consumer needs
    async probe(config, env, timeout) -> core.adapters.Backlog
                  its backlog now (waiting, unacked, or why unknown); each connect and reply
                  within ``timeout`` s; only asks, never raises, never puts a secret in the error
    Reader        the reader factory (reader.py's ``ReaderFactory``): ``Reader(source, connect=None)``
                  makes a source's reader without I/O; ``Reader.faults``: the driver's exceptions
                  that are broker faults (the loop backs off from them with a warning)

and one line in ``MODULES`` below. Its tests go in tests/brokers/. Nothing
else changes: the consumer loop finds the reader here, the CLI builds
`adapter add`'s options from the entries, and `status`, `doctor`, the
dashboard and `service install` ask the entry (through core/adapters.py's
``Broker``, handed to them by the process module).

A broker's module is imported when first asked for (an adapter of it is run,
shown or probed; `adapter add` imports them all for their options): a
command that never meets a broker never loads its driver.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..core.adapters import ACK, ACK_MODES, ON_COMPLETE, ON_STORE, Backlog, Option, ack_mode, broker_name
from ..core.errors import InvalidArgument
from ..core.sources import Source
from .reader import ReaderFactory

DEFAULT = "redis"  # `adapter add` without --broker, and a row stored before there were several brokers
# One line per broker: its name and the module that declares it.
MODULES: dict[str, str] = {
    "redis": "switchboard_local.brokers.redis",
    "nats": "switchboard_local.brokers.nats_jetstream",
    "amqp": "switchboard_local.brokers.amqp",
    "sqs": "switchboard_local.brokers.sqs",
}
# The options every broker shares (the CLI's --url, --url-env, --batch, --queue, --ack); none may declare one of these.
SHARED = ("url", "url_env", "batch", "queue", "ack", "broker")
ON_COMPLETE_GUARANTEE = (
    "--ack on-complete: each stored message is held unacked until every todo made from it is finished"
)


@dataclass(frozen=True)
class Entry:
    """One broker, as core/adapters.py's ``Broker`` describes it, made of its module's names."""

    name: str
    description: str
    options: tuple[Option, ...]
    takes_url: bool
    module: ModuleType
    optional_env: frozenset[str] = frozenset()

    @classmethod
    def of(cls, name: str, module: ModuleType) -> Entry:
        declared = getattr(module, "NAME", None)
        if declared != name:
            raise ValueError(f"{module.__name__} declares NAME {declared!r}, but the registry lists it as {name!r}")
        options = tuple(module.OPTIONS)
        clash = [o.name for o in options if o.name in SHARED]
        if clash:
            raise ValueError(f"{module.__name__} declares {clash}, which every broker shares")
        return cls(name, module.DESCRIPTION, options, bool(getattr(module, "URL", True)), module,
                   frozenset(getattr(module, "OPTIONAL_ENV", ())))  # fmt: skip

    def configure(self, options: Mapping[str, Any]) -> dict[str, Any]:
        ack = options.get(ACK)
        if ack is not None and ack not in ACK_MODES:
            raise InvalidArgument(f"--ack must be one of {', '.join(ACK_MODES)}")
        config = {**self.module.configure(dict(options)), "broker": self.name, ACK: ack or ON_STORE}
        if config[ACK] == ON_COMPLETE and (why := self.cannot_hold(config)) is not None:
            raise InvalidArgument(f"--ack on-complete cannot work here: {why}")
        return config

    def cannot_hold(self, config: Mapping[str, Any]) -> str | None:
        """Why this config's messages cannot be held unacked until their todos finish; None when they can."""
        said = getattr(self.module, "cannot_hold", None)
        if said is None:
            return f"{self.name} adapters cannot hold a message unacked until its todos finish"
        why = said(config)
        return None if why is None else str(why)

    def guarantee(self, config: Mapping[str, Any]) -> str:
        said = str(self.module.guarantee(config))
        return f"{said}; {ON_COMPLETE_GUARANTEE}" if ack_mode(config) == ON_COMPLETE else said

    def where(self, config: Mapping[str, Any]) -> str:
        return str(self.module.where(config))

    def env(self, config: Mapping[str, Any]) -> list[str]:
        return list(self.module.env(config))

    async def probe(self, config: Mapping[str, Any], env: Mapping[str, str], timeout: float) -> Backlog:
        found: Backlog = await self.module.probe(config, env, timeout)
        return found

    @property
    def reader(self) -> ReaderFactory:
        factory: ReaderFactory = self.module.Reader
        return factory


class Registry:
    """The brokers by name (core/adapters.py's ``Brokers``); each module imported on first use."""

    default = DEFAULT

    def __init__(self, modules: Mapping[str, str] = MODULES) -> None:
        self._modules = modules  # read at each question: a test adds its broker's line to MODULES
        self._entries: dict[str, Entry] = {}

    def names(self) -> tuple[str, ...]:
        return (self.default, *sorted(n for n in self._modules if n != self.default))

    def get(self, name: str) -> Entry:
        if name not in self._modules:
            raise InvalidArgument(f"no broker {name!r}: the brokers are {', '.join(self.names())}")
        found = self._entries.get(name)
        if found is None or found.module.__name__ != self._modules[name]:
            found = self._entries[name] = Entry.of(name, importlib.import_module(self._modules[name]))
        return found

    def of(self, source: Source) -> Entry | None:
        name = broker_name(source, self)
        return self.get(name) if name in self._modules else None

    def entries(self) -> list[Entry]:
        """Every broker, the default first (imports them all: `adapter add` shows every broker's options)."""
        return [self.get(name) for name in self.names()]

    def reader(self, source: Source) -> ReaderFactory:
        """The reader factory of an adapter's broker (the consumer loop's one question)."""
        entry = self.of(source)
        if entry is None:
            raise InvalidArgument(f"adapter {source.name}: no broker {broker_name(source, self)!r} in this version")
        return entry.reader


BROKERS = Registry()
