"""Waiting for todos to finish: a result you can wait on (``todo wait``, the MCP tool wait_todos).

A producer that made todos (an agent's ``create_for``, a script's ``todo
create``) waits for them as a claim waits for work: each commit to the file,
from any process, wakes it to look again (``watch.Changes``), and so does every
RECHECK_SECONDS, since a lease can lapse into a dead letter with nothing
committed. It never polls faster than the long poll does.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from ..errors import InvalidArgument, NotFound
from ..store.interface import Store
from ..store.queries import Q
from ..todo_model import Todo
from .claims import RECHECK_SECONDS, settle_lapsed

if TYPE_CHECKING:  # as in claims.py: a type only
    from ..watch import Changes

FINISHED = ("done", "failed", "cancelled")  # failed: a dead letter (its attempts used up)
MAX_WAITED = 100  # todos one wait may name


def finished(todo: Todo) -> bool:
    """Done, a dead letter or cancelled: nothing more will happen to it unless an operator redrives it."""
    return todo.state in FINISHED


def _ids(todo_ids: Sequence[int]) -> list[int]:
    """The ids named, each once, in the order first named; checked."""
    if isinstance(todo_ids, (str, bytes)) or not todo_ids:
        raise InvalidArgument("name at least one todo id")
    ids: list[int] = []
    for todo_id in todo_ids:
        if isinstance(todo_id, bool) or not isinstance(todo_id, int) or todo_id < 1:
            raise InvalidArgument(f"a todo id is a positive integer, got {todo_id!r}")
        if todo_id not in ids:
            ids.append(todo_id)
    if len(ids) > MAX_WAITED:
        raise InvalidArgument(f"at most {MAX_WAITED} todos in one wait, got {len(ids)}")
    return ids


async def of_ids(
    store: Store, todo_ids: Sequence[int], *, queues: Sequence[str] | None = None, own: Collection[int] = ()
) -> list[Todo]:
    """The todos named, as they are now, in the order named (each once).

    ``queues``: a scope each must be in, unless its id is among ``own`` (todos
    the caller made, wherever it put them). NotFound names every id that does
    not exist (or is out of the scope), and nothing is answered.
    """
    ids = _ids(todo_ids)
    await settle_lapsed(store)
    rows = await store.read_all(Q.todos_by_ids, {"ids": json.dumps(ids)})
    found = {t.id: t for t in map(Todo.from_row, rows) if queues is None or t.queue in queues or t.id in own}
    missing = [todo_id for todo_id in ids if todo_id not in found]
    if len(missing) == 1:
        raise NotFound(f"todo {missing[0]} does not exist")
    if missing:
        raise NotFound(f"todos {', '.join(map(str, missing))} do not exist")
    return [found[todo_id] for todo_id in ids]


async def wait_finished(
    store: Store,
    todo_ids: Sequence[int],
    *,
    wait: float,
    changes: Changes,
    queues: Sequence[str] | None = None,
    own: Collection[int] = (),
) -> list[Todo]:
    """The todos named once every one is finished, or as they are when ``wait`` seconds have passed.

    ``wait``: seconds, 0 for a look without waiting, ``math.inf`` for as long as
    it takes. ``changes`` must be running (``watch.following``); ``queues`` and
    ``own`` as for ``of_ids``. Which of them were done, failed or cancelled, or
    are still pending or claimed, the caller reads from the answer.
    """
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or math.isnan(wait) or wait < 0:
        raise InvalidArgument(f"the wait is a number of seconds, 0 or more, got {wait!r}")
    deadline = time.monotonic() + wait
    while True:
        seen = changes.count  # before the look: a commit during it still wakes the wait below
        found = await of_ids(store, todo_ids, queues=queues, own=own)
        remaining = deadline - time.monotonic()
        if all(map(finished, found)) or remaining <= 0:
            return found
        await changes.wait(seen, timeout=min(remaining, RECHECK_SECONDS))
