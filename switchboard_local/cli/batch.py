"""The batch verbs on the command line: `todo claim --max N`, and `todo complete`
/ `todo fail` with `--batch @FILE|@-` (JSON lines, one item a line).

    {"id": 12, "token": "…", "result": {"pr": 42}}      complete: result optional
    {"id": 13, "token": "…", "error": "timed out"}      fail: error optional

The whole batch is one transaction and each line is answered on its own, in
order: a refused item (stale token, not claimed, not found) changes nothing
and the others go through. Exit 0 when every item went through, 1 when any was
refused (each refusal also one line on stderr), 2 when the input is malformed
(the line named; nothing was written).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from ..core import todos, watch
from ..core.errors import InvalidArgument, SwitchboardError
from ..core.store.interface import Store
from ..core.todo_model import INT64_MAX, Todo, dump_json
from ..core.todos import MAX_BATCH, Completion, Failure, Lease, NextClaim, Outcomes
from .common import EXIT_REFUSED, Out, operator, printable, read_argument_file, when

# ---------------------------------------------------------------- claim --max


async def claim_many(store: Store, claim: NextClaim, most: int, wait: float) -> tuple[list[Todo], list[str]]:
    """Up to ``most`` todos (waiting up to ``wait`` s for the first), and the named queues that hold no todo at all."""
    if wait > 0:
        async with watch.following(store) as changes:
            claimed = await todos.claim_next_waiting(store, claim, wait=wait, changes=changes, max=most)
    else:
        claimed = await todos.claim_next_many(store, claim, most)
    empty = [] if claimed or not claim.queues else await todos.queues_without_todos(store, claim.queues)
    return claimed, empty


def claimed_text(claimed: Todo) -> str:
    return (
        f"claimed todo {claimed.id} on {claimed.queue}: {claimed.title}\n"
        f"attempt {claimed.attempt} of {claimed.max_attempts}, lease until {when(claimed.lease_expires_at)}\n"
        f"lease token: {claimed.lease_token}"
    )


def claim_command(out: Out, claim: NextClaim, most: int, wait: float) -> None:
    """`todo claim --max N`: a JSON list (empty: nothing claimable, not an error)."""
    claimed, empty = out.run(lambda store: claim_many(store, claim, most, wait))
    if not claimed and empty:  # said on stderr: the answer on stdout stays "nothing" (JSON [])
        click.echo(f"switchboard-local: no todos at all on {', '.join(repr(q) for q in empty)} (a misspelt queue?)",
                   err=True)  # fmt: skip
    text = "\n\n".join(claimed_text(t) for t in claimed) if claimed else "nothing to claim"
    out.emit([t.to_dict() for t in claimed], text)


# ---------------------------------------------------------------- complete / fail --batch

# What a line may hold, besides id and token: the verb's own field.
FIELDS = {"complete": "result", "fail": "error"}


def read_items(source: str, verb: str) -> list[Completion] | list[Failure]:
    """The items of ``@FILE`` or ``@-``, one JSON object a line (blank lines skipped).

    Raises InvalidArgument naming the line for anything malformed: nothing is
    run unless every line can be.
    """
    if not source.startswith("@"):
        raise InvalidArgument("--batch takes @FILE or @- (stdin): JSON lines, one item a line")
    text = read_argument_file(source[1:])
    name = "stdin" if source == "@-" else source[1:]
    items: list[Any] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(items) == MAX_BATCH:
            raise InvalidArgument(f"{name} holds more than {MAX_BATCH} items; a batch takes at most {MAX_BATCH}")
        try:
            items.append(_item(line, verb))
        except InvalidArgument as exc:
            raise InvalidArgument(f"{name} line {number}: {exc.message}") from None
    if not items:
        raise InvalidArgument(f"{name} holds no items (one JSON object a line)")
    return items


def _item(line: str, verb: str) -> Completion | Failure:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, absurd nesting
        raise InvalidArgument(f"not JSON this tool can take: {type(exc).__name__}") from None
    if not isinstance(value, dict):
        raise InvalidArgument('each line must be a JSON object like {"id": 12, "token": "…"}')
    field = FIELDS[verb]
    unknown = sorted(set(value) - {"id", "token", field})
    if unknown:
        raise InvalidArgument(f"unknown field {unknown[0]!r} (a {verb} line takes id, token and {field})")
    todo_id, token = value.get("id"), value.get("token")
    if not isinstance(todo_id, int) or isinstance(todo_id, bool) or not 1 <= todo_id <= INT64_MAX:
        raise InvalidArgument("id must be a todo id (a positive integer)")
    if not isinstance(token, str) or not token:
        raise InvalidArgument("token must be the lease token the claim returned (a non-empty string)")
    lease = Lease(todo_id, token)
    if verb == "complete":
        dump_json("result", value.get("result"))  # what a result can hold: no NaN, not too deep
        return Completion(lease, value.get("result"))
    error = value.get("error")
    if error is not None and not isinstance(error, str):
        raise InvalidArgument("error must be a string")
    return Failure(lease, error)


def finish_command(
    out: Out,
    verb: str,
    source: str,
    claim_next: bool,
    queues: Sequence[str],
    owner: str | None,
    lease: float | None,
    most: int | None,
    done_text: Callable[[Todo], str],
) -> None:
    """`todo complete|fail --batch @FILE|@-`: a report per item; exit 1 when any was refused."""
    if not claim_next and (queues or owner or lease is not None or most is not None):
        raise click.UsageError("--queue, --owner, --lease and --max go with --claim-next")
    try:
        items = read_items(source, verb)
    except SwitchboardError as exc:
        out.fail(exc)
    then = NextClaim(owner or operator(), queues or None, lease) if claim_next else None
    many = todos.complete_many if verb == "complete" else todos.fail_many
    outcomes: Outcomes = out.run(lambda store: many(store, items, then=then, max=most))  # type: ignore[arg-type]
    report = [o.to_dict() for o in outcomes]
    lines = [done_text(o.todo) if o.todo is not None else f"todo {o.todo_id} refused: {o.error}" for o in outcomes]
    refused = outcomes.refused
    lines.append(f"{len(outcomes) - len(refused)} of {len(outcomes)} {'done' if verb == 'complete' else 'failed'}"
                 + (f", {len(refused)} refused" if refused else ""))  # fmt: skip
    if claim_next:
        lines += [claimed_text(t) for t in outcomes.next] or ["nothing more to claim"]
        out.emit({"items": report, "next": [t.to_dict() for t in outcomes.next]}, "\n".join(lines))
    else:
        out.emit(report, "\n".join(lines))
    for outcome in refused:
        click.echo(f"switchboard-local: todo {outcome.todo_id}: {printable(str(outcome.error), one_line=True)}", err=True)
    if refused:
        sys.exit(EXIT_REFUSED)
