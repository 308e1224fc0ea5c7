"""Ingest leadership: which one process on a database runs the ingest side.

Any process on the file (``serve``, ``mcp``) can consume the adapters,
prune, and receive webhooks; exactly one does at a time, the **leader**. It
holds a lease in the database (the one row of ``ingest_leader``): renewed
every RENEW_SECONDS, gone LEASE_SECONDS after its last renewal, released at
once on a clean exit. A standby takes over when the lease is gone, or at
once when the leader's process is seen dead on this host (kill -9 needs no
wait). Each change of leader raises the **fence**; every batch a consumer
stores checks, in its own transaction, that its fence is still the leader's
(``check``), so a leader that was deposed while it stalled stores nothing
more, and its un-acked messages stay with the broker for the new leader.
With the lead, and again at each renewal, the leader says which of the
environment variables the sources name (secrets, broker URLs) it has set:
names only, never a value, for `doctor` run from a shell without them.

Why a lease row and not an OS file lock: the fence has to live in the same
transactions as the batches it guards, which only the database can give,
and a row works the same for any backend of the store (the PostgreSQL one
included); the liveness check of a same-host leader's pid gives the quick
hand-over a file lock would.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .clock import rfc3339
from .errors import StoreFault
from .sources import Source
from .store.interface import Store, Transaction
from .store.queries import Q

LEASE_SECONDS = 6.0  # a leader not renewed for this long is gone
RENEW_SECONDS = 1.0  # how often the leader renews, and a standby looks
MEMBER_SECONDS = 5.0  # how often a standby says it is there; gone after three times this
KINDS = ("serve", "mcp")


class NotLeader(StoreFault):
    """This process no longer leads ingest: nothing was stored, nothing may be acked."""

    code = "not_leader"


@dataclass(frozen=True)
class Candidate:
    """A process that may lead: a token of its own, its pid, host and kind."""

    holder: str
    pid: int
    host: str
    kind: str

    @classmethod
    def this_process(cls, kind: str) -> Candidate:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        return cls(secrets.token_hex(8), os.getpid(), socket.gethostname(), kind)


@dataclass(frozen=True)
class Leader:
    """The leader's row, as it was read."""

    fence: int
    holder: str
    pid: int
    host: str
    kind: str
    http: str | None
    since: int
    renewed_at: int
    expires_at: int
    handover_to: str | None
    env: Mapping[str, bool]  # the sources' environment variables it has looked at, and whether each is set

    @classmethod
    def from_row(cls, row: Any) -> Leader:
        return cls(
            row["fence"], row["holder"], row["pid"], row["host"], row["kind"], row["http"], row["since"],
            row["renewed_at"], row["expires_at"], row["handover_to"], _env_of(row["env"]),
        )  # fmt: skip

    def has(self, var: str) -> bool | None:
        """Whether the leader has ``var`` set; None when it has not looked (no source named it at its last renewal)."""
        return self.env.get(var)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "host": self.host,
            "kind": self.kind,
            "http": self.http,
            "since": rfc3339(self.since),
            "renewed_at": rfc3339(self.renewed_at),
            "expires_at": rfc3339(self.expires_at),
            "fence": self.fence,
        }


@dataclass(frozen=True)
class Member:
    pid: int
    host: str
    kind: str
    seen_at: int

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "host": self.host, "kind": self.kind, "seen_at": rfc3339(self.seen_at)}


@dataclass(frozen=True)
class Lease:
    """What a leader holds: the fence its batches are checked against."""

    fence: int
    holder: str


def pid_alive(pid: int) -> bool:
    """Whether a process of this pid exists on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _env_seen(tx: Transaction, environ: Mapping[str, str] | None) -> str:
    """JSON {NAME: set?} for each environment variable the sources name (secrets, broker URLs), as this
    process sees it: `doctor`, run from a shell without them, asks the leader. Names only, never a value."""
    environ = os.environ if environ is None else environ
    names = {name for row in tx.all(Q.list_sources, {"family": None}) for name in Source.from_row(row).env_names()}
    return json.dumps({name: bool(environ.get(name)) for name in sorted(names)})


def _env_of(text: Any) -> dict[str, bool]:
    try:
        value = json.loads(text) if text is not None else {}
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in value.items() if isinstance(v, bool)} if isinstance(value, dict) else {}


async def current(store: Store) -> Leader | None:
    """The leader now, or None when nobody leads (no row, or its lease is gone)."""
    row = await store.read_one(Q.get_leader)
    if row is None or row["expires_at"] <= store.clock.now_ms():
        return None
    return Leader.from_row(row)


async def try_lead(
    store: Store,
    me: Candidate,
    *,
    take_over: bool = False,
    http: str | None = None,
    alive: Callable[[int], bool] = pid_alive,
    environ: Mapping[str, str] | None = None,
) -> Lease | None:
    """Lead if nobody does (or the leader's process is gone); None while another leads.

    ``http`` is where this process's receiver already listens: it is recorded
    in the same write as the lead, so `status` never shows this leader
    without it. With the lead goes which of the sources' environment
    variables ``environ`` (this process's environment) has set.

    With ``take_over`` the leader is asked to hand over; it steps down at its
    next renewal and this process takes over then. A read first: a standby
    looking while a leader is alive writes nothing.
    """
    row = await store.read_one(Q.get_leader)
    now = store.clock.now_ms()
    if row is not None and not _free(row, me, now, alive):
        if take_over and row["handover_to"] != me.holder:
            await store.write(lambda tx: tx.run(Q.ask_handover, {"holder": me.holder}))
        return None
    seen = 0 if row is None else row["fence"]

    def body(tx: Transaction) -> Lease | None:
        now = store.clock.now_ms()
        expires_at = now + _ms(LEASE_SECONDS)
        params = {**me.__dict__, "http": http, "seen_fence": seen, "now": now, "expires_at": expires_at,
                  "env": _env_seen(tx, environ)}  # fmt: skip
        taken = tx.one(Q.take_leadership, params)
        if taken is None:
            return None  # another standby was quicker
        tx.run(Q.seen_member, {**me.__dict__, "now": now})
        return Lease(taken["fence"], me.holder)

    return await store.write(body)


def _free(row: Any, me: Candidate, now: int, alive: Callable[[int], bool]) -> bool:
    """Whether ``me`` may take the lead from ``row``: it lapsed, or its process died on this host;
    while a take-over is asked for by another, only once the asker is gone too."""
    asked_by_another = row["handover_to"] is not None and row["handover_to"] != me.holder
    if asked_by_another and row["expires_at"] > now - _ms(LEASE_SECONDS):
        return False
    if row["expires_at"] <= now:
        return True
    return row["host"] == me.host and row["pid"] != me.pid and not alive(row["pid"])


async def renew(store: Store, lease: Lease, environ: Mapping[str, str] | None = None) -> bool:
    """Renew the lease, and say again which of the sources' environment variables ``environ`` has
    (sources come and go while a leader runs); False when it was lost (or a take-over was asked
    for: then it is released)."""

    def body(tx: Transaction) -> bool:
        now = store.clock.now_ms()
        params = {"fence": lease.fence, "holder": lease.holder, "now": now, "expires_at": now + _ms(LEASE_SECONDS)}
        row = tx.one(Q.renew_leadership, {**params, "env": _env_seen(tx, environ)})
        if row is None:
            return False
        if row["handover_to"] is not None and row["handover_to"] != lease.holder:
            tx.run(Q.release_leadership, {"fence": lease.fence, "holder": lease.holder, "now": now})
            return False
        return True

    return await store.write(body)


async def release(store: Store, lease: Lease) -> None:
    """Step down now (a clean exit): a standby takes over at its next look."""
    await store.write(lambda tx: tx.run(Q.release_leadership, {**lease.__dict__, "now": store.clock.now_ms()}))


async def set_http(store: Store, lease: Lease, address: str | None) -> None:
    """Say where the leader's webhook receiver listens (None: it does not), for a
    receiver started only once leading (an `mcp`'s on http.listen)."""
    await store.write(lambda tx: tx.run(Q.set_leader_http, {**lease.__dict__, "http": address}))


def check(tx: Transaction, lease: Lease, now: int) -> None:
    """Inside a batch's transaction: raise NotLeader unless ``lease`` still leads."""
    if tx.one(Q.check_fence, {**lease.__dict__, "now": now}) is None:
        raise NotLeader(f"this process no longer leads ingest (fence {lease.fence}); the batch was not stored")


async def seen(store: Store, me: Candidate) -> None:
    """A standby says it is there (and forgets members long gone)."""
    now = store.clock.now_ms()

    def body(tx: Transaction) -> None:
        tx.run(Q.seen_member, {**me.__dict__, "now": now})
        tx.run(Q.forget_gone_members, {"before": now - _ms(3 * MEMBER_SECONDS)})

    await store.write(body)


async def leave(store: Store, me: Candidate) -> None:
    await store.write(lambda tx: tx.run(Q.forget_member, {"holder": me.holder}))


async def members(store: Store) -> list[Member]:
    """The processes seen lately that could lead (the leader among them)."""
    since = store.clock.now_ms() - _ms(3 * MEMBER_SECONDS)
    return [Member(r["pid"], r["host"], r["kind"], r["seen_at"]) for r in await store.read_all(Q.members, {"since": since})]
