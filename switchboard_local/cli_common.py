"""What every command shares: --db and --json, output, and error mapping.

Exit codes: 0 ok; 1 refused (not found, conflict, forbidden); 2 usage or
invalid argument; 3 the database cannot be used (unusable or unavailable);
4 busy (another process held the write lock past the busy timeout); 5 the
listen address cannot be bound (`serve`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .clock import rfc3339
from .errors import Busy, InvalidArgument, StoreUnusable, SwitchboardError, Unavailable
from .store import DB_ENV, Store
from .todo_model import dump_json

T = TypeVar("T")

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNUSABLE = 3
EXIT_BUSY = 4
EXIT_CANNOT_LISTEN = 5


def exit_status(exc: SwitchboardError) -> int:
    """The one table from the core's errors to exit statuses (the CLI and `mcp`)."""
    if isinstance(exc, InvalidArgument):
        return EXIT_USAGE
    if isinstance(exc, (StoreUnusable, Unavailable)):
        return EXIT_UNUSABLE
    if isinstance(exc, Busy):
        return EXIT_BUSY
    return EXIT_REFUSED


# An id: what SQLite's INTEGER PRIMARY KEY can hold.
ID = click.IntRange(1, 2**63 - 1)


class JsonValue(click.ParamType):
    """A JSON text, ``@FILE`` to read one from a file, or ``@-`` for stdin."""

    name = "JSON|@FILE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        text = value
        if value.startswith("@"):
            source = value[1:]
            try:
                text = sys.stdin.read() if source == "-" else Path(source).read_text("utf-8")
            except OSError as exc:
                self.fail(f"cannot read {source}: {exc.strerror}", param, ctx)
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            self.fail(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", param, ctx)
        except (ValueError, RecursionError) as exc:  # e.g. a 5,000-digit number, absurd nesting
            self.fail(f"not JSON this tool can take: {type(exc).__name__}", param, ctx)
        try:
            dump_json("it", value)  # what a payload or result can hold: valid UTF-8, not too deep
        except SwitchboardError as exc:
            self.fail(exc.message.removeprefix("it "), param, ctx)
        return value


def common(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--db and --json, accepted on every command (and on the group)."""
    fn = click.option("--json", "as_json", is_flag=True, default=None, help="Print one JSON value on stdout.")(fn)
    fn = click.option(
        "--db",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=f"Database file (default: ${DB_ENV}, else the user data dir).",
    )(fn)
    return fn


class Commands(click.Group):
    """The root group: usage errors answer in JSON too when --json was asked for.

    click reports a bad option before any command runs, on stderr only; a
    script reading --json output gets the same error object as for any other
    refusal, and the same exit code 2.
    """

    def main(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().main(args, *rest, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            if "--json" in getattr(self, "_argv", ()):
                click.echo(json.dumps({"error": {"code": "invalid_argument", "message": exc.format_message()}}))
            raise


class Out:
    """Where a command's answer goes: JSON or text for people."""

    def __init__(self, db: Path | None, as_json: bool | None) -> None:
        parent = click.get_current_context().find_root().obj or {}
        self.db = db if db is not None else parent.get("db")
        self.json = bool(as_json if as_json is not None else parent.get("json"))

    def run(self, verb: Callable[[Store], Awaitable[T]]) -> T:
        """Open the store, run one core call, close; map core errors to exits."""

        async def go() -> T:
            async with await Store.open(self.db) as store:
                return await verb(store)

        try:
            return asyncio.run(go())
        except SwitchboardError as exc:
            self.fail(exc)
        except UnicodeEncodeError:  # undecodable bytes in an argument (a filter, a name)
            self.fail(InvalidArgument("an argument is not valid UTF-8 text"))
        raise AssertionError("unreachable")  # fail() exits

    def fail(self, exc: SwitchboardError) -> None:
        if self.json:
            click.echo(json.dumps({"error": {"code": exc.code, "message": exc.message}}))
        click.echo(f"switchboard-local: {exc}", err=True)
        sys.exit(exit_status(exc))

    def emit(self, value: Any, text: str) -> None:
        click.echo(json.dumps(value, ensure_ascii=False, indent=2) if self.json else text)


def when(ms: int | None) -> str:
    return rfc3339(ms) or "-"


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)
