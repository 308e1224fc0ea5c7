"""What every dashboard handler shares: the store, the guard's policy, the edge libraries' probes."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.health import RedisProber, adapter_lag
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
    """``prober`` asks an adapter's Redis for its backlog (handed in by the process module:
    this edge imports no broker library); ``stopping`` says the server is shutting down,
    so that open streams end and let it stop; ``max_streams``: how many live streams may be
    open at once (each holds a connection: the process module sets it below the connection limit)."""

    store: Store
    policy: Policy
    prober: RedisProber | None = None
    stopping: Callable[[], bool] = _never
    max_streams: int = DEFAULT_MAX_STREAMS
    extra: dict[str, Any] = field(default_factory=dict)
    actor: str = field(default_factory=_actor)

    async def lag(self, source: Source, timeout: float) -> dict[str, Any]:
        """What waits in an adapter's Redis now (a disabled one's too: its backlog grows meanwhile)."""
        if self.prober is None:
            return {"waiting": None, "unacked": None, "lag_error": "not probed by this process"}
        return await adapter_lag(source, self.prober, timeout)
