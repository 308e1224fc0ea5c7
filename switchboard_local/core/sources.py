"""Sources: the configured producers of events, and their health.

Webhook sources (family ``webhook``), adapters (family ``queue``, each
drained by a broker consumer: core/adapters.py) and schedules (family
``schedule``, whose ticks the ingest leader fires: core/schedules.py) are rows
of one table; an event's ``source`` is a source's name. Secrets are
kept as references (an environment variable, a file) or, when the user gives
a value, in this owner-only database; they are never shown back.

Showing a row never fails: a row written by an older version, or edited by
hand, is still listed, shown and removable, whatever its config holds.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from secrets import token_hex
from typing import Any

from . import audit
from .clock import rfc3339
from .errors import Conflict, InvalidArgument, NotFound
from .store.interface import Store, Transaction
from .store.queries import Q
from .text import first_control
from .todo_model import require_name

FAMILIES = ("webhook", "queue", "schedule")
MAX_ACTIVE_SECRETS = 2
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# What people call a source of each family: the CLI's nouns (`source` for
# webhooks and schedules; `adapter` for a queue source, after the consumer that drains it).
NOUNS = {"webhook": "webhook source", "queue": "adapter", "schedule": "schedule"}


@dataclass(frozen=True)
class Source:
    name: str
    family: str
    kind: str
    trust_mode: str
    enabled: bool
    config: dict[str, Any]
    secrets: list[dict[str, str]]
    created_at: int
    updated_at: int
    last_poll_at: int | None
    last_error: str | None
    consecutive_failures: int
    messages_stored: int
    last_tick_at: int | None = None  # a schedule's newest fired tick (its due instant)

    @classmethod
    def from_row(cls, row: Any) -> Source:
        return cls(
            name=row["name"],
            family=row["family"],
            kind=row["kind"],
            trust_mode=row["trust_mode"],
            enabled=bool(row["enabled"]),
            config=_json_of(row["config"], dict),
            secrets=[ref for ref in _json_of(row["secrets"], list) if isinstance(ref, dict)],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            last_poll_at=row["last_poll_at"],
            last_error=row["last_error"],
            consecutive_failures=row["consecutive_failures"],
            messages_stored=row["messages_stored"],
            last_tick_at=row["last_tick_at"],
        )

    def env_names(self) -> list[str]:
        """The environment variables this source is read with: its secrets' or its broker URL's."""
        names = [ref["env"] for ref in self.secrets if isinstance(ref.get("env"), str)]
        if isinstance(self.config.get("url_env"), str):  # the URL of an adapter's broker (core/adapters.py)
            names.append(self.config["url_env"])
        return names

    def to_dict(self) -> dict[str, Any]:
        """What may be shown: secrets as masked references, never values."""
        shown = {
            "name": self.name,
            "family": self.family,
            "kind": self.kind,
            "trust_mode": self.trust_mode,
            "enabled": self.enabled,
            "config": {k: masked_url(v) if _is_url_key(k) and isinstance(v, str) else v for k, v in self.config.items()},
            "secrets": [mask_secret(ref) for ref in self.secrets],
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
            "last_poll_at": rfc3339(self.last_poll_at),
            "last_error": self.last_error,
            "consecutive_failures": self.consecutive_failures,
            "messages_stored": self.messages_stored,
        }
        if self.family == "schedule":
            shown["last_tick_at"] = rfc3339(self.last_tick_at)
        return shown


def secret_ref(*, env: str | None = None, file: str | None = None, value: str | None = None) -> dict[str, str]:
    """Exactly one of an environment variable name, a file path, or a value."""
    given = {k: v for k, v in {"env": env, "file": file, "value": value}.items() if v is not None}
    if len(given) != 1:
        raise InvalidArgument("give exactly one secret: an environment variable, a file, or a value")
    ((kind, v),) = given.items()
    if not v:
        raise InvalidArgument(f"the secret {kind} must not be empty")
    return {kind: v}


def _json_of(text: Any, kind: type) -> Any:
    """A JSON column as ``kind``, or an empty one when the row holds something else."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return kind()
    return value if isinstance(value, kind) else kind()


def _is_url_key(key: str) -> bool:
    return key == "url" or key.endswith("_url")


def masked_url(text: str) -> str:
    """A URL with its password or token replaced (anything else unchanged): safe to show and log.

    Plain string work, no URL parser: it must not fail on a malformed URL (a bad
    port, a broken IPv6 literal), since an error would hide the row. Everything
    before the last ``@`` counts as user and password, so a password holding an
    unescaped ``/``, ``?`` or ``#`` is masked too (at worst a little more is
    hidden). A user part without a password may be a token (``nats://TOKEN@host``):
    it is masked whole (a plain user name with it). A password given in the query
    (``?password=``, as unix:// URLs take it) is masked as well.
    """
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    userinfo, at, tail = rest.rpartition("@")
    # A lone token ends the authority: an '@' after a '/', '?' or '#' without a ':' before it is not one.
    if not at or not userinfo or (":" not in userinfo and any(c in userinfo for c in "/?#")):
        userinfo, tail = "", rest
    if not userinfo:
        head = f"{scheme}://"
    elif ":" in userinfo:
        head = f"{scheme}://{userinfo.split(':', 1)[0]}:****@"
    else:
        head = f"{scheme}://****@"
    path, qmark, query = tail.partition("?")
    if qmark:
        query, hash_, fragment = query.partition("#")
        pairs = query.split("&")
        masked = [p.split("=", 1)[0] + "=****" if p.split("=", 1)[0] == "password" else p for p in pairs]
        tail = f"{path}?{'&'.join(masked)}{hash_}{fragment}"
    return head + tail


def mask_secret(ref: dict[str, str]) -> str:
    if "env" in ref:
        return f"env:{ref['env']}"
    if "file" in ref:
        return f"file:{ref['file']}"
    return "value:********"


def noun(family: str) -> str:
    return NOUNS.get(family, "adapter")


def a_noun(family: str) -> str:
    word = noun(family)
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def require_queue(option: str, value: str) -> None:
    """A source's default queue: a queue name todos can be created on."""
    require_name(option, value)
    if (found := first_control(value)) is not None:  # the name is shown in lists and logs
        raise InvalidArgument(f"{option} holds a control character ({found})")


# Names no source may take: the audit trail's events come from 'operator'.
RESERVED_NAMES = {audit.OPERATOR: "the audit trail's events come from it"}


def _require_name(name: str) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidArgument(
            f"the name {name!r} must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if name.lower() in RESERVED_NAMES:
        raise InvalidArgument(f"the name {name!r} is reserved ({RESERVED_NAMES[name.lower()]})")


async def add(
    store: Store,
    name: str,
    *,
    family: str,
    kind: str,
    trust_mode: str,
    config: dict[str, Any],
    secrets: list[dict[str, str]] = (),  # type: ignore[assignment]
    by: str | None = None,
) -> Source:
    """Register a producer; ``by`` (an operator) is recorded in the audit trail."""
    _require_name(name)
    if family not in FAMILIES:
        raise InvalidArgument(f"family must be one of {', '.join(FAMILIES)}")
    params = {
        "name": name,
        "family": family,
        "kind": kind,
        "trust_mode": trust_mode,
        "config": json.dumps(config),
        "secrets": json.dumps(list(secrets)),
    }

    def body(tx: Transaction) -> Source:
        row = tx.one(Q.insert_source, {**params, "now": store.clock.now_ms()})
        if row is None:
            taken = tx.one(Q.get_source, {"name": name})["family"]
            if taken == family:
                raise Conflict(f"{a_noun(family)} named {name!r} exists already")
            raise Conflict(f"the name {name!r} is taken by {a_noun(taken)}")
        changed(tx)
        if by is not None:
            audit.record(tx, row["created_at"], by=by, action="source.add", subject=name, family=family, kind=kind)
        return Source.from_row(row)

    return await store.write(body)


# The family (or families) a verb takes a source of: None takes any.
Families = str | tuple[str, ...] | None


def _of(row_family: str, family: Families) -> bool:
    return family is None or row_family in ((family,) if isinstance(family, str) else family)


def _found(row: Any, name: str, family: Families) -> Source:
    """The row as a source of that family; anything else is not found."""
    if row is None or not _of(row["family"], family):
        raise NotFound(_missing(name, family, None if row is None else row["family"]))
    return Source.from_row(row)


def _missing(name: str, family: Families, found: str | None) -> str:
    """Why no source of ``family`` answers to ``name`` (``found``: the family that does)."""
    if family is None:
        wanted = "source or adapter"
    else:
        wanted = " or ".join(noun(f) for f in ((family,) if isinstance(family, str) else family))
    if found is None:
        return f"no {wanted} named {name!r}"
    return f"no {wanted} named {name!r} ({name!r} is {a_noun(found)})"


async def get(store: Store, name: str, *, family: Families = None) -> Source:
    """One source by name: a point read, on the loop's own connection (every webhook request asks)."""
    row = await store.peek(lambda tx: tx.one(Q.get_source, {"name": name}))
    return _found(row, name, family)


def changed(tx: Transaction) -> None:
    """Say, in the transaction that changes a source or a rule, that one changed.

    Every verb that writes a source's row (but its health) or a rule calls
    this: the delivery path's caches (``for_delivery``, routing's rules) are
    kept only while the generation it renews stays the same, in any process.
    """
    tx.run(Q.new_sources_generation, {"token": token_hex(8)})


def generation(tx: Transaction) -> str:
    """The token of the last change of sources and rules (``changed``); '' before any."""
    return str(tx.one(Q.sources_generation)["generation"])  # type: ignore[index]


async def for_delivery(store: Store, name: str, *, family: str) -> Source:
    """The source a delivery is for, as ``get`` finds it, parsed once per change.

    A point read of the generation per call; the row is read and parsed again
    only after a source or rule changed (any process's change, made through
    these verbs). Its health fields (last poll, counts) may be old: only what
    configures the source is kept current.
    """

    def read(tx: Transaction) -> tuple[str, Source | None]:
        now = generation(tx)
        cached = tx.cache.get(("source", name))
        if cached is not None and cached[0] == now:
            return cached  # type: ignore[no-any-return]
        row = tx.one(Q.get_source, {"name": name})
        found = None if row is None else Source.from_row(row)
        if found is not None:  # unknown names are not kept: a flood of them must not grow the cache
            tx.cache[("source", name)] = (now, found)
        return now, found

    _, found = await store.peek(read)
    if found is None or found.family != family:
        raise NotFound(_missing(name, family, None if found is None else found.family))
    return found


async def list_sources(store: Store, *, family: str | None = None) -> list[Source]:
    rows = await store.read_all(Q.list_sources, {"family": family})
    return [Source.from_row(r) for r in rows]


async def remove(store: Store, name: str, *, family: Families = None, by: str | None = None) -> None:
    """Remove a source and its rules (its stored events stay)."""

    def body(tx: Transaction) -> None:
        _found(tx.one(Q.get_source, {"name": name}), name, family)
        tx.run(Q.delete_source, {"name": name})
        rules = tx.run(Q.delete_rules_of_source, {"name": name})
        changed(tx)
        if by is not None:
            audit.record(tx, store.clock.now_ms(), by=by, action="source.remove", subject=name, rules_removed=rules)

    await store.write(body)


async def set_enabled(
    store: Store, name: str, enabled: bool, *, family: Families = None, by: str | None = None
) -> Source:
    def body(tx: Transaction) -> Source:
        _found(tx.one(Q.get_source, {"name": name}), name, family)
        now = store.clock.now_ms()
        row = tx.one(Q.set_source_enabled, {"name": name, "enabled": int(enabled), "now": now})
        changed(tx)
        if by is not None:
            audit.record(tx, now, by=by, action="source.enable" if enabled else "source.disable", subject=name)
        return Source.from_row(row)

    return await store.write(body)


async def rotate_secret(store: Store, name: str, ref: dict[str, str], *, by: str | None = None) -> Source:
    """Add a second active secret; both verify until the older one is retired."""

    def change(secrets: list[dict[str, str]]) -> list[dict[str, str]]:
        if len(secrets) >= MAX_ACTIVE_SECRETS:
            raise Conflict(f"{name!r} has {len(secrets)} active secrets already; retire the older one first")
        return [*secrets, ref]

    # The audit trail says what kind of reference was added (env, file, value), never the reference.
    return await _change_secrets(store, name, change, by, "source.rotate_secret", {"reference": sorted(ref)})


async def retire_secret(store: Store, name: str, *, by: str | None = None) -> Source:
    """Drop the oldest active secret (the one a rotation replaced)."""

    def change(secrets: list[dict[str, str]]) -> list[dict[str, str]]:
        if len(secrets) < 2:
            raise Conflict(f"{name!r} has {len(secrets)} active secret(s); there is no older one to retire")
        return secrets[1:]

    return await _change_secrets(store, name, change, by, "source.retire_secret", {})


async def _change_secrets(
    store: Store, name: str, change: Any, by: str | None, action: str, detail: dict[str, Any]
) -> Source:
    def body(tx: Transaction) -> Source:
        row = tx.one(Q.get_source, {"name": name})
        if row is None:
            raise NotFound(f"no {noun('webhook')} named {name!r}")
        if row["family"] != "webhook":
            raise Conflict(f"{name!r} is {a_noun(row['family'])}; only webhook sources have secrets")
        secrets = change(Source.from_row(row).secrets)
        now = store.clock.now_ms()
        updated = tx.one(Q.set_source_secrets, {"name": name, "secrets": json.dumps(secrets), "now": now})
        changed(tx)
        if by is not None:
            audit.record(tx, now, by=by, action=action, subject=name, **detail)
        return Source.from_row(updated)

    return await store.write(body)


async def record_health(store: Store, name: str, *, error: str | None = None, stored: int = 0) -> None:
    """A running consumer's poll result (for `adapter status` and the dashboard)."""
    await store.write(
        lambda tx: tx.run(Q.record_source_health, {"name": name, "error": error, "stored": stored, "now": store.clock.now_ms()})
    )
