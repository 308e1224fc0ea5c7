"""Waiting for what a real broker or process will do: bounded, and failing with what was seen.

A wait looks at something (a count in the file, a length in Redis) until it
is what the test wants. It fails at once when whatever should bring that
about has died (the adapter's task ended, the `serve` process exited), and
after STALL seconds in which what it looks at did not change at all: slow
progress on a loaded machine keeps a long drain waiting, while a stall fails
in seconds rather than after a minute. Either way the failure says what was
seen last, and the context the test gives (an adapter's health, a log).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

STALL = 15.0  # seconds without any change: far beyond a loaded machine's pauses
CAP = 300.0  # seconds in all, changing or not
POLL = 0.05


class Wait:
    """One wait: ``look()`` until it equals ``want`` (or ``want(seen)`` holds, when it is a function).

    ``dead()`` says why the change can no longer come (None while it can);
    ``context()`` adds what explains a failure.
    """

    def __init__(
        self,
        look: Callable[[], Any],
        want: Any,
        *,
        dead: Callable[[], str | None] | None = None,
        context: Callable[[], str] | None = None,
        stall: float = STALL,
    ) -> None:
        self.look, self.want, self.dead, self.context, self.stall = look, want, dead, context, stall
        self.started = self.changed = time.monotonic()
        self.seen: Any = None

    def done(self) -> bool:
        """Look once: True when it is what is wanted; raise when it cannot be, or has stalled."""
        seen, now = self.look(), time.monotonic()
        if seen != self.seen:
            self.seen, self.changed = seen, now
        if self.want(seen) if callable(self.want) else seen == self.want:
            return True
        why = self.dead() if self.dead is not None else None
        if why is not None:
            self.fail(why)
        if now - self.changed > self.stall:
            self.fail(f"no change for {self.stall:g} s")
        if now - self.started > CAP:
            self.fail(f"still not there after {CAP:g} s")
        return False

    def fail(self, why: str) -> None:
        wanted = "a value it accepts" if callable(self.want) else repr(self.want)
        extra = f"\n{self.context()}" if self.context is not None else ""
        raise AssertionError(f"waited for {wanted}, last saw {self.seen!r}: {why}{extra}")


def until(look: Callable[[], Any], want: Any, **options: Any) -> None:
    """Wait (blocking) until ``look()`` is ``want``."""
    wait = Wait(look, want, **options)
    while not wait.done():
        time.sleep(POLL)


async def until_async(look: Callable[[], Any], want: Any, **options: Any) -> None:
    """``until`` for a test on the event loop, which the adapters under test share."""
    wait = Wait(look, want, **options)
    while not wait.done():
        await asyncio.sleep(POLL)
