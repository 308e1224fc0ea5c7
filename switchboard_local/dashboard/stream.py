"""The live stream: ``GET /api/stream?topics=queues,todos`` as server-sent events.

The pages hold one stream each and re-fetch what it names. It is driven by
the commit watch the MCP long poll uses (core/watch.py: ``PRAGMA
data_version`` with this store's own commits), so a change committed by any
process on the file is seen. One ``Hub`` per dashboard watches the file for
every open stream: after a commit it reads a small fingerprint
(core/browse.py) and tells each stream which topics moved; it looks at most
once per ``INTERVAL_SECONDS``, so no stream gets more than one message a
second, however fast work moves.

    retry: 3000                                  first: how soon a browser reconnects on its own
    event: ready   data: {"topics": [...]}       the stream watches: a page may fetch now
    event: change  data: {"topics": ["queues", "todos"]}

``?since=`` is the fingerprint a page was rendered with (its ``data-since``):
right after ``ready`` the stream names what moved since then, as a
``change`` (nothing when nothing did), so a page that came with its data
needs no fetch to catch up. Without it, a page fetches at ``ready``.

The stream ends when the server stops (``Context.stopping``) and after
``LIFETIME_SECONDS``; the browser's EventSource reconnects by itself after
``retry`` (with its cookie: the guard asks each stream for the token).

Each open stream holds one of the server's connections for as long as it
runs, so the streams have a budget of their own (``Context.max_streams``,
smaller than the connection limit): one more is answered 503 at once and
closed, and the connections the budget leaves stay the webhook receiver's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from ..core import browse
from ..core.errors import InvalidArgument
from ..core.store.interface import Store
from ..core.watch import Changes
from .api import answers_errors, problem
from .context import Context

log = logging.getLogger("switchboard_local.dashboard")

INTERVAL_SECONDS = 1.0  # the most often the hub looks, and so the most often a stream hears
RETRY_MS = 3000
PING_SECONDS = 15  # a comment line keeps idle connections (and proxies) open
WAKE_SECONDS = 1.0  # a stream looks at least this often whether the server is stopping
LIFETIME_SECONDS = 600.0  # then a stream ends (the browser reconnects): none holds its connection forever


class Subscriber:
    """One stream's inbox: the topics changed since it last read, coalesced."""

    def __init__(self) -> None:
        self.topics: set[str] = set()
        self._event = asyncio.Event()

    def push(self, topics: set[str]) -> None:
        self.topics |= topics
        self._event.set()

    async def take(self, timeout: float) -> set[str]:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout)
        self._event.clear()
        taken, self.topics = self.topics, set()
        return taken


class Hub:
    """Watches the file while at least one stream is open; tells each what changed."""

    def __init__(self, store: Store, *, interval: float = INTERVAL_SECONDS) -> None:
        self.store = store
        self.interval = interval
        self._subscribers: set[Subscriber] = set()
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event | None = None
        # The fingerprint every subscriber has been told about (None: the file could not be read).
        self.last: dict[str, Any] | None = None

    async def subscribe(self) -> Subscriber:
        """A new inbox, once the hub has read the file's state (a later commit reaches it)."""
        subscriber = Subscriber()
        self._subscribers.add(subscriber)
        if self._task is None or self._task.done():
            self._ready = asyncio.Event()
            self._task = asyncio.create_task(self._run(self._ready), name="dashboard-stream-hub")
        assert self._ready is not None
        await self._ready.wait()
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)
        if not self._subscribers and self._task is not None:
            self._task.cancel()  # nobody watches: stop polling the file
            self._task = None

    async def _run(self, ready: asyncio.Event) -> None:
        while True:
            try:
                await self._watch(ready)
            except Exception as exc:  # the file cannot be read now (StoreFault, a closed store): look again shortly
                log.warning("dashboard stream: cannot watch the database: %s", exc)
                self.last = None
                ready.set()
                await asyncio.sleep(self.interval)

    async def _watch(self, ready: asyncio.Event) -> None:
        changes = Changes(self.store)
        poller = asyncio.create_task(changes.run())
        try:
            await changes.ready.wait()
            seen = changes.count
            self.last = await browse.fingerprint(self.store)
            ready.set()
            while True:
                count = await changes.wait(seen, timeout=WAKE_SECONDS)
                if poller.done():
                    poller.result()  # it can only have failed: raise its error here
                if count == seen:
                    continue
                seen = count  # read before the look: a commit during it is seen at the next
                now = await browse.fingerprint(self.store)
                topics = browse.changed_topics(self.last or {}, now)
                # With the push, in one step: a subscriber is told of a change, or its `since` sees it.
                self.last = now
                if topics:
                    for subscriber in list(self._subscribers):
                        subscriber.push(topics)
                await asyncio.sleep(self.interval)
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await poller


class Budget:
    """How many streams may be open at once; each held place is one connection of the server's."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.open = 0

    def take(self) -> bool:
        if self.open >= self.most:
            return False
        self.open += 1
        return True

    def give_back(self) -> None:
        self.open -= 1


class BudgetedStream(EventSourceResponse):
    """An event stream that holds a place of ``budget`` while it runs, or is answered 503 when none is left."""

    def __init__(self, content: Any, budget: Budget, **options: Any) -> None:
        super().__init__(content, **options)
        self.budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.budget.take():
            message = f"the dashboard's {self.budget.most} live streams are open; retry later"
            busy = problem(503, "unavailable", message)
            busy.headers.update({"retry-after": str(RETRY_MS // 1000), "connection": "close"})
            await busy(scope, receive, send)
            return
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.budget.give_back()


def parse_topics(value: str | None) -> set[str]:
    if not value:
        return set(browse.TOPICS)
    wanted = {t.strip() for t in value.split(",") if t.strip()}
    unknown = sorted(wanted - set(browse.TOPICS))
    if unknown:
        raise InvalidArgument(f"unknown topic {unknown[0]!r}: topics are {', '.join(browse.TOPICS)}")
    return wanted


MAX_SINCE = 2000  # characters: a fingerprint is a few numbers


def parse_since(value: str | None) -> dict[str, Any] | None:
    """A page's fingerprint, as it was rendered into its ``data-since``."""
    if value is None:
        return None
    try:
        since = json.loads(value) if len(value) <= MAX_SINCE else None
    except ValueError:
        since = None
    if not isinstance(since, dict):
        raise InvalidArgument("since must be the data-since of a dashboard page (a JSON object)")
    return since


def moved_since(hub: Hub, since: dict[str, Any] | None, wanted: set[str]) -> set[str]:
    """What moved between a page's render and now (all its topics when the file could not be read)."""
    if since is None:
        return set()
    return wanted if hub.last is None else browse.changed_topics(since, hub.last) & wanted


def routes(ctx: Context) -> list[BaseRoute]:
    hub = Hub(ctx.store)
    ctx.extra["hub"] = hub
    budget = Budget(ctx.max_streams)

    async def stream(request: Request) -> Response:
        wanted = parse_topics(request.query_params.get("topics"))
        since = parse_since(request.query_params.get("since"))

        async def events() -> Any:
            loop = asyncio.get_running_loop()
            ends_at = loop.time() + LIFETIME_SECONDS
            subscriber = await hub.subscribe()
            try:
                yield ServerSentEvent(event="ready", data=json.dumps({"topics": sorted(wanted)}), retry=RETRY_MS)
                moved = moved_since(hub, since, wanted)
                if moved:
                    yield ServerSentEvent(event="change", data=json.dumps({"topics": sorted(moved)}))
                while not ctx.stopping() and (left := ends_at - loop.time()) > 0:
                    topics = (await subscriber.take(min(WAKE_SECONDS, left))) & wanted
                    if topics:
                        yield ServerSentEvent(event="change", data=json.dumps({"topics": sorted(topics)}))
            finally:
                hub.unsubscribe(subscriber)

        return BudgetedStream(events(), budget, ping=PING_SECONDS)

    return [Route("/api/stream", answers_errors(stream), methods=["GET"])]
