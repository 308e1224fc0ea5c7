"""What every dashboard handler shares: the store, the guard's policy, the broker registry."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core import adapters
from ..core.adapters import Brokers
from ..core.sources import Source
from ..core.store.interface import Store
from .guard import Policy

DEFAULT_MAX_STREAMS = 32


def _never() -> bool:
    return False


def _actor() -> str:
    """Who acts through the dashboard, as the audit trail names them: the token is the
    install's, so its holder is the OS user the server runs as."""
    try:
        return f"dashboard:{getpass.getuser()}"
    except Exception:  # no user name in this environment
        return "dashboard"


@dataclass
class Context:
    """``brokers``: the broker registry, which asks an adapter's broker for its backlog and says
    what it reads and guarantees (handed in by the process module: this edge imports no broker); ``stopping`` says the server is shutting down,
    so that open streams end and let it stop; ``max_streams``: how many live streams may be
    open at once (each holds a connection: the process module sets it below the connection limit)."""

    store: Store
    policy: Policy
    brokers: Brokers | None = None
    stopping: Callable[[], bool] = _never
    max_streams: int = DEFAULT_MAX_STREAMS
    extra: dict[str, Any] = field(default_factory=dict)
    actor: str = field(default_factory=_actor)

    async def lag(self, source: Source, timeout: float) -> dict[str, Any]:
        """What waits at an adapter's broker now (a disabled one's too: its backlog grows meanwhile)."""
        return await adapters.backlog(source, self.brokers, timeout)

    def broker(self, source: Source) -> dict[str, Any]:
        """What an adapter's broker says of it, and when it acks:
        {"broker", "description", "reads", "guarantee", "ack"}."""
        return adapters.describe(source, self.brokers)
