"""Schedules: sources whose events are the ticks of a cron expression.

A schedule is a source of family ``schedule`` (`source add NAME --kind schedule
--cron EXPR`). Each tick is an **event** of type ``tick`` whose external id is
the instant it was due (RFC 3339, UTC), routed by the schedule's rules or to its
default queue like any delivery, so replay, dry-run, retention and the audit
trail apply to ticks unchanged.

The ingest leader fires the ticks (``fire_due``, run by the process module's
loop while it leads; each batch fenced by its lease). A tick fires exactly
once across processes, restarts and leader changes: its external id is its due
instant, so a second firing of it, by another process or after a restart, is a
redelivery and collapses into the first event (the events' and delivery keys'
deduplication). ``sources.last_tick_at`` remembers the newest tick fired, so
that a new leader knows which ticks it missed.

A tick fired within ON_TIME_SECONDS of its due instant is on time, whoever
fires it (a pass that ran late, a standby that took over). Older ones were
missed while nobody led, and the schedule's catch-up says what becomes of them:
``none`` skips them, ``last`` fires the newest one, ``all`` fires each (the
newest MAX_CATCH_UP; the tick after a gap says how many before it did not fire).

Cron expressions are cronsim's (5 fields, or 6 with seconds first), read in the
schedule's IANA time zone: its DST transitions are handled as Debian's cron
handles them (a daily job in the hour that is skipped runs at once; in the hour
that repeats, once).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import takewhile
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from . import leadership, routing, sources
from .clock import rfc3339
from .errors import InvalidArgument
from .events import NewEvent
from .sources import Source
from .store.interface import Store, Transaction
from .store.queries import Q
from .text import first_control
from .todo_model import MAX_JSON_DEPTH, MAX_TITLE_LENGTH, dump_json_depth

log = logging.getLogger("switchboard_local.schedules")

FAMILY = "schedule"
KIND = "schedule"  # what `source add --kind` names it
TRUST_MODE = "schedule"
TICK = "tick"
CATCH_UPS = ("none", "last", "all")
# A tick missed while nobody led fires once when a leader is back: what `anacron` and systemd's
# Persistent= timers do by default.
DEFAULT_CATCH_UP = "last"
DEFAULT_ZONE = "UTC"
MAX_CATCH_UP = 100  # the most missed ticks `all` fires at once (the newest); the rest are dropped, and counted
ON_TIME_SECONDS = 10.0  # a tick fired this late is still on time (a leader's takeover takes up to ~7 s)
MAX_COUNTED = 100_000  # missed ticks counted one by one at most (a per-second schedule asleep for a day)
MAX_NEXT = 1000  # the most next instants `schedule next` shows
POLL_SECONDS = 1.0  # the longest the firing loop waits: a schedule added meanwhile is seen within it


@dataclass(frozen=True)
class Spec:
    """A schedule's timing: its cron expression, zone and catch-up."""

    cron: str
    zone: str
    catch_up: str

    @classmethod
    def of(cls, source: Source) -> Spec:
        """The spec a schedule's config holds; InvalidArgument for one edited into something else."""
        given = (source.config.get("cron"), source.config.get("tz", DEFAULT_ZONE), source.config.get("catch_up", DEFAULT_CATCH_UP))
        if all(isinstance(value, str) for value in given):
            return _checked(*given)  # each pass asks again: the check (a parse, a first instant) once
        return spec(*given)

    @property
    def tzinfo(self) -> ZoneInfo:
        return ZoneInfo(self.zone)

    def instants(self, after_ms: int) -> Iterator[int]:
        """The due instants after ``after_ms`` (strictly), in milliseconds, in order; ends where the
        cron library finds none within 50 years."""
        start = datetime.fromtimestamp(after_ms / 1000, tz=self.tzinfo)
        for due in CronSim(self.cron, start):
            yield round(due.timestamp() * 1000)

    def between(self, after_ms: int, until_ms: int, keep: int) -> tuple[list[int], int]:
        """The newest ``keep`` instants in (after, until], oldest first, and how many older ones
        there are besides (counted up to MAX_COUNTED).

        Found from the end: a window before ``until`` that grows until it holds ``keep`` of
        them, so that a long gap costs only the counting of it.
        """
        if until_ms <= after_ms:
            return [], 0
        if keep == 0:
            return [], self.count(after_ms, until_ms)
        window = 60_000
        while True:
            low = max(after_ms, until_ms - window)
            found = list(takewhile(lambda t: t <= until_ms, self.instants(low)))
            if len(found) >= keep or low == after_ms:
                newest = found[-keep:]
                older = len(found) - len(newest)
                if low > after_ms:
                    older += self.count(after_ms, low)
                return newest, min(older, MAX_COUNTED)
            window *= 16

    def count(self, after_ms: int, until_ms: int) -> int:
        """How many instants in (after, until], up to MAX_COUNTED."""
        counted = 0
        for due in self.instants(after_ms):
            if due > until_ms or counted >= MAX_COUNTED:
                break
            counted += 1
        return counted

    def next(self, after_ms: int, count: int) -> list[int]:
        instants = self.instants(after_ms)
        return [due for _, due in zip(range(count), instants)]

    def local(self, ms: int) -> str:
        """An instant in the schedule's zone, ISO 8601 with its offset (``2026-03-29T03:00:00+02:00``)."""
        return datetime.fromtimestamp(ms / 1000, tz=self.tzinfo).isoformat(timespec="seconds")


def spec(cron: Any, zone: Any, catch_up: Any) -> Spec:
    """A spec, checked: a cron expression that ever fires, a known IANA zone, a catch-up mode."""
    if not isinstance(cron, str) or not cron.strip():
        raise InvalidArgument("--cron must be a cron expression: 5 fields, or 6 with seconds first")
    if (found := first_control(cron)) is not None:
        raise InvalidArgument(f"--cron holds a control character ({found})")
    if not isinstance(zone, str) or not zone:
        raise InvalidArgument("--tz must name a time zone (an IANA name such as Europe/Berlin, or UTC)")
    try:
        tzinfo = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(f"--tz {zone!r} is not a time zone this system knows (an IANA name such as "
                              "Europe/Berlin, or UTC)") from None  # fmt: skip
    if catch_up not in CATCH_UPS:
        raise InvalidArgument(f"--catch-up must be one of {', '.join(CATCH_UPS)}, got {catch_up!r}")
    cron = " ".join(cron.split())
    try:
        first = next(CronSim(cron, datetime(2026, 1, 1, tzinfo=tzinfo)), None)
    except CronSimError as exc:
        raise InvalidArgument(f"--cron {cron!r} is not a cron expression: {exc} "
                              "(5 fields, or 6 with seconds first)") from None  # fmt: skip
    if first is None:
        raise InvalidArgument(f"--cron {cron!r} never fires (no instant matches it within 50 years)")
    return Spec(cron, zone, catch_up)


@functools.lru_cache(maxsize=1024)
def _checked(cron: str, zone: str, catch_up: str) -> Spec:
    return spec(cron, zone, catch_up)


def configure(
    *,
    cron: Any,
    tz: str | None = None,
    queue: str | None = None,
    title: str | None = None,
    payload: Any = None,
    catch_up: str | None = None,
) -> dict[str, Any]:
    """`source add --kind schedule`'s options, checked, as the config stored with the schedule."""
    checked = spec(cron, DEFAULT_ZONE if tz is None else tz, DEFAULT_CATCH_UP if catch_up is None else catch_up)
    config: dict[str, Any] = {"cron": checked.cron, "tz": checked.zone, "catch_up": checked.catch_up}
    if queue is not None:
        sources.require_queue("--queue", queue)
        config["queue"] = queue
    if title is not None:
        if not isinstance(title, str) or not title.strip() or len(title) > MAX_TITLE_LENGTH:
            raise InvalidArgument(f"--title must be 1-{MAX_TITLE_LENGTH} characters")
        if (found := first_control(title)) is not None:
            raise InvalidArgument(f"--title holds a control character ({found})")
        config["title"] = title
    if payload is not None:
        _, depth = dump_json_depth("--payload", payload)  # JSON a todo's payload can hold, or InvalidArgument
        if depth > MAX_JSON_DEPTH - 3:  # it is nested in the tick's body, and that in its todos' payloads
            raise InvalidArgument(f"--payload is nested deeper than {MAX_JSON_DEPTH - 3} levels")
        config["payload"] = payload
    return config


async def add(store: Store, name: str, *, by: str | None = None, **options: Any) -> Source:
    """Add a schedule (``configure``'s options); its first tick is the first instant after now."""
    config = configure(**options)
    return await sources.add(store, name, family=FAMILY, kind=KIND, trust_mode=TRUST_MODE, config=config, by=by)


def start_of(source: Source) -> int:
    """Ticks due after this instant are the schedule's to fire: after its newest fired tick,
    and after it was added or last enabled (ticks while it was disabled are not missed)."""
    return max(source.last_tick_at or 0, source.updated_at)


def describe(source: Source, now: int, count: int = 3) -> dict[str, Any]:
    """What `source show`, `status` and the dashboard say of a schedule: its timing, its last
    tick and the next ``count`` due instants (UTC and in its zone). Never fails: a config
    edited by hand into something unusable says why instead."""
    shown: dict[str, Any] = {
        "cron": source.config.get("cron"),
        "tz": source.config.get("tz", DEFAULT_ZONE),
        "catch_up": source.config.get("catch_up", DEFAULT_CATCH_UP),
        "queue": routing.default_queue_of(source),
        "title": source.config.get("title"),
        "payload": source.config.get("payload"),
        "last_tick": rfc3339(source.last_tick_at),
        "last_tick_local": None,
        "next": [],
        "problem": None,
    }
    try:
        timing = Spec.of(source)
        shown["last_tick_local"] = None if source.last_tick_at is None else timing.local(source.last_tick_at)
        shown["next"] = [{"due": rfc3339(t), "local": timing.local(t)} for t in timing.next(max(now, start_of(source)), count)]
    except InvalidArgument as exc:
        shown["problem"] = str(exc)
    return shown


def next_due(source: Source, now: int, count: int) -> list[int]:
    """The next ``count`` instants the schedule is due after now (milliseconds)."""
    if not 1 <= count <= MAX_NEXT:
        raise InvalidArgument(f"--count must be between 1 and {MAX_NEXT}, got {count}")
    return Spec.of(source).next(max(now, start_of(source)), count)


@dataclass(frozen=True)
class Fired:
    """One schedule's share of a pass: the ticks it fired (due instants), how many of them were
    new events (the rest had fired before: a redelivery), and the missed ticks that did not fire."""

    schedule: str
    ticks: tuple[int, ...]
    new: int
    missed: int


@dataclass(frozen=True)
class Pass:
    fired: tuple[Fired, ...]
    next_due: int | None  # the earliest instant any enabled schedule is due next (None: none is)


async def fire_due(store: Store, *, lease: leadership.Lease | None = None) -> Pass:
    """Fire every enabled schedule's due ticks, as of the store's clock; what the leader runs.

    Each schedule's ticks are stored in one transaction fenced by ``lease`` (None: unfenced),
    then its newest tick is remembered (fenced too). A tick already fired collapses into its
    event. A schedule whose config cannot be read (edited by hand) is skipped and its health
    says why; a fault of the store is raised (nothing of that schedule was stored).
    """
    now = store.clock.now_ms()
    fired: list[Fired] = []
    upcoming: list[int] = []
    for source in await sources.list_sources(store, family=FAMILY):
        if not source.enabled:
            continue
        try:
            timing = Spec.of(source)
        except InvalidArgument as exc:
            if source.last_error != (said := f"cannot fire: {exc}"):  # said once, not written at every pass
                await sources.record_health(store, source.name, error=said)
            continue
        first = _first_after(timing, start_of(source))
        if first is not None and first > now:  # nothing due: the usual pass, without asking the cron library
            upcoming.append(first)
            continue
        done = await _fire(store, source, timing, now, lease)
        if done is not None:
            fired.append(done)
        upcoming.extend(timing.next(max(now, start_of(source)), 1))
    return Pass(tuple(fired), min(upcoming, default=None))


@functools.lru_cache(maxsize=4096)
def _first_after(timing: Spec, start: int) -> int | None:
    """The first instant due after ``start``: asked at every pass, and the same until a tick fires."""
    return next(timing.instants(start), None)


def plan(timing: Spec, start: int, now: int) -> tuple[list[int], int]:
    """The ticks to fire now (oldest first) and how many missed ones do not fire."""
    on_time_from = max(start, now - round(ON_TIME_SECONDS * 1000))
    on_time = list(takewhile(lambda t: t <= now, timing.instants(on_time_from)))
    keep = {"none": 0, "last": 1, "all": max(0, MAX_CATCH_UP - len(on_time))}[timing.catch_up]
    missed, dropped = timing.between(start, on_time_from, keep)
    return missed + on_time, dropped


async def _fire(store: Store, source: Source, timing: Spec, now: int, lease: leadership.Lease | None) -> Fired | None:
    start = start_of(source)
    ticks, dropped = plan(timing, start, now)
    if not ticks and not dropped:
        return None
    if dropped:
        how = "skipped" if timing.catch_up == "none" else "dropped"
        log.warning("schedule %s: %s %d missed tick(s) (catch-up %s)", source.name, how, dropped, timing.catch_up)
    events = [_event(source, timing, due, now, dropped if n == 0 else 0, lease) for n, due in enumerate(ticks)]
    guard = None if lease is None else (lambda tx, at: leadership.check(tx, lease, at))
    answers = await routing.accept(store, source, events, guard=guard) if events else []
    failed = [a for a in answers if isinstance(a, Exception)]
    for event, answer in zip(events, answers):
        if not isinstance(answer, Exception) and answer.unroutable is not None:
            log.error("schedule %s: tick %s kept without todos: %s", source.name, event.external_id, answer.unroutable)
    if failed:  # not remembered: the next pass fires them again (what was stored collapses)
        log.error("schedule %s: %d tick(s) could not be stored: %s", source.name, len(failed), failed[0])
    else:
        newest = max(ticks) if ticks else timing.between(start, now, 1)[0][-1]

        def remember(tx: Transaction) -> None:
            if lease is not None:
                leadership.check(tx, lease, store.clock.now_ms())
            tx.run(Q.advance_schedule, {"name": source.name, "due": newest})

        await store.write(remember)
    new = sum(1 for a in answers if not isinstance(a, Exception) and not a.duplicate)
    return Fired(source.name, tuple(ticks), new, dropped)


def _event(
    source: Source, timing: Spec, due: int, now: int, missed_before: int, lease: leadership.Lease | None
) -> NewEvent:
    body: dict[str, Any] = {
        "schedule": source.name,
        "due": rfc3339(due),
        "due_local": timing.local(due),
        "tz": timing.zone,
        # Fired after its time had passed (a catch-up of a tick missed while nobody led).
        "late": now - due > round(ON_TIME_SECONDS * 1000),
    }
    if missed_before:
        body["missed_before"] = missed_before  # missed ticks before this one that did not fire
    if "title" in source.config:
        body["title"] = source.config["title"]
    body["payload"] = source.config.get("payload")
    fence = "" if lease is None else f" (fence {lease.fence})"
    return NewEvent(
        source=source.name,
        family=FAMILY,
        type=TICK,
        external_id=rfc3339(due),  # type: ignore[arg-type]  # never None for an int
        trust_mode=TRUST_MODE,
        verified=True,
        verify_detail=f"fired by the ingest leader{fence}: {timing.cron} in {timing.zone}",
        content_type="application/json",
        body=json.dumps(body, ensure_ascii=False).encode("utf-8"),
    )

