"""The live views (`todo watch`, `events tail`): a line per new row until Ctrl-C or until no one reads.

With --json each row is one JSON object on one line (JSON Lines), flushed as
it is written. Where stdout is a terminal the line is aligned columns,
coloured by state; elsewhere it is plain tab-separated text. Ctrl-C ends the
view with 130, as it ends every command; a reader that goes away (``| head``)
ends it quietly with 0.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, TypeVar

import click

from ..core.events import Event
from ..core.store.interface import Store
from ..core.todo_model import Todo
from .common import Out, json_text, printable, when

T = TypeVar("T")

STATE_COLOURS = {"pending": "yellow", "claimed": "cyan", "done": "green", "dead letter": "red", "cancelled": "magenta"}


def follow(
    out: Out,
    feed: Callable[[Store], AsyncIterator[list[T]]],
    *,
    line: Callable[[T, bool], str],
    to_json: Callable[[T], Any],
) -> None:
    """Print each row the feed brings, one line each, until interrupted or no one reads stdout."""
    terminal = sys.stdout is not None and sys.stdout.isatty()

    async def view(store: Store) -> None:
        if _reader_gone():
            return
        async with aclosing(feed(store)) as batches:
            async for batch in batches:
                try:
                    for row in batch:
                        click.echo(json_text(to_json(row)) if out.json else line(row, terminal))  # echo flushes
                except BrokenPipeError:
                    _discard_stdout()
                    return
                if not batch and _reader_gone():  # a quiet spell: is anyone still reading?
                    return

    out.run(view)


def _reader_gone() -> bool:
    """Whether stdout has no reader any more (a pipe whose reader exited, a hung-up terminal).

    Polled for errors only, so nothing is written; without it a view piped to
    ``head`` would only notice at the next row, which may never come.
    """
    if sys.stdout is None:  # started with stdout closed
        return True
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture), or no poll() here
        return False
    poller.register(fd, 0)  # errors and hang-ups are always reported
    return any(events & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _, events in poller.poll(0))


def _discard_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered for a vanished reader cannot fail at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _cells(cells: list[tuple[str, int, str | None]], terminal: bool) -> str:
    """One line: on a terminal each cell padded to its width (a longer one pushes the rest) and coloured;
    elsewhere the cells joined by tabs. Every cell is escaped: rows come from outside."""
    if not terminal:
        return "\t".join(printable(text, one_line=True) for text, _, _ in cells)
    shown = []
    for text, width, colour in cells:
        cell = printable(text, one_line=True)
        padding = " " * max(0, abs(width) - len(cell))
        styled = click.style(cell, fg=colour) if colour else cell
        shown.append(padding + styled if width < 0 else styled + padding)  # negative width: right-aligned
    return "  ".join(shown).rstrip()


def todo_line(todo: Todo, terminal: bool) -> str:
    state = "dead letter" if todo.dead_letter else todo.state
    return _cells(
        [
            (when(todo.created_at), 0, None),
            (str(todo.id), -6, None),
            (state, 11, STATE_COLOURS.get(state)),
            (todo.queue, 16, None),
            (todo.title, 0, None),
        ],
        terminal,
    )


def event_line(event: Event, terminal: bool) -> str:
    verified = "yes" if event.verified else "NO"
    return _cells(
        [
            (when(event.received_at), 0, None),
            (str(event.id), -6, None),
            (event.source, 16, None),
            (event.type, 24, None),
            (verified, 3, "green" if event.verified else "red"),
            (str(event.size), -8, None),
            (event.external_id, 0, None),
        ],
        terminal,
    )
