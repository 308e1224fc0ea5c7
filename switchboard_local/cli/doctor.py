"""`doctor`: checks the installation and reports, one line per check, with the fix for each that is not ok.

The core's checks (``core/health.py``: the database, the webhook sources'
secrets, the adapters' brokers) run first, then this machine's surroundings:
Claude Code on PATH, a `switchboard` MCP server registered for this
directory, the MCP SDK importing. Exit 0 when nothing fails (warnings
allowed), 1 otherwise. Nothing is created or changed.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click

from .. import process
from ..core import health
from ..core.errors import SwitchboardError
from ..core.health import FAIL, OK, WARN, Check, Context
from ..core.store.shared import DB_ENV, Location, default_path, describe, location
from .common import Out, common, json_text, printable
from .service import current_command

SERVER_NAME = "switchboard"  # the name the README registers the MCP server under
CLAUDE_VERSION_TIMEOUT = 5.0  # seconds `claude --version` may take (it starts Node)


def register(main: click.Group) -> None:
    main.add_command(doctor)


@click.command("doctor")
@common
def doctor(db: Location | None, as_json: bool | None) -> None:
    """Check the database, the sources' secrets, the adapters' brokers, Claude Code and the MCP SDK.

    One line per check: ok, warn or fail, and for each that is not ok the
    command that fixes it. Exits 1 when a check fails (warnings are fine).
    Changes nothing: a missing database is not created.
    """
    out = Out(db, as_json)
    ctx = _context(out.db)
    checks = asyncio.run(health.run(ctx, CHECKS))
    ok = all(c.status != FAIL for c in checks)
    if out.json:
        click.echo(json_text({"ok": ok, "checks": [c.to_dict() for c in checks]}, indent=2))
    else:
        click.echo("\n".join(_lines(checks)))
    if not ok:
        sys.exit(1)


def _context(db: Location | None) -> Context:
    """The database path in use and where it came from: --db, $SWITCHBOARD_DB, or the default."""
    origin = "--db" if db is not None else "$SWITCHBOARD_DB" if os.environ.get(DB_ENV) else "default"
    try:
        path = location(db) if db is not None else default_path()
    except SwitchboardError as exc:  # ~nobody/…: the home of no user
        return Context(path=None, origin=origin, path_error=exc.message)
    return Context(path=path, origin=origin, probes=process.doctor_probes())


def _lines(checks: list[Check]) -> Iterator[str]:
    width = max(len(c.name) for c in checks)
    for c in checks:
        fix = f"  fix: {c.fix}" if c.fix else ""
        yield printable(f"{c.status:<4}  {c.name:<{width}}  {c.detail}{fix}", one_line=True)


# ---------------------------------------------------------------- Claude Code


async def claude_cli(ctx: Context) -> list[Check]:
    """`claude` on PATH, and answering --version (a warning without it: the CLI and serve work alone)."""
    found = shutil.which("claude", path=ctx.env.get("PATH", os.defpath))
    if found is None:
        return [Check("claude", WARN, "Claude Code (claude) is not on PATH: agents reach switchboard-local through it",
                      "npm install -g @anthropic-ai/claude-code")]  # fmt: skip
    try:
        answer = await asyncio.to_thread(
            subprocess.run, [found, "--version"], capture_output=True, text=True, timeout=CLAUDE_VERSION_TIMEOUT,
            stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Check("claude", WARN, f"{found} does not answer --version ({type(exc).__name__})",
                      f"{shlex.quote(found)} --version")]  # fmt: skip
    version = (answer.stdout.strip().splitlines() or ["?"])[0]
    if answer.returncode != 0:
        return [
            Check("claude", WARN, f"{found} --version exits {answer.returncode}", f"{shlex.quote(found)} --version")
        ]
    return [Check("claude", OK, f"{found} ({version})")]


async def mcp_server(ctx: Context) -> list[Check]:
    """A switchboard MCP server registered for this directory, in any of Claude Code's three scopes.

    Read from Claude Code's files rather than `claude mcp list`, which starts
    every registered server: ``.mcp.json`` here or in a parent folder
    (project scope), and ``~/.claude.json`` (``$CLAUDE_CONFIG_DIR/.claude.json``),
    whose ``projects`` entry for this folder or a parent holds the local
    scope and whose top level holds the user scope.
    """
    cwd = Path.cwd()
    found, unreadable = _registrations(cwd, _claude_json(ctx.env))
    if found:
        scope, where, name, server = found[0]  # Claude Code's precedence: local, then project, then user
        words = _words(server)
        detail = f"{name!r} in {scope} scope ({where}): {shlex.join(words) if words[0] else server.get('url', '?')}"
        env = server.get("env")
        if isinstance(env, dict) and env.get(DB_ENV):
            detail += f", {DB_ENV}={env[DB_ENV]}"
        program = words[0]
        if program and not (shutil.which(program, path=ctx.env.get("PATH", os.defpath)) or Path(program).is_file()):
            return [Check("mcp server", WARN, f"{detail}: {program} is not found on PATH",
                          _add_command(ctx, replace=name))]  # fmt: skip
        return [Check("mcp server", OK, detail)]
    note = f"; cannot read {', '.join(unreadable)}" if unreadable else ""
    return [Check("mcp server", WARN, f"no {SERVER_NAME!r} MCP server registered for {cwd}{note}", _add_command(ctx))]


def _claude_json(env: Mapping[str, str]) -> Path:
    folder = env.get("CLAUDE_CONFIG_DIR")
    return Path(folder).expanduser() / ".claude.json" if folder else Path.home() / ".claude.json"


def _registrations(cwd: Path, claude_json: Path) -> tuple[list[tuple[str, str, str, dict[str, Any]]], list[str]]:
    """(scope, file, name, server) of every switchboard server that applies here, by precedence; files unreadable."""
    found: list[tuple[str, str, str, dict[str, Any]]] = []
    unreadable: list[str] = []
    folders = [cwd, *cwd.parents]
    user = _read_json(claude_json, unreadable)
    projects = user.get("projects") if isinstance(user.get("projects"), dict) else {}
    for folder in folders:  # local scope: this folder's entry, or the nearest parent's
        entry = projects.get(str(folder))
        if isinstance(entry, dict):
            found += [("local", f"{claude_json}, project {folder}", *s) for s in _ours(entry.get("mcpServers"))]
    for folder in folders:
        mcp_json = folder / ".mcp.json"
        if mcp_json.is_file():
            found += [("project", str(mcp_json), *s) for s in _ours(_read_json(mcp_json, unreadable).get("mcpServers"))]
    found += [("user", str(claude_json), *s) for s in _ours(user.get("mcpServers"))]
    return found, unreadable


def _read_json(path: Path, unreadable: list[str]) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError):
        unreadable.append(str(path))
        return {}
    return value if isinstance(value, dict) else {}


def _ours(servers: Any) -> list[tuple[str, dict[str, Any]]]:
    """The servers named switchboard, or running `switchboard-local mcp` under another name."""
    if not isinstance(servers, dict):
        return []
    found = []
    for name, server in servers.items():
        if not isinstance(server, dict):
            continue
        words = _words(server)
        runs_ours = any("switchboard-local" in w or "switchboard_local" in w for w in words) and "mcp" in words
        if name == SERVER_NAME or runs_ours:
            found.append((str(name), server))
    return sorted(found, key=lambda s: s[0] != SERVER_NAME)


def _words(server: dict[str, Any]) -> list[str]:
    """A registered server's command and arguments ("" as the command of a server that runs none: http, sse)."""
    args = server.get("args")
    return [str(server.get("command") or ""), *(map(str, args) if isinstance(args, list) else [])]


def _add_command(ctx: Context, replace: str | None = None) -> str:
    """`claude mcp add` for this database (its path when it is not the default).

    The server's name comes before -e, which takes every value up to the next
    option (Claude Code refuses the name as a malformed NAME=value). The
    program is switchboard-local found on PATH, else the one running now
    (pipx's ~/.local/bin before `pipx ensurepath`): a bare name Claude Code
    could not find would register a server that never starts.
    """
    # A URL's password is hidden: the command is printed (type it in with the password).
    env = ["-e", f"{DB_ENV}={describe(ctx.path)}"] if ctx.origin != "default" and ctx.path is not None else []
    found = shutil.which("switchboard-local", path=ctx.env.get("PATH", os.defpath))
    try:
        program = [found] if found else current_command()
    except SwitchboardError:  # no program to name (sys.executable empty): the bare name, as the README gives it
        program = ["switchboard-local"]
    add = shlex.join(["claude", "mcp", "add", SERVER_NAME, *env, "--", *program, "mcp"])
    return f"{shlex.join(['claude', 'mcp', 'remove', replace])} && {add}" if replace else add


# ---------------------------------------------------------------- the MCP SDK


async def mcp_sdk(ctx: Context) -> list[Check]:
    """The MCP SDK imports, as `switchboard-local mcp` imports it."""
    try:
        version = process.mcp_sdk_version()
    except Exception as exc:  # noqa: BLE001 (whatever the import raises: a missing module, a broken native part)
        return [Check("mcp sdk", FAIL, f"the MCP server cannot start: {type(exc).__name__}: {exc}",
                      f"{shlex.quote(sys.executable)} -m pip install {shlex.quote(_requirement('mcp'))}")]  # fmt: skip
    return [Check("mcp sdk", OK, f"mcp {version} imports")]


def _requirement(name: str) -> str:
    from importlib import metadata

    try:
        wanted = metadata.requires("switchboard-local") or []
    except metadata.PackageNotFoundError:
        wanted = []
    return next((r.split(";")[0].strip() for r in wanted if r.startswith(name)), name)


# The core's checks, then this machine's surroundings. (A check of the store
# belongs in health.CHECKS; one of the machine, here.)
CHECKS: tuple[health.CheckGroup, ...] = (*health.CHECKS, claude_cli, mcp_server, mcp_sdk)
