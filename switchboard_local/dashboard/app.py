"""The dashboard as the process module composes it: its routes and its guard.

    board = Dashboard(store, host, port, token, brokers=..., stopping=..., max_streams=limits.max_streams)
    web.create_app(store, routes=board.routes(), middleware=board.middleware(exempt=web.RECEIVER_PATHS))

Served at ``/`` on the receiver's address (`serve`, or the ingest leader's
receiver on ``http.listen``). Everything under it passes the guard
(guard.py); the receiver's own paths (``exempt``) do not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from ..core.adapters import Brokers
from ..core.store.interface import Store
from . import actions, api, metrics, pages, stream
from .context import DEFAULT_MAX_STREAMS, Context, _never
from .guard import Guard, Policy


class Dashboard:
    def __init__(
        self,
        store: Store,
        *,
        host: str,
        port: int,
        token: str,
        exempt: Sequence[str] = (),
        brokers: Brokers | None = None,
        stopping: Callable[[], bool] = _never,
        max_streams: int = DEFAULT_MAX_STREAMS,
    ) -> None:
        self.policy = Policy(host=host, port=port, token=token, exempt=tuple(exempt))
        self.context = Context(store, self.policy, brokers=brokers, stopping=stopping, max_streams=max_streams)

    def routes(self) -> list[BaseRoute]:
        ctx = self.context
        return [*api.routes(ctx), *actions.routes(ctx), *stream.routes(ctx), *metrics.routes(ctx), *pages.routes(ctx)]

    def middleware(self) -> list[Middleware]:
        return [Middleware(Guard, policy=self.policy)]
