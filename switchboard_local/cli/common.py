"""What every command shares: --db and --json, output, and error mapping.

Exit codes: 0 ok; 1 refused (not found, conflict, forbidden); 2 usage or
invalid argument; 3 the database cannot be used (unusable or unavailable);
4 busy (another process held the write lock past the busy timeout); 5 the
listen address cannot be bound (`serve`); 6 the wait ran out before every
todo named had finished (`todo wait --timeout`); 130 interrupted (Ctrl-C).

Every error is one line on stderr, ``switchboard-local: CODE: sentence``, and
nothing written to a terminal carries a raw control character: names, titles
and payloads come from outside and may hold escape sequences.
"""

from __future__ import annotations

import asyncio
import getpass
import inspect
import json
import os
import re
import stat
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ..core.clock import rfc3339
from ..core.errors import (
    Busy,
    InvalidArgument,
    StoreUnusable,
    SwitchboardError,
    Unavailable,
)
from ..core.store.interface import Store
from ..core.store.opener import open_store
from ..core.store.shared import DB_ENV, Location, is_url
from ..core.text import NON_C0_CONTROLS, decimal, digits, escape_controls
from ..core.todo_model import INT64_MAX, dump_json

T = TypeVar("T")

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNUSABLE = 3
EXIT_BUSY = 4
EXIT_CANNOT_LISTEN = 5
EXIT_TIMED_OUT = 6
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT

# The most `@FILE` or `@-` may hold: far above any payload cap the database sets,
# low enough that `@/dev/zero`-like input cannot exhaust memory.
MAX_READ = 64 * 1024 * 1024


# The one table from the core's errors to exit statuses (every command, `mcp`
# included); any other refusal (not_found, conflict, forbidden) exits 1.
EXIT_STATUS: tuple[tuple[type[SwitchboardError], int], ...] = (
    (InvalidArgument, EXIT_USAGE),
    (StoreUnusable, EXIT_UNUSABLE),
    (Unavailable, EXIT_UNUSABLE),
    (Busy, EXIT_BUSY),
)


def operator() -> str:
    """Who runs this command: the OS user, as the audit trail and claims name them."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment
        return "cli"


def exit_status(exc: SwitchboardError) -> int:
    return next((status for kind, status in EXIT_STATUS if isinstance(exc, kind)), EXIT_REFUSED)


# ---------------------------------------------------------------- text safe to print

_SURROGATES = re.compile("[\ud800-\udfff]")  # undecodable bytes of an argument (surrogateescape)
# What json.dumps(ensure_ascii=False) leaves raw but a terminal acts on (every
# control but C0, which it escapes itself), and lone surrogates.
_JSON_RAW = re.compile(f"[{NON_C0_CONTROLS}\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group(0)):04x}"


def printable(text: str, *, one_line: bool = False) -> str:
    """Text safe for a terminal: control characters and undecodable bytes as visible escapes."""
    return _SURROGATES.sub(_escape, escape_controls(text, keep_newlines=not one_line))


def json_text(value: Any, **options: Any) -> str:
    """JSON (stays valid) with no raw DEL, C1 or bidi control and no lone surrogate in it."""
    return _JSON_RAW.sub(_escape, json.dumps(value, ensure_ascii=False, **options))


def warn(message: str) -> None:
    """One line on stderr for something done but likely not what was meant."""
    click.echo(f"switchboard-local: warning: {printable(message, one_line=True)}", err=True)


# ---------------------------------------------------------------- parameters


class _AsciiNumber:
    """click's numbers are read by int() and float(), which take other scripts' digits
    ('٣' is 3), spaces, underscores, nan and inf: these take ASCII digits alone, with
    a leading minus (core/text.py), then click checks the range."""

    whole = True

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            bare = value.removeprefix("-")
            if (digits(bare) if self.whole else decimal(bare)) is None:
                kind = "a whole number" if self.whole else "a number"
                self.fail(f"{value!r} is not {kind} in ASCII digits", param, ctx)  # type: ignore[attr-defined]
        return super().convert(value, param, ctx)  # type: ignore[misc]


class Int(_AsciiNumber, click.types.IntParamType):
    pass


class IntRange(_AsciiNumber, click.IntRange):
    pass


class FloatRange(_AsciiNumber, click.FloatRange):
    whole = False


INT = Int()
# An id: what SQLite's INTEGER PRIMARY KEY can hold.
ID = IntRange(1, INT64_MAX)


class Duration(click.ParamType):
    """Seconds, as ``90``, ``90s``, ``30m``, ``24h`` or ``7d``."""

    name = "DURATION"
    UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        match = re.fullmatch(r"\s*([0-9]{1,9})\s*([smhd]?)\s*", value)
        if match is None:
            self.fail(f"{value!r} is not a duration like 90s, 30m, 24h or 7d", param, ctx)
        number, unit = match.groups()
        return int(number) * self.UNITS[unit]


def read_argument_file(source: str) -> str:
    """The text of ``@FILE`` (``-``: stdin), refused when it is no regular file, too large or not UTF-8.

    A FIFO, a device or a directory is refused before reading, so that nothing
    blocks on a pipe without a writer and nothing streams forever.
    """
    name = "stdin" if source == "-" else source
    if source == "-":
        try:
            data = sys.stdin.buffer.read(MAX_READ + 1)
        except (AttributeError, OSError, ValueError):  # stdin closed (<&-) or gone
            raise InvalidArgument("cannot read stdin") from None
    else:
        try:
            fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise InvalidArgument(f"cannot read {name}: {exc.strerror}") from None
        except ValueError:  # a NUL byte in the path
            raise InvalidArgument(f"cannot read {name}: not a valid path") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InvalidArgument(f"{name} is not a regular file (use @- to read stdin)")
        with os.fdopen(fd, "rb") as file:
            try:
                data = file.read(MAX_READ + 1)
            except OSError as exc:
                raise InvalidArgument(f"cannot read {name}: {exc.strerror}") from None
    if len(data) > MAX_READ:
        raise InvalidArgument(f"{name} is larger than {MAX_READ // (1024 * 1024)} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{name} is not valid UTF-8 text (byte {exc.start})") from None


class JsonValue(click.ParamType):
    """A JSON text, ``@FILE`` to read one from a file, or ``@-`` for stdin."""

    name = "JSON|@FILE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        text = value
        if value.startswith("@"):
            try:
                text = read_argument_file(value[1:])
            except SwitchboardError as exc:
                self.fail(exc.message, param, ctx)
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


class Database(click.ParamType):
    """--db: a file path, or a PostgreSQL URL (``postgresql://…`` or ``postgres://…``) kept as it is."""

    name = "path|url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Location:
        if isinstance(value, Path) or is_url(value):
            return value  # type: ignore[no-any-return]
        return click.Path(dir_okay=False, path_type=Path).convert(value, param, ctx)  # type: ignore[no-any-return]


def common(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--db and --json, accepted on every command (and on the group)."""
    fn = click.option("--json", "as_json", is_flag=True, default=None, help="Print one JSON value on stdout.")(fn)
    fn = click.option(
        "--db",
        type=Database(),
        default=None,
        help=f"Database file, or a postgresql:// URL (default: ${DB_ENV}, else the user data dir).",
    )(fn)
    return fn


# ---------------------------------------------------------------- help


def first_sentence(text: str) -> str:
    """The first sentence of a help text's first paragraph (up to its first '.', '!' or '?' before a space)."""
    paragraph = " ".join(inspect.cleandoc(text).split("\n\n")[0].split())
    found = re.match(r"(.+?[.!?])(?:\s|$)", paragraph)
    return found.group(1) if found else paragraph


def listed_whole(group: click.Group) -> None:
    """Give every command under ``group`` its help's first sentence as the line that lists it.

    click would cut each help at 45 characters (mid-phrase, or inside a
    `quoted command`); a listing shows the whole sentence instead, wrapped at words.
    """
    for command in group.commands.values():
        if command.short_help is None and command.help:
            command.short_help = first_sentence(command.help)
        if isinstance(command, click.Group):
            listed_whole(command)


# ---------------------------------------------------------------- the root group


class Commands(click.Group):
    """The root group: click's own errors in the one error format, exit 2.

    click reports a bad option before any command runs; it is printed like any
    other refusal (``switchboard-local: invalid_argument: …``), and a script
    reading --json output gets the same error object on stdout. ``--help`` and
    ``--version`` still exit 0; Ctrl-C exits 130 quietly.
    """

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:  # fmt: skip
        argv = list(sys.argv[1:] if args is None else args)
        if not standalone_mode:
            return super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            status = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.Abort:
            status = EXIT_INTERRUPTED
        except click.ClickException as exc:
            status = _usage_error(exc, as_json="--json" in argv)
        sys.exit(status if isinstance(status, int) else 0)  # a command's return value is no status


def _usage_error(exc: click.ClickException, *, as_json: bool) -> int:
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        message = "missing command"
        if not as_json:
            click.echo(exc.format_message())  # the group's help, on stdout: what a person typing it wants
    elif isinstance(exc, click.MissingParameter):
        # All the program's own words (the parameter, and a Choice's choices, which click lays out on
        # lines of their own): folded onto the one line, where escaping would show them as \x0a\x09.
        message = " ".join(exc.format_message().split())
        message = message[:1].lower() + message[1:]
    elif isinstance(exc, click.BadParameter) and exc.param:
        message = f"{exc.param.get_error_hint(ctx).replace(chr(39), '')}: {exc.message}"  # --lease: …
    else:
        message = exc.format_message()
        message = message[:1].lower() + message[1:]  # "Missing option …" reads as our sentences do
    message = message.rstrip(".")
    if as_json:
        click.echo(json_text({"error": {"code": InvalidArgument.code, "message": message}}))
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    click.echo(f"switchboard-local: {InvalidArgument.code}: {printable(message, one_line=True)}{hint}", err=True)
    return EXIT_USAGE


# ---------------------------------------------------------------- output


class Out:
    """Where a command's answer goes: JSON or text for people."""

    def __init__(self, db: Location | None, as_json: bool | None) -> None:
        parent = click.get_current_context().find_root().obj or {}
        self.db = db if db is not None else parent.get("db")
        self.json = bool(as_json if as_json is not None else parent.get("json"))

    def run(self, verb: Callable[[Store], Awaitable[T]]) -> T:
        """Open the store, run one core call, close; map core errors to exits."""

        async def go() -> T:
            async with await open_store(self.db) as store:
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
            click.echo(json_text({"error": {"code": exc.code, "message": exc.message}}))
        click.echo(f"switchboard-local: {printable(str(exc), one_line=True)}", err=True)
        sys.exit(exit_status(exc))

    def emit(self, value: Any, text: str) -> None:
        click.echo(json_text(value, indent=2) if self.json else printable(text))


def when(ms: int | None) -> str:
    return rfc3339(ms) or "-"


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Aligned columns; a cell is one line (a newline in a name cannot forge a row)."""
    cells = [headers] + [[printable(str(c), one_line=True) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)
