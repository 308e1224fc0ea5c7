"""`todo wait`: a result you can wait on, from a script or a shell (exit 0, 1 or 6)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from ..core import todos, watch
from ..core.store.interface import Store
from ..core.todo_model import Todo
from .common import EXIT_REFUSED, EXIT_TIMED_OUT, ID, FloatRange, Out, common, printable


async def _waited(store: Store, todo_ids: tuple[int, ...], timeout: float | None) -> list[Todo]:
    async with watch.following(store) as changes:
        wait = math.inf if timeout is None else timeout
        return await todos.wait_finished(store, todo_ids, wait=wait, changes=changes)


def _end(todo: Todo) -> str:
    """How a todo stands: "done", "dead letter (boom)", "cancelled by ann (not needed)", "pending"."""
    if todo.dead_letter:
        return "dead letter" + (f" ({todo.last_error})" if todo.last_error else "")
    if todo.state == "cancelled":
        return f"cancelled by {todo.cancelled_by}" + (f" ({todo.cancel_reason})" if todo.cancel_reason else "")
    return todo.state


def _result(todo: Todo) -> str:
    return "" if todo.result is None else " -> " + json.dumps(todo.result, ensure_ascii=False)


@click.command("wait")
@click.argument("todo_ids", metavar="ID...", type=ID, nargs=-1, required=True,
                help=f"The todos to wait for (at most {todos.MAX_WAITED}).")  # fmt: skip
@click.option("--timeout", type=FloatRange(min=0), default=None,
              help="Seconds to wait at most; 0 looks once (default: until every one finishes).")  # fmt: skip
@common
def todo_wait(db: Path | None, as_json: bool | None, todo_ids: tuple[int, ...], timeout: float | None) -> None:
    """Wait until every todo named is finished: done, a dead letter, or cancelled.

    Each commit from any process wakes it to look again, as a long poll is
    woken; it never polls faster. It answers each todo's state and result (a
    line each; --json: {"todos": [...], "finished": true|false}). Exit 0 when
    every one is done; 1 when any ended as a dead letter or was cancelled; 6
    when --timeout ran out first, however the others ended. Those that are
    not done are named on stderr.
    """
    out = Out(db, as_json)
    found = out.run(lambda store: _waited(store, todo_ids, timeout))
    unfinished = [t for t in found if not todos.finished(t)]
    lines = [f"todo {t.id} {_end(t)}: {t.title}" + _result(t) for t in found]
    out.emit({"todos": [t.to_dict() for t in found], "finished": not unfinished}, "\n".join(lines))
    if unfinished:
        named = ", ".join(f"todo {t.id} is {t.state}" for t in unfinished)
        click.echo(f"switchboard-local: timed out after {timeout:g} s: {named}", err=True)
        sys.exit(EXIT_TIMED_OUT)
    not_done = [t for t in found if t.state != "done"]
    if not_done:
        named = printable("; ".join(f"todo {t.id} is a {_end(t)}" if t.dead_letter else f"todo {t.id} was {_end(t)}"
                                    for t in not_done), one_line=True)  # fmt: skip
        click.echo(f"switchboard-local: {named}", err=True)
        sys.exit(EXIT_REFUSED)
