"""From one event to its todos.

Every matching rule of the event's source adds one todo (fan-out) until a
``stop`` or ``drop`` rule matches; when no rule matches, one todo goes to the
source's default queue (its ``queue`` setting, else its name). Rules are read
inside the ingest transaction, so each delivery sees the rules as they are at
its own commit.

Each todo's idempotency key is ``event:{source}:{delivery id}:rule:{rule id}``
(or ``:default``): a redelivery collapses into the same todos, fan-out todos
never collide, and no direct producer can take the key first (``event:`` is
theirs to derive alone). A todo's payload carries the event's context and its
parsed body (left out when it would pass limits.max_payload); the raw bytes
stay on the event.

A ``chain`` rule's todo waits for the todos the event's earlier rules made: it
names them by their keys (``after_keys``), and the ingest transaction, which
made them, gives it their ids (``dependencies.made_before``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qsl

from . import audit, settings, sources
from .errors import InvalidArgument, NotFound, StoreFault, Unavailable
from .events import Event, Guard, Ingested, NewEvent, get_event, ingest_many
from .rules import Rule, lookup, render, rules_of
from .sources import Source
from .store.interface import Store, Transaction
from .store.queries import Q
from .text import has_controls, replace_controls
from .todo_model import DERIVED_KEY_PREFIX, MAX_JSON_DEPTH, MAX_TITLE_LENGTH, NewTodo, dump_json, dump_json_depth
from .todos import insert_id
from .todos.dependencies import made_before


@dataclass(frozen=True)
class Delivery:
    """What routing needs to know of an event, stored or not yet."""

    source: str
    type: str
    external_id: str
    verified: bool
    payload: Any
    event_id: int | None = None
    family: str = "webhook"
    # The payload's JSON text as parse_payload checked it, when it may be nested
    # in a todo's payload as it is (None: it may not, or it was not made).
    payload_json: str | None = None

    @property
    def key_base(self) -> str:
        """Idempotency keys are namespaced by source, in one form for every family and broker
        (``event:{source}:{delivery id}``; a source's name holds no ':', so no two sources'
        keys can meet). Keys of queue sources stored before schema version 10 had the
        broker's name before the source; that migration rewrote them to this form.

        A delivery id too long for a key, or holding control characters, is
        replaced by its hash, so that a strange id can never make its delivery
        unstorable.
        """
        prefix = DERIVED_KEY_PREFIX
        delivery = self.external_id
        if len(delivery) > 200 or has_controls(delivery):  # a key is a name: one plain line
            delivery = "sha256:" + hashlib.sha256(delivery.encode()).hexdigest()
        return f"{prefix}{self.source}:{delivery}"


def parse_payload(body: bytes, content_type: str | None) -> Any:
    """The body as JSON when it is JSON, as a form when it is a form, else None.

    A form's ``payload`` field (GitHub's form deliveries, Slack's interactions)
    is decoded as the JSON it carries.
    """
    return parse_payload_json(body, content_type)[0]


def parse_payload_json(body: bytes, content_type: str | None) -> tuple[Any, str | None]:
    """``parse_payload``'s value, and its JSON text when that was made checking it
    and the value may be nested in a todo's payload (``Delivery.payload_json``)."""
    body = bytes(body)  # a memoryview, which NewEvent takes too, as its bytes (bytes themselves are not copied)
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        try:
            form = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            return None, None
        if "payload" in form:
            decoded, text = _strict_json(form["payload"])
            if decoded is not _NOT_JSON:
                return decoded, text
        return form, None
    decoded, text = _strict_json(body)
    return (None, None) if decoded is _NOT_JSON else (decoded, text)


_NOT_JSON = object()


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


# json.loads with an option would make a new decoder at every call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _strict_json(text: str | bytes) -> tuple[Any, str | None]:
    """Standard JSON that a todo's payload can hold (see todo_model.dump_json),
    with its text when it is shallow enough to nest; anything else (_NOT_JSON)
    is kept as the event's raw bytes alone."""
    try:
        if isinstance(text, bytes):  # as json.loads reads bytes: UTF-8, -16 or -32, found from the first bytes
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        value = _DECODER.decode(text)
        dumped, depth = dump_json_depth("payload", value)
    except (ValueError, RecursionError, InvalidArgument):  # 1e999 parses as inf: dump_json refuses it
        return _NOT_JSON, None
    return value, dumped if depth < MAX_JSON_DEPTH else None


def plan(
    rules: Sequence[Rule],
    delivery: Delivery,
    default_queue: str,
    *,
    replay: bool = False,
    max_payload: int = settings.MAX_PAYLOAD.default,
) -> list[NewTodo]:
    """The todos one delivery produces under these rules (pure: no I/O)."""
    todos: list[NewTodo] = []
    matched = False
    for rule in rules:
        if not rule.matches(delivery.type, delivery.payload):
            continue
        matched = True
        if rule.action == "drop":
            return todos
        todo = _todo(delivery, rule, rule.queue or default_queue, replay, max_payload)
        if rule.chain and todos:  # it waits for the todos made before it (events.py gives their ids)
            keys = tuple(t.idempotency_key for t in todos if t.idempotency_key)
            todo = replace(todo, after_keys=keys, checked_json=todo.payload_json)
        todos.append(todo)
        if rule.stop:
            return todos
    if not matched:
        todos.append(_todo(delivery, None, default_queue, replay, max_payload))
    return todos


def _todo(delivery: Delivery, rule: Rule | None, queue: str, replay: bool, max_payload: int) -> NewTodo:
    specials = {"@source": delivery.source, "@type": delivery.type, "@id": delivery.external_id}
    title = ""
    if rule is not None and rule.title:
        title = render(rule.title, delivery.payload, specials)[:MAX_TITLE_LENGTH]
    if not title.strip():
        title = _default_title(delivery)
    key = f"{delivery.key_base}:" + (f"rule:{rule.id}" if rule else "default")
    context = {
        "source": delivery.source,
        "type": delivery.type,
        "delivery_id": delivery.external_id,
        "event_id": delivery.event_id,
        "verified": delivery.verified,
        "replay": replay,
    }
    fields = {
        "queue": queue,
        # A sender's text may hold control characters; a title or kind may not
        # (whitespace first becomes the one space a title keeps).
        "title": replace_controls(" ".join(title.split())),
        "kind": replace_controls(delivery.type.strip()[:512]) or None,
        "assignee": rule.assignee if rule else None,
        "priority": rule.priority if rule else 0,
        "max_attempts": rule.max_attempts if rule else NewTodo.max_attempts,
        "idempotency_key": key + (":replay" if replay else ""),
    }
    payload = {**context, "body": delivery.payload}
    if delivery.payload_json is None:
        todo = NewTodo(**fields, payload=payload)
    else:  # the body's text as parse_payload made and checked it: spliced in, not made again
        text = dump_json("payload", context)[:-1] + ',"body":' + delivery.payload_json + "}"
        todo = NewTodo(**fields, payload=payload, checked_json=text)
    if len(todo.payload_json.encode("utf-8")) > max_payload:
        # Too big to hand an agent whole: the todo says where the body is instead.
        todo = NewTodo(**fields, payload={**context, "body": None, "body_omitted": True})
    return todo


def _default_title(delivery: Delivery) -> str:
    if delivery.family == "queue":  # the type is the stream or list: name the message instead
        return f"{delivery.source}: message {delivery.external_id[:19]}"
    if delivery.family == "schedule":  # a tick (core/schedules.py): the schedule's --title, else when it was due
        tick = delivery.payload if isinstance(delivery.payload, dict) else {}
        title = tick.get("title")
        if isinstance(title, str) and title.strip():
            return title[:MAX_TITLE_LENGTH]
        return f"{delivery.source}: tick {tick.get('due_local') or delivery.external_id}"[:MAX_TITLE_LENGTH]
    found, action = lookup(delivery.payload, "action")
    suffix = f" {action}" if found and isinstance(action, str) else ""
    return f"{delivery.source}: {delivery.type}{suffix}"[:MAX_TITLE_LENGTH]


def _default_queue(tx: Transaction, source: str) -> str:
    row = tx.one(Q.get_source, {"name": source})
    return default_queue_of(Source.from_row(row)) if row is not None else source


def default_queue_of(source: Source) -> str:
    """Where a source's deliveries go when no rule routes them: its ``queue``, else its name."""
    return source.config.get("queue") or source.name


def _routes(tx: Transaction, source: str) -> tuple[list[Rule], str]:
    """A source's rules (parsed) and default queue, as of this transaction.

    Kept in the store's cache under the sources generation, read once per
    transaction (tx.memo): rules and sources are read and parsed again only
    after one changed (sources.changed), in whichever process.
    """
    now = tx.memo.get(_GENERATION)
    if now is None:
        now = tx.memo[_GENERATION] = sources.generation(tx)
    cached = tx.cache.get(("routes", source))
    if cached is None or cached[0] != now:
        cached = tx.cache[("routes", source)] = (now, rules_of(tx, source), _default_queue(tx, source))
    return cached[1], cached[2]


_GENERATION = ("sources", "generation")


def _route_in(tx: Transaction, delivery: Delivery, *, replay: bool) -> list[NewTodo]:
    rules, default_queue = _routes(tx, delivery.source)
    return plan(
        rules,
        delivery,
        default_queue,
        replay=replay,
        max_payload=settings.value_in(tx, settings.MAX_PAYLOAD),
    )


async def deliver(store: Store, event: NewEvent) -> Ingested:
    """The back half with routing: store the event and the todos its rules make."""
    (result,) = await deliver_many(store, [event])
    return result


# The source rows a producer already holds (one, or several for a batch of the receiver's requests).
Held = Source | Sequence[Source] | None


async def deliver_many(
    store: Store, events: Sequence[NewEvent], *, source: Held = None, guard: Guard | None = None
) -> list[Ingested]:
    """``deliver`` for a batch, in one transaction: all of it, or none.

    ``source`` is the row (or rows) the producer already holds: an event of
    one takes its default queue from there instead of it being read again.
    Rules are read and parsed once per change of sources and rules (``_routes``).
    """
    payloads = [parse_payload_json(e.body, e.content_type) for e in events]
    held = {s.name: s for s in ([] if source is None else [source] if isinstance(source, Source) else source)}

    def derive_for(payload: Any, text: str | None):  # noqa: ANN202
        def derive(tx: Transaction, event_id: int, new: NewEvent) -> list[NewTodo]:
            rules, default_queue = _routes(tx, new.source)
            if new.source in held:
                default_queue = default_queue_of(held[new.source])
            delivery = Delivery(new.source, new.type, new.external_id, new.verified, payload, event_id, new.family, text)
            return plan(rules, delivery, default_queue, max_payload=settings.value_in(tx, settings.MAX_PAYLOAD))

        return derive

    return await ingest_many(store, [(e, derive_for(*p)) for e, p in zip(events, payloads)], guard=guard)


async def accept(
    store: Store, source: Source | Sequence[Source], events: Sequence[NewEvent], *, guard: Guard | None = None
) -> list[Ingested | Exception]:
    """The back half every producer ends in: route each delivery, or keep it.

    ``source`` is the producer's source row (or the rows of every event's
    source, for the receiver's batches: see ``Intake``).

    The batch is delivered in one transaction. Should routing refuse it (a
    rule that cannot render, a payload that cannot be a todo), each delivery
    is tried on its own, and one that still cannot be routed is kept as a
    bare event without todos (``unroutable`` says why; replay it once the
    cause is fixed), so that a delivery which will never route cannot block
    the ones behind it or make its producer retry forever. A delivery that
    cannot be stored even so comes back as its exception, in its place: the
    producer must not acknowledge it. A fault of the database itself
    (``StoreFault``) is raised: nothing was stored, the producer retries.
    ``guard`` checks each transaction first (a consumer's fence: ``NotLeader``
    is a ``StoreFault``).
    """
    try:
        return list(await deliver_many(store, events, source=source, guard=guard))
    except StoreFault:
        raise
    except Exception:  # routing refused the batch: each delivery on its own
        return [await _accept_alone(store, source, event, guard) for event in events]


async def _accept_alone(store: Store, source: Held, event: NewEvent, guard: Guard | None) -> Ingested | Exception:
    """One delivery of a batch routing refused: routed alone, else kept bare saying why, else its exception."""
    try:
        (routed,) = await deliver_many(store, [event], source=source, guard=guard)
        return routed
    except StoreFault:
        raise
    except Exception as exc:
        reason = exc
    try:
        (kept,) = await ingest_many(store, [(event, [])], guard=guard)
    except StoreFault:
        raise
    except Exception as exc:
        return exc
    return Ingested(kept.event_id, kept.duplicate, kept.todo_ids, f"{type(reason).__name__}: {reason}")


async def replay(
    store: Store, event_id: int, *, queues: Sequence[str] | None = None, by: str | None = None
) -> list[int]:
    """Route a stored event again; never a second event.

    The replay's todos are marked (``"replay": true`` in their payload, a
    ``:replay`` key suffix): a replay whose todos are still live finds them
    instead of adding more. ``queues`` (an agent's scope) keeps the replay to
    those queues, and an event outside it is not found. ``by`` (an operator)
    is recorded in the audit trail, with the todos the replay answered. A chain's
    todo waits for the todos the replay made before it (within ``queues``, when given).
    """

    def body(tx: Transaction) -> list[int]:
        row = tx.one(Q.get_event, {"id": event_id})
        in_scope = queues is None or tx.one(Q.event_in_scope, {"id": event_id, "queues": json.dumps(list(queues))})
        if row is None or not in_scope:
            raise NotFound(f"event {event_id} does not exist")
        now = store.clock.now_ms()
        planned = _route_in(tx, _delivery_of(Event.from_row(row)), replay=True)
        by_key: dict[str, int] = {}  # a chain's todo waits for the todos this replay made before it
        for todo in planned:
            if queues is None or todo.queue in queues:
                chained = made_before(todo, by_key)
                by_key[todo.idempotency_key] = insert_id(tx, chained, now=now, event_id=event_id)  # type: ignore[index]
        made = list(by_key.values())
        if by is not None:
            audit.record(tx, now, by=by, action="event.replay", subject=event_id, todos=made)
        return made

    return await store.write(body)


def _delivery_of(event: Event) -> Delivery:
    return Delivery(
        source=event.source,
        type=event.type,
        external_id=event.external_id,
        verified=event.verified,
        payload=parse_payload(event.body, event.content_type),
        event_id=event.id,
        family=event.family,
    )


async def dry_run(
    store: Store, *, event_id: int | None = None, source: str | None = None, type: str = "webhook", payload: Any = None
) -> list[NewTodo]:
    """The todos a stored event, or a payload, would produce; writes nothing."""
    if event_id is not None:
        delivery = _delivery_of(await get_event(store, event_id))
    elif source is not None:
        delivery = Delivery(source, type, "dry-run", True, payload)
    else:
        raise InvalidArgument("give an event id, or a source and a payload")

    # What _route_in reads in a transaction, read one statement at a time.
    row = await store.read_one(Q.get_source, {"name": delivery.source})
    if row is None and event_id is None:
        raise NotFound(f"no source named {delivery.source!r}")
    rules = [Rule.from_row(r) for r in await store.read_all(Q.rules_of_source, {"source": delivery.source})]
    default_queue = default_queue_of(Source.from_row(row)) if row is not None else delivery.source
    max_payload = (await settings.get(store, settings.MAX_PAYLOAD.name)).value
    return plan(rules, delivery, default_queue, max_payload=max_payload)


class Intake:
    """Deliveries from many callers at once (the receiver's requests), stored in batches.

    ``accept`` answers one delivery as ``accept`` would (its ``Ingested``, or
    the exception that kept it from being stored, a ``StoreFault`` included),
    and only once it is committed. While a batch is being stored, the
    deliveries that arrive wait; the next batch takes all of them (up to
    ``max_batch``) in one transaction, with executemany: a lone delivery is
    stored at once, a crowd shares commits and statements. A delivery that
    cannot be routed does not hold back the others (``accept``'s fallback).
    """

    def __init__(self, store: Store, *, max_batch: int = 256) -> None:
        self.store = store
        self.max_batch = max_batch
        self._waiting: list[tuple[Source, NewEvent, asyncio.Future[Ingested | Exception]]] = []
        self._task: asyncio.Task[None] | None = None

    async def accept(self, source: Source, event: NewEvent) -> Ingested | Exception:
        waiter: asyncio.Future[Ingested | Exception] = asyncio.get_running_loop().create_future()
        self._waiting.append((source, event, waiter))
        if self._task is None:
            self._task = asyncio.create_task(self._store_waiting())
        # A caller that goes away leaves its delivery in the batch: stored, or not, all the same.
        return await asyncio.shield(waiter)

    async def _store_waiting(self) -> None:
        try:
            while self._waiting:
                # The batch stays first in line until it is answered (deliveries arriving meanwhile queue behind it).
                batch = self._waiting[: self.max_batch]
                held = list({source.name: source for source, _, _ in batch}.values())
                try:
                    answers = await accept(self.store, held, [event for _, event, _ in batch])
                except Exception as exc:  # a fault of the store: nothing of the batch was stored
                    answers = [exc] * len(batch)
                del self._waiting[: len(batch)]
                for (_, _, waiter), answer in zip(batch, answers):
                    if not waiter.done():
                        waiter.set_result(answer)
        finally:
            self._task = None
            # Cancelled (the process stops): nobody may be left waiting, nor told "stored".
            for _, _, waiter in self._waiting:
                if not waiter.done():
                    waiter.set_exception(Unavailable("the process is stopping; the delivery may not be stored"))
            self._waiting.clear()
