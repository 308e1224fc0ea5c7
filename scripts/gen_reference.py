"""Writes the docs site's reference pages from the code: docs/reference/*.md.

    python scripts/gen_reference.py            # rewrites docs/reference/
    python scripts/gen_reference.py --out DIR  # writes them into DIR instead

Each page is made from what the program itself says, so it cannot drift from
it: every command's ``--help`` (click), every MCP tool's description and
input and output schemas (tools/list of the server, over its JSON-RPC), the
HTTP routes of the receiver's app with the dashboard beside it, and the
error codes with their exit statuses and HTTP statuses (the tables
``cli/common.py``'s ``EXIT_STATUS`` and ``http/app.py``'s ``STATUS``, and
``core/errors.py``). tests/test_docs.py runs this into a temporary folder and
fails when a page here differs: after changing any of those, run it again.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import click
from mcp import Client
from starlette.routing import Mount, Route

from switchboard_local.cli import common as cli_common
from switchboard_local.cli.main import main
from switchboard_local.core import errors
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.dashboard.app import Dashboard
from switchboard_local.dashboard.guard import SAFE_METHODS
from switchboard_local.http import app as web
from switchboard_local.mcp import listing
from switchboard_local.mcp.server import INSTRUCTIONS, build_server

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "reference"
PROGRAM = "switchboard-local"
HELP_WIDTH = 100  # columns of the --help text on the pages (a terminal's width changes only the wrapping)
NOTE = "<!-- Written by scripts/gen_reference.py from the code; run it again after changing what it reads. -->"


def page(title: str, *parts: str) -> str:
    return "\n\n".join([f"# {title}", NOTE, *parts]).rstrip() + "\n"


def fenced(text: str, lang: str = "text") -> str:
    return f"```{lang}\n{text.rstrip()}\n```"


def wrapped(text: str) -> str:
    """Prose for a text block: each paragraph wrapped at HELP_WIDTH columns."""
    return "\n\n".join(textwrap.fill(" ".join(p.split()), HELP_WIDTH) for p in text.split("\n\n"))


def cell(text: str) -> str:
    """Text for a table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


# ---------------------------------------------------------------- commands


def commands(group: click.Group, ctx: click.Context) -> Iterator[tuple[click.Command, click.Context]]:
    """Every command under ``group``, depth first in the order --help lists them, with its context."""
    yield group, ctx
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        child = click.Context(command, info_name=name, parent=ctx)
        if isinstance(command, click.Group):
            yield from commands(command, child)
        else:
            yield command, child


def commands_page() -> str:
    root = click.Context(main, info_name=PROGRAM, terminal_width=HELP_WIDTH, max_content_width=HELP_WIDTH)
    sections = [
        (
            "Every command's `--help`, as `switchboard-local COMMAND --help` prints it. "
            "The guide explains them with examples: [Commands](../guide/commands.md)."
        )
    ]
    for command, ctx in commands(main, root):
        sections.append(f"## {ctx.command_path}\n\n{fenced(command.get_help(ctx))}")
    return page("Command reference", *sections)


# ---------------------------------------------------------------- MCP tools


async def listed_tools(store: Store) -> list[dict]:
    """tools/list as the server answers it (every tool: no agent narrows it)."""
    async with Client(build_server(store, session_id="reference"), mode="legacy") as client:
        tools = (await client.list_tools()).tools
    return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]


def mcp_page(tools: list[dict]) -> str:
    sections = [
        (
            "Every tool of `switchboard-local mcp` as its `tools/list` answers: the description the model "
            "reads, the input schema and the output schema. The guide explains them with an agent's loop: "
            "[Use with Claude Code](../guide/claude-code.md). A failed call's text starts with one of "
            f"its error codes: {listing.CODES} ([errors](errors.md))."
        ),
        "## The server's instructions\n\nWhat the server tells the model at `initialize`:\n\n"
        + fenced(wrapped(INSTRUCTIONS)),
    ]
    for tool in tools:
        hints = tool.get("annotations", {})
        kind = "read-only" if hints.get("readOnlyHint") else "writes"
        sections.append(
            f"## {tool['name']}\n\n"
            f"{kind}\n\n"
            f"{fenced(wrapped(tool['description']))}\n\n"
            f"Input schema:\n\n{fenced(json.dumps(tool['inputSchema'], indent=2, ensure_ascii=False), 'json')}\n\n"
            f"Output schema:\n\n{fenced(json.dumps(tool['outputSchema'], indent=2, ensure_ascii=False), 'json')}"
        )
    return page("MCP tools", *sections)


# ---------------------------------------------------------------- HTTP routes


def http_page(store: Store) -> str:
    board = Dashboard(store, host="127.0.0.1", port=8787, token="reference", exempt=web.RECEIVER_PATHS)
    app = web.create_app(store, routes=board.routes(), middleware=board.middleware())
    rows = ["| method | path | part | needs |", "|---|---|---|---|"]
    for route in app.routes:
        if isinstance(route, Mount):
            path, methods = route.path + "/{path}", ["GET"]
        else:
            assert isinstance(route, Route), route
            path, methods = route.path, sorted(route.methods or (), key=["GET", "HEAD", "POST"].index)
        shown = [m for m in methods if m != "HEAD"]  # Starlette answers HEAD wherever it answers GET
        if board.policy.exempted(path):
            part, needs = "receiver", "nothing (the guard leaves the receiver's paths alone)"
        elif all(m in SAFE_METHODS for m in shown):
            part, needs = "dashboard", "the dashboard's token (cookie or `Authorization: Bearer`), an allowed `Host`"
        else:
            part, needs = (
                "dashboard",
                "the token, an allowed `Host`, the CSRF token (`X-CSRF-Token`) and the same origin",
            )
        rows.append(f"| {', '.join(shown)} | `{path}` | {part} | {needs} |")
    intro = (
        "Every route of the HTTP server that `serve` runs (and an `mcp` that leads ingest with "
        "`http.listen` set), as its app lists them, in the order they are matched. Each `GET` also "
        "answers `HEAD`. What the receiver's routes answer: [Webhooks](../guide/webhooks.md); the "
        "dashboard's: [Dashboard](../guide/dashboard.md)."
    )
    statuses = ["| error | code | status |", "|---|---|---|"]
    for kind, status in web.STATUS:
        statuses.append(f"| `{kind.__name__}` | `{kind.code}` | {status} |")
    statuses.append("| anything else | | 500 |")
    return page(
        "HTTP routes",
        intro,
        "\n".join(rows),
        "## Errors to statuses\n\n"
        "`http/app.py`'s `STATUS`: the core's error family to HTTP statuses, the first row that matches "
        "(a subclass matches its family's row); a 503 always carries `Retry-After`.\n\n" + "\n".join(statuses),
    )


# ---------------------------------------------------------------- errors and exit codes


def error_kinds() -> list[type[errors.SwitchboardError]]:
    """core/errors.py's classes, in the order they are defined."""
    found = [
        value
        for _, value in inspect.getmembers(errors, inspect.isclass)
        if issubclass(value, errors.SwitchboardError) and value.__module__ == errors.__name__
    ]
    return sorted(found, key=lambda kind: inspect.getsourcelines(kind)[1])


def errors_page() -> str:
    codes = ["| code | error | what it means | exit status | HTTP status |", "|---|---|---|---:|---:|"]
    for kind in error_kinds():
        if kind is errors.SwitchboardError:
            continue
        if kind.__subclasses__():  # a family, never raised itself: its members have the statuses
            exit_status = http_status = "its members'"
            name = f"`{kind.__name__}` (a family: the rows below it)"
        else:
            sample = kind("reference")
            exit_status, http_status = str(cli_common.exit_status(sample)), str(web.status_of(sample))
            name = f"`{kind.__name__}`"
        codes.append(f"| `{kind.code}` | {name} | {cell(inspect.getdoc(kind) or '')} | {exit_status} | {http_status} |")
    exits = ["| name | status |", "|---|---:|"]
    for name, value in vars(cli_common).items():
        if name.startswith("EXIT_") and isinstance(value, int):
            exits.append(f"| `{name}` | {value} |")
    table = ["| error | exit status |", "|---|---:|"]
    for kind, status in cli_common.EXIT_STATUS:
        table.append(f"| `{kind.__name__}` (`{kind.code}`) | {status} |")
    table.append(f"| any other (`not_found`, `conflict`, `forbidden`) | {cli_common.EXIT_REFUSED} |")
    return page(
        "Errors and exit codes",
        "Every error has one code, which each edge maps once: to the CLI's exit status, to an HTTP status, "
        "and to the start of an MCP tool error's text. How they read in use: "
        "[Reliability and security](../operations/reliability.md) and [Commands](../guide/commands.md).",
        "## Error codes\n\n`core/errors.py`'s family, with the exit status and the HTTP status each one gets."
        "\n\n" + "\n".join(codes),
        "## Exit codes\n\n`cli/common.py` says:\n\n" + fenced(inspect.getdoc(cli_common) or "") + "\n\n"
        "Its constants:\n\n" + "\n".join(exits) + "\n\n"
        "and its `EXIT_STATUS` table, errors to exit statuses (the first row that matches):\n\n" + "\n".join(table),
    )


# ---------------------------------------------------------------- all of them


async def pages() -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="switchboard-reference-") as tmp:
        store = await open_store(Path(tmp) / "reference.db")
        try:
            tools = await listed_tools(store)
            http = http_page(store)
        finally:
            await store.close()
    return {
        "commands.md": commands_page(),
        "mcp-tools.md": mcp_page(tools),
        "http-routes.md": http,
        "errors.md": errors_page(),
    }


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"the folder to write them in (default: {OUT})")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in asyncio.run(pages()).items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main_())
