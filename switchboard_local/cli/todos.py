"""`todo`: create, inspect, claim and finish todos (the lifecycle's verbs on the command line)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..core import todos, watch
from ..core.clock import rfc3339
from ..core.errors import SwitchboardError
from ..core.store.interface import Store
from ..core.todo_model import (
    DEFAULT_MAX_ATTEMPTS,
    LEASE_CAP_SECONDS,
    MAX_ATTEMPTS_CAP,
    MAX_LIST_LIMIT,
    MAX_WAIT_SECONDS,
    STATES,
    NewTodo,
    Todo,
)
from ..core.todos import Lease, NextClaim
from . import batch, live
from .common import ID, INT, FloatRange, IntRange, JsonValue, Out, common, operator, table, when
from .events import SinceValue
from .todo_wait import todo_wait


def register(main: click.Group) -> None:
    main.add_command(todo)


# ---------------------------------------------------------------- text for people


def _state(todo: Todo) -> str:
    if todo.blocked:
        return "blocked"
    return "dead letter" if todo.dead_letter else todo.state


def _todo_text(todo: Todo) -> str:
    lines = [
        f"todo {todo.id}: {todo.title}",
        f"  queue        {todo.queue}",
        f"  state        {_state(todo)}",
        f"  attempt      {todo.attempt} of {todo.max_attempts}",
        f"  priority     {todo.priority}",
    ]
    optional = [
        ("kind", todo.kind),
        ("assignee", todo.assignee),
        ("owner", todo.owner),
        ("lease until", rfc3339(todo.lease_expires_at)),
        ("visible at", rfc3339(todo.visible_at)),
        ("key", todo.idempotency_key),
        ("event", todo.event_id),
        ("last error", todo.last_error),
        ("cancelled by", todo.cancelled_by),
        ("reason", todo.cancel_reason),
    ]
    lines += [f"  {name:<12} {value}" for name, value in optional if value is not None]
    lines.append(f"  created      {when(todo.created_at)}")
    if todo.completed_at is not None:
        lines.append(f"  completed    {when(todo.completed_at)}")
    if todo.payload is not None:
        lines.append("  payload      " + json.dumps(todo.payload, ensure_ascii=False, indent=2).replace("\n", "\n  "))
    if todo.result is not None:
        lines.append("  result       " + json.dumps(todo.result, ensure_ascii=False, indent=2).replace("\n", "\n  "))
    for d in todo.dependencies or ():
        shown = "" if d.result is None else "  result " + json.dumps(d.result, ensure_ascii=False)
        if d.result_omitted:
            shown = f"  result too large to show here: todo show {d.id}"
        lines.append(f"  waits for    todo {d.id} ({'dead letter' if d.state == 'failed' else d.state}){shown}")
    for a in todo.attempts or ():
        ended = f"{a.outcome} at {when(a.ended_at)}" if a.outcome else "open"
        error = f": {a.error}" if a.error else ""
        lines.append(f"  attempt {a.attempt}  {a.owner}  claimed {when(a.claimed_at)}  {ended}{error}")
    return "\n".join(lines)



@click.group("todo")
def todo() -> None:
    """Create, inspect, claim and finish todos."""


@todo.command("create")
@click.option("--queue", required=True, help="Queue to put the todo on.")
@click.option("--title", required=True, help="One human-readable line.")
@click.option("--payload", type=JsonValue(), default=None, help="JSON, or @FILE, or @- for stdin.")
@click.option("--kind", default=None, help="A free-form kind label.")
@click.option("--key", "idempotency_key", default=None, help="Idempotency key: one live todo per (queue, key).")
@click.option("--assignee", default=None, help="Only this owner may claim it.")
@click.option("--priority", type=INT, default=0, show_default=True, help="Higher is claimed first.")
@click.option(
    "--max-attempts",
    type=IntRange(1, MAX_ATTEMPTS_CAP),
    default=DEFAULT_MAX_ATTEMPTS,
    show_default=True,
    help=f"Attempts before it becomes a dead letter (1-{MAX_ATTEMPTS_CAP}).",
)
@click.option("--delay", type=FloatRange(min=0), default=0.0, help="Seconds before it can be claimed.")
@click.option("--after", "after", type=ID, multiple=True, metavar="ID",
              help="Wait for todo ID to be done before this one can be claimed (repeatable).")  # fmt: skip
@click.option("--after-key", "after_keys", multiple=True, metavar="KEY",
              help="Wait for the live todo holding idempotency key KEY, on any queue (repeatable).")  # fmt: skip
@common
def todo_create(db: Path | None, as_json: bool | None, delay: float, **fields: Any) -> None:
    """Create a todo (or return the live one holding the same key).

    With --after or --after-key it is blocked until every todo it waits for is
    done: a claim never takes it before, and its claim then carries their results.
    A todo it waits for that is cancelled cancels it too; one that becomes a dead
    letter keeps it blocked (a redrive may yet finish it).
    """
    out = Out(db, as_json)
    try:
        new = NewTodo(delay=delay, **fields)
    except SwitchboardError as exc:
        out.fail(exc)
    todo, created = out.run(lambda store: todos.create(store, new, by=operator()))
    verb = "created" if created else f"exists already (key {todo.idempotency_key!r}):"
    blocked = f" (blocked: waits for {todo.blocked_by} todo{'' if todo.blocked_by == 1 else 's'})" if todo.blocked else ""
    out.emit({**todo.to_dict(), "created": created}, f"{verb} todo {todo.id} on {todo.queue}: {todo.title}{blocked}")


@todo.command("list")
@click.option("--queue", default=None, help="Only this queue.")
@click.option("--state", type=click.Choice(STATES), default=None, help="Only this state.")
@click.option("--ready", "timing", flag_value="ready", default=None, help="Only todos claimable now.")
@click.option("--delayed", "timing", flag_value="delayed", help="Only todos claimable later (a delay, or a retry's backoff).")
@click.option("--dead", "timing", flag_value="dead", help="Only dead letters.")
@click.option("--blocked", "timing", flag_value="blocked", help="Only todos waiting for todos not done.")
@click.option("--limit", type=IntRange(1, MAX_LIST_LIMIT), default=50, show_default=True,
              help=f"Show at most this many (1-{MAX_LIST_LIMIT}).")  # fmt: skip
@common
def todo_list(
    db: Path | None, as_json: bool | None, queue: str | None, state: str | None, timing: str | None, limit: int
) -> None:
    """List todos, newest first; WAITS says when a delayed or retrying todo can be claimed."""
    out = Out(db, as_json)
    found = out.run(lambda store: todos.list_todos(store, queue=queue, state=state, limit=limit, timing=timing))
    now = round(time.time() * 1000)
    rows = [[t.id, _state(t), t.queue, t.priority, f"{t.attempt}/{t.max_attempts}", _waits(t, now), t.title]
            for t in found]  # fmt: skip
    text = table(["ID", "STATE", "QUEUE", "PRIORITY", "ATTEMPT", "WAITS", "TITLE"], rows) if rows else "no todos"
    out.emit([t.to_dict() for t in found], text)


def _waits(todo: Todo, now: int) -> str:
    """When a todo not yet visible can be claimed: "retry in 4m", "delayed 2h", "for 2 todos"; "-" otherwise."""
    if todo.blocked:
        return f"for {todo.blocked_by} todo{'' if todo.blocked_by == 1 else 's'}"
    if todo.visible_at is None or todo.visible_at <= now:
        return "-"
    seconds = (todo.visible_at - now) / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            span = f"{seconds / size:.0f}{unit}"
            break
    else:
        span = f"{max(seconds, 1):.0f}s"
    return f"retry in {span}" if todo.attempt > 0 else f"delayed {span}"


@todo.command("watch")
@click.option("--queue", default=None, help="Only this queue.")
@click.option("--since-id", type=ID, default=None,
              help="Start with todo N (included), then follow. Default: only todos created from now on.")  # fmt: skip
@common
def todo_watch(db: Path | None, as_json: bool | None, queue: str | None, since_id: int | None) -> None:
    """Follow new todos as they land, from any process, one line each, until Ctrl-C.

    Each todo is shown once, in the state it has when seen. --json writes one
    JSON object per line (JSON Lines). The view ends quietly (exit 0) once
    nothing reads its output any more (piped to head, say).
    """
    out = Out(db, as_json)
    live.follow(
        out,
        lambda store: watch.follow_todos(store, from_id=since_id, queue=queue),
        line=live.todo_line,
        to_json=Todo.to_dict,
    )


@todo.command("show")
@click.argument("todo_id", metavar="ID", type=ID, help="The todo's id.")
@common
def todo_show(db: Path | None, as_json: bool | None, todo_id: int) -> None:
    """Show one todo in full, with its attempt history and what it waits for."""
    out = Out(db, as_json)
    found = out.run(lambda store: todos.get(store, todo_id))
    out.emit(found.to_dict(), _todo_text(found))


todo.add_command(todo_wait)


@todo.command("claim")
@click.argument("todo_id", metavar="[ID]", type=ID, required=False,
                help="This todo (default: the next claimable one).")  # fmt: skip
@click.option("--queue", "queues", multiple=True, help="Claim from this queue (repeatable; default: all).")
@click.option("--owner", default=None, help="Who claims (default: your user name).")
@click.option("--lease", type=FloatRange(1, LEASE_CAP_SECONDS), default=None, help="Lease seconds (default 300).")
@click.option("--wait", type=FloatRange(0, MAX_WAIT_SECONDS), default=0.0, show_default=True,
              help="Seconds to wait for a todo to become claimable (a long poll; not with ID).")  # fmt: skip
@click.option("--max", "most", type=IntRange(1, todos.MAX_BATCH), default=None,
              help=f"Claim up to this many (1-{todos.MAX_BATCH}) in one transaction, each with its own lease token; "
                   "the answer is a list (not with ID).")  # fmt: skip
@common
def todo_claim(
    db: Path | None,
    as_json: bool | None,
    todo_id: int | None,
    queues: tuple[str, ...],
    owner: str | None,
    lease: float | None,
    wait: float,
    most: int | None,
) -> None:
    """Claim a todo by ID, or the next one in priority order (with --max, up to that many).

    The answer carries the lease token that heartbeat, complete, fail and
    release require. Nothing claimable is not an error (JSON: null; with
    --max, an empty list).
    """
    out = Out(db, as_json)
    owner = owner or operator()
    if todo_id is not None and queues:
        raise click.UsageError("give an ID or --queue, not both")
    if todo_id is not None and wait:
        raise click.UsageError("--wait waits for the next todo; it does not go with an ID")
    if todo_id is not None and most is not None:
        raise click.UsageError("--max claims the next todos; it does not go with an ID")
    if most is not None:
        batch.claim_command(out, NextClaim(owner, queues or None, lease), most, wait)
        return
    if todo_id is not None:
        claimed: Todo | None = out.run(lambda store: todos.claim(store, todo_id, owner=owner, lease=lease))
        empty: list[str] = []
    else:
        claimed, empty = out.run(lambda store: _claim_next(store, NextClaim(owner, queues or None, lease), wait))
    if claimed is None:
        if empty:  # said on stderr: the answer on stdout stays "nothing" (JSON null)
            click.echo(f"switchboard-local: no todos at all on {', '.join(repr(q) for q in empty)} (a misspelt queue?)",
                       err=True)  # fmt: skip
        out.emit(None, "nothing to claim")
        return
    text = (
        f"claimed todo {claimed.id} on {claimed.queue}: {claimed.title}\n"
        f"attempt {claimed.attempt} of {claimed.max_attempts}, lease until {when(claimed.lease_expires_at)}\n"
        f"lease token: {claimed.lease_token}"
    )
    out.emit(claimed.to_dict(), text)


async def _claim_next(store: Store, claim: NextClaim, wait: float) -> tuple[Todo | None, list[str]]:
    """The next claimable todo (waiting up to ``wait`` s for one), and the named queues that hold no todo at all."""
    if wait > 0:
        async with watch.following(store) as changes:
            claimed = await todos.claim_next_waiting(store, claim, wait=wait, changes=changes)
    else:
        claimed = await todos.claim_next(store, owner=claim.owner, queues=claim.queues, lease=claim.lease)
    empty = [] if claimed is not None or not claim.queues else await todos.queues_without_todos(store, claim.queues)
    return claimed, empty


token_option = click.option("--token", "lease_token", required=True, help="The lease token from the claim.")
batch_token_option = click.option("--token", "lease_token", default=None, help="The lease token from the claim (not with --batch).")


def _batch(source: str | None, todo_id: int | None, lease_token: str | None, value: Any, most: int | None) -> bool:
    """Whether this is a --batch call; an ID and its token are required otherwise, and refused with it."""
    if source is not None:
        if todo_id is not None or lease_token is not None or value is not None:
            raise click.UsageError("--batch takes each todo's id, token and result or error from its lines; "
                                   "give no ID, --token, --result or --error with it")  # fmt: skip
        return True
    if most is not None:
        raise click.UsageError("--max goes with --batch and --claim-next")
    if todo_id is None:
        raise click.UsageError("missing argument 'ID' (or --batch @FILE for many)")
    if lease_token is None:
        raise click.UsageError("missing option '--token'")
    return False


@todo.command("heartbeat")
@click.argument("todo_id", metavar="ID", type=ID, help="The claimed todo's id.")
@token_option
@click.option("--lease", type=FloatRange(1, LEASE_CAP_SECONDS), default=None, help="New lease from now (default 300 s).")
@common
def todo_heartbeat(db: Path | None, as_json: bool | None, todo_id: int, lease_token: str, lease: float | None) -> None:
    """Reset the lease to now + LEASE (capped at 12 h per attempt)."""
    out = Out(db, as_json)
    found = out.run(lambda store: todos.heartbeat(store, Lease(todo_id, lease_token), lease_seconds=lease))
    out.emit(found.to_dict(), f"lease on todo {found.id} runs until {when(found.lease_expires_at)}")


def _next_options(fn: Any) -> Any:
    """--claim-next and where to claim from: finish and take the next todo in one commit;
    --batch to finish many (and --max: how many to claim next)."""
    fn = click.option("--max", "most", type=IntRange(1, todos.MAX_BATCH), default=None,
                      help="With --batch --claim-next: claim up to this many next (default: as many as the lines).")(fn)  # fmt: skip
    fn = click.option("--batch", "batch_source", default=None, metavar="@FILE|@-",
                      help="Many todos in one transaction: JSON lines of id, token and the verb's field.")(fn)  # fmt: skip
    fn = click.option("--lease", type=FloatRange(1, LEASE_CAP_SECONDS), default=None,
                      help="With --claim-next: lease seconds for the next todo (default 300).")(fn)  # fmt: skip
    fn = click.option("--owner", default=None, help="With --claim-next: who claims (default: your user name).")(fn)
    fn = click.option("--queue", "queues", multiple=True, help="With --claim-next: claim from this queue (repeatable).")(fn)
    fn = click.option("--claim-next", is_flag=True, help="Also claim the next todo, in the same transaction.")(fn)
    return fn


def _finish(
    out: Out, finish: Any, claim_next: bool, queues: tuple[str, ...], owner: str | None, lease: float | None,
    text: Any,
) -> None:  # fmt: skip
    """Run a finishing verb, alone or with the next claim in the same transaction; print both."""
    if not claim_next:
        if queues or owner or lease is not None:
            raise click.UsageError("--queue, --owner and --lease go with --claim-next")
        found = out.run(lambda store: finish(store, None)).todo
        out.emit(found.to_dict(), text(found))
        return
    then = NextClaim(owner=owner or operator(), queues=queues or None, lease=lease)
    finished = out.run(lambda store: finish(store, then))
    found, following = finished.todo, finished.next
    lines = [text(found)]
    if following is None:
        lines.append("nothing more to claim")
    else:
        lines.append(f"claimed todo {following.id} on {following.queue}: {following.title}")
        lines.append(f"lease token: {following.lease_token}")
    out.emit({"todo": found.to_dict(), "next": following and following.to_dict()}, "\n".join(lines))


@todo.command("complete")
@click.argument("todo_id", metavar="[ID]", type=ID, required=False,
                help="The claimed todo's id (not with --batch).")  # fmt: skip
@batch_token_option
@click.option("--result", type=JsonValue(), default=None, help="JSON result, or @FILE.")
@_next_options
@common
def todo_complete(
    db: Path | None, as_json: bool | None, todo_id: int | None, lease_token: str | None, result: Any,
    claim_next: bool, queues: tuple[str, ...], owner: str | None, lease: float | None, batch_source: str | None,
    most: int | None,
) -> None:  # fmt: skip
    """Finish a claimed todo: it is done.

    With --claim-next the answer is {"todo": the finished one, "next": the
    newly claimed one with its lease token, or null}.

    With --batch @FILE (or @- for stdin), many in one transaction, one JSON
    line each: {"id": 12, "token": "…", "result": …}. Each line is answered on
    its own (a list of {"id", "ok", "todo" | "error"}); exit 1 when any was
    refused, 2 when a line is malformed (nothing is done then).
    """
    if _batch(batch_source, todo_id, lease_token, result, most):
        assert batch_source is not None
        batch.finish_command(Out(db, as_json), "complete", batch_source, claim_next, queues, owner, lease, most,
                             lambda found: f"todo {found.id} done")  # fmt: skip
        return
    assert todo_id is not None and lease_token is not None
    _finish(
        Out(db, as_json),
        lambda store, then: todos.complete(store, Lease(todo_id, lease_token), result=result, then=then),
        claim_next, queues, owner, lease,
        lambda found: f"todo {found.id} done",
    )  # fmt: skip


def _failed_text(found: Todo) -> str:
    if found.dead_letter:
        return f"todo {found.id} failed for good after {found.attempt} attempts (dead letter; see 'todo redrive')"
    return (f"todo {found.id} failed attempt {found.attempt} of {found.max_attempts}: "
            f"pending, retried from {when(found.visible_at)}")  # fmt: skip


@todo.command("fail")
@click.argument("todo_id", metavar="[ID]", type=ID, required=False,
                help="The claimed todo's id (not with --batch).")  # fmt: skip
@batch_token_option
@click.option("--error", default=None, help="What went wrong (kept as last_error).")
@_next_options
@common
def todo_fail(
    db: Path | None, as_json: bool | None, todo_id: int | None, lease_token: str | None, error: str | None,
    claim_next: bool, queues: tuple[str, ...], owner: str | None, lease: float | None, batch_source: str | None,
    most: int | None,
) -> None:  # fmt: skip
    """Fail the attempt: pending again after a backoff, or failed for good (a dead letter) at the cap.

    With --batch @FILE (or @- for stdin), many in one transaction, one JSON
    line each: {"id": 12, "token": "…", "error": "…"}; answered as for
    `todo complete --batch`.
    """
    if _batch(batch_source, todo_id, lease_token, error, most):
        assert batch_source is not None
        batch.finish_command(Out(db, as_json), "fail", batch_source, claim_next, queues, owner, lease, most,
                             _failed_text)  # fmt: skip
        return
    assert todo_id is not None and lease_token is not None
    _finish(
        Out(db, as_json),
        lambda store, then: todos.fail(store, Lease(todo_id, lease_token), error=error, then=then),
        claim_next, queues, owner, lease,
        _failed_text,
    )  # fmt: skip


@todo.command("release")
@click.argument("todo_id", metavar="ID", type=ID, help="The claimed todo's id.")
@click.option("--token", "lease_token", default=None, help="The lease token from the claim.")
@click.option("--force", is_flag=True, help="Without the token (an operator's release): the holder's token is void.")
@click.option("--delay", type=FloatRange(min=0), default=0.0, help="Seconds before it can be claimed again.")
@common
def todo_release(
    db: Path | None, as_json: bool | None, todo_id: int, lease_token: str | None, force: bool, delay: float
) -> None:
    """Give a claimed todo back untouched; the attempt is refunded.

    With --force, an operator takes it back from a holder that lost its token
    or hangs: pending at once, recorded in the audit trail.
    """
    out = Out(db, as_json)
    if force:
        if lease_token is not None or delay:
            raise click.UsageError("--force releases without a token, at once: not with --token or --delay")
        found = out.run(lambda store: todos.force_release(store, todo_id, by=operator()))
        out.emit(found.to_dict(), f"todo {found.id} released by force: pending now; its holder's token is void")
        return
    if lease_token is None:
        raise click.UsageError("give the lease token (--token), or --force to release without it")
    found = out.run(lambda store: todos.release(store, Lease(todo_id, lease_token), delay=delay))
    out.emit(found.to_dict(), f"todo {found.id} released: pending from {when(found.visible_at)}")


@todo.command("cancel")
@click.argument("todo_id", metavar="[ID]", type=ID, required=False,
                help="This todo (or, without it: --queue Q --state pending).")  # fmt: skip
@click.option("--reason", default=None, help="Why: kept on the todo, told to its holder, in the audit trail.")
@click.option("--queue", default=None, help="With --state pending: the queue's pending todos.")
@click.option("--state", type=click.Choice(["pending"]), default=None, help="pending: cancel a queue's pending todos.")
@click.option("--kind", default=None, help="Only todos of this kind.")
@click.option("--since", type=SinceValue(), default=None, help="Only those created since this time or age (10m, 2h).")
@click.option("--dry-run", is_flag=True, help="Only count what would be cancelled.")
@click.option("--yes", is_flag=True, help="Do it without asking (required when stdin is not a terminal).")
@common
def todo_cancel(
    db: Path | None, as_json: bool | None, todo_id: int | None, reason: str | None, queue: str | None,
    state: str | None, kind: str | None, since: Any, dry_run: bool, yes: bool,
) -> None:  # fmt: skip
    """Cancel a pending or claimed todo (ID), or a queue's pending todos (--queue Q --state pending).

    A cancelled todo is finished: it frees its idempotency key, and a holder
    is refused (told it was cancelled) on its next heartbeat, complete or
    fail. A bulk cancel counts first, then asks (or takes --yes).
    """
    out = Out(db, as_json)
    bulk = queue is not None or state is not None or kind is not None or since is not None or dry_run or yes
    if todo_id is not None:
        if bulk:
            raise click.UsageError("give an ID, or --queue Q --state pending with its filters, not both")
        found = out.run(lambda store: todos.cancel(store, todo_id, by=operator(), reason=reason))
        out.emit(found.to_dict(), f"todo {found.id} cancelled")
        return
    if queue is None or state is None:
        raise click.UsageError("give an ID, or --queue Q --state pending to cancel a queue's pending todos")
    since_ms = _since_ms(since)
    matched = out.run(lambda store: todos.count_pending(store, queue=queue, kind=kind, since=since_ms(store)))
    what = f"{matched} pending todo{'s' if matched != 1 else ''} on {queue}"
    if dry_run or not matched:
        out.emit({"matched": matched, "cancelled": 0, "dry_run": dry_run},
                 f"{what} would be cancelled" if dry_run else f"no pending todos on {queue} match")  # fmt: skip
        return
    _confirm_bulk("cancel", what, yes)
    cancelled = out.run(lambda store: todos.cancel_many(store, queue=queue, kind=kind, since=since_ms(store),
                                                        reason=reason, by=operator(),
                                                        progress=_progress("cancelled", matched)))  # fmt: skip
    out.emit({"matched": matched, "cancelled": cancelled}, f"cancelled {cancelled} pending todos on {queue}")


def _since_ms(since: Any) -> Callable[[Store], int | None]:
    """--since as milliseconds on the store's clock (an age counts back from now); ids are refused."""
    if since is not None and since[0] == "id":
        raise click.UsageError("--since takes a time or an age (10m, 2h, 1d) here, not an id")

    def since_ms(store: Store) -> int | None:
        if since is None:
            return None
        kind_of, value = since
        return store.clock.now_ms() - value * 1000 if kind_of == "ago" else value

    return since_ms


@todo.command("redrive")
@click.argument("todo_id", metavar="[ID]", type=ID, required=False,
                help="This dead letter (or, without it: --queue Q --dead).")  # fmt: skip
@click.option("--queue", default=None, help="With --dead: every dead letter of this queue.")
@click.option("--dead", is_flag=True, help="Redrive the queue's dead letters (the filters narrow them).")
@click.option("--kind", default=None, help="Only dead letters of this kind.")
@click.option("--since", type=SinceValue(), default=None, help="Only those dead since this time or age (10m, 2h, 1d).")
@click.option("--dry-run", is_flag=True, help="Only count what would be redriven.")
@click.option("--yes", is_flag=True, help="Do it without asking (required when stdin is not a terminal).")
@common
def todo_redrive(
    db: Path | None, as_json: bool | None, todo_id: int | None, queue: str | None, dead: bool, kind: str | None,
    since: Any, dry_run: bool, yes: bool,
) -> None:  # fmt: skip
    """Send a dead letter (ID), or a queue's dead letters (--queue Q --dead), back to pending with a fresh budget.

    A bulk redrive counts first, then asks (or takes --yes), and works a
    bounded batch per transaction, so a large one never holds the file's
    write lock for long.
    """
    out = Out(db, as_json)
    bulk = queue is not None or dead or kind is not None or since is not None or dry_run or yes
    if todo_id is not None:
        if bulk:
            raise click.UsageError("give an ID, or --queue Q --dead with its filters, not both")
        found = out.run(lambda store: todos.redrive(store, todo_id, by=operator()))
        out.emit(found.to_dict(), f"todo {found.id} redriven: pending, {found.max_attempts} attempts left")
        return
    if queue is None or not dead:
        raise click.UsageError("give an ID, or --queue Q --dead to redrive a queue's dead letters")
    since_ms = _since_ms(since)

    matched = out.run(lambda store: todos.count_dead_letters(store, queue=queue, kind=kind, since=since_ms(store)))
    what = f"{matched} dead letter{'s' if matched != 1 else ''} on {queue}"
    if dry_run or not matched:
        out.emit({"matched": matched, "redriven": 0, "skipped": 0, "dry_run": dry_run},
                 f"{what} would be redriven" if dry_run else f"no dead letters on {queue} match")  # fmt: skip
        return
    _confirm_bulk("redrive", what, yes)
    result = out.run(lambda store: todos.redrive_many(store, queue=queue, kind=kind, since=since_ms(store),
                                                      by=operator(), progress=_progress("redriven", matched)))  # fmt: skip
    held = f"; {result.skipped} held back (a newer live todo holds the key)" if result.skipped else ""
    out.emit(result.to_dict(), f"redriven {result.redriven} of {result.matched} dead letters on {queue}{held}")


@todo.command("purge")
@click.option("--queue", required=True, help="The queue whose finished todos go.")
@click.option("--state", type=click.Choice(todos.PURGEABLE), required=True,
              help="done, failed (dead letters) or cancelled.")  # fmt: skip
@click.option("--older-than", type=FloatRange(0, 36500), default=None, help="Only those last touched DAYS ago or more.")
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@click.option("--yes", is_flag=True, help="Do it without asking (required when stdin is not a terminal).")
@common
def todo_purge(
    db: Path | None, as_json: bool | None, queue: str, state: str, older_than: float | None, dry_run: bool, yes: bool
) -> None:
    """Delete a queue's finished todos (done, dead letters or cancelled) and their attempt history; never a live one.

    Counts first, then asks (or takes --yes); a bounded batch per transaction.
    """
    out = Out(db, as_json)

    def before(store: Store) -> int | None:
        return None if older_than is None else store.clock.now_ms() - round(older_than * 86_400_000)

    matched = out.run(lambda store: todos.count_purgeable(store, queue=queue, state=state, before=before(store)))
    noun = {"done": "done todo", "failed": "dead letter", "cancelled": "cancelled todo"}[state]
    what = f"{matched} {noun}{'s' if matched != 1 else ''} on {queue}"
    if dry_run or not matched:
        out.emit({"matched": matched, "purged": 0, "dry_run": dry_run},
                 f"{what} would be deleted" if dry_run else f"no {noun}s on {queue} match")  # fmt: skip
        return
    _confirm_bulk("delete", what, yes)
    purged = out.run(lambda store: todos.purge(store, queue=queue, state=state, before=before(store), by=operator(),
                                               progress=_progress("deleted", matched)))  # fmt: skip
    out.emit({"matched": matched, "purged": purged}, f"deleted {purged} {noun}s on {queue}")


def _confirm_bulk(verb: str, what: str, yes: bool) -> None:
    """A bulk change goes ahead with --yes, or once a person at the terminal says so."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(f"{what} match; add --yes to {verb} them (stdin is not a terminal to ask on)")
    click.confirm(f"{verb} {what}?", abort=True, err=True)


def _progress(done_word: str, matched: int) -> Callable[[int], None]:
    """Progress on stderr for a bulk change longer than one transaction."""

    def say(done: int) -> None:
        if matched > todos.BULK_BATCH:
            click.echo(f"{done_word} {done} of {matched}…", err=True)

    return say
