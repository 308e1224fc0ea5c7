"""`mcp` and `agent`: serve the MCP surface, and manage the agent profiles that scope it.

The MCP SDK costs about a second to import, so it is imported only inside the
`mcp` command's body; every other command stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..core import agents
from ..core.agents import TOOL_NAMES, Agent
from ..core.errors import SwitchboardError
from ..core.store.shared import DB_ENV
from .common import Database, Out, common, exit_status, operator, printable, table, when

AGENT_ENV = "SWITCHBOARD_AGENT"


def register(main: click.Group) -> None:
    main.add_command(mcp_command)
    main.add_command(agent_group)


@click.command("mcp")
@click.option(
    "--agent",
    "agent_name",
    envvar=AGENT_ENV,
    default=None,
    help=f"Serve as this agent: only its queues and tools (default: ${AGENT_ENV}, else every queue and tool).",
)
@click.option(
    "--db",
    type=Database(),
    default=None,
    help=f"Database file, or a postgresql:// URL (default: ${DB_ENV}, else the user data dir).",
)
@click.option(
    "--ingest",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Run the ingest side (adapters' consumers, pruner): auto leads when no process does and stands by "
    "otherwise; on takes over from the process that leads; off never.",
)
@click.pass_context
def mcp_command(ctx: click.Context, agent_name: str | None, db: Path | None, ingest: str) -> None:
    """Serve the MCP tools on stdin/stdout (Claude Code launches this).

    Nothing but the protocol is written to stdout; logs go to stderr. One
    process on a database leads ingest at a time (`switchboard-local status`
    says which); with --ingest auto this one does whenever no other does.
    """
    from ..process import run_mcp

    parent = ctx.find_root().obj or {}
    try:
        status = run_mcp(db if db is not None else parent.get("db"), agent_name or None, ingest)
    except SwitchboardError as exc:
        click.echo(f"switchboard-local: {printable(str(exc), one_line=True)}", err=True)
        status = exit_status(exc)
    sys.exit(status)


@click.group("agent")
def agent_group() -> None:
    """Agent profiles: the queues an MCP server may drain and the tools it offers."""


def _agent_text(agent: Agent) -> str:
    tools = "every tool" if agent.tools is None else ", ".join(agent.tools)
    return "\n".join(
        [
            f"agent {agent.name}",
            f"  queues   {', '.join(agent.queues)}",
            f"  creates  {', '.join(agent.creates_in)} (where its create_for may put todos)",
            f"  tools    {tools}",
            f"  owner    {agent.owner or '-'}",
            f"  created  {when(agent.created_at)}",
        ]
    )


@agent_group.command("add")
@click.argument("name", help="The profile's name (what `mcp --agent` takes).")
@click.option("--queue", "queues", multiple=True, required=True, help="A queue it may drain (repeatable).")
@click.option(
    "--tool",
    "tools",
    multiple=True,
    type=click.Choice(TOOL_NAMES),
    help="A tool it may use (repeatable; default: every tool).",
)
@click.option(
    "--create-queue",
    "create_queues",
    multiple=True,
    help="A queue its create_for may put todos on (repeatable; default: its own queues).",
)
@click.option("--owner", default=None, help="The person it works for (shown with its claims and in its lease owner).")
@common
def agent_add(
    db: Path | None, as_json: bool | None, name: str, queues: tuple[str, ...], tools: tuple[str, ...],
    create_queues: tuple[str, ...], owner: str | None,
) -> None:  # fmt: skip
    """Create the profile NAME (`mcp --agent NAME` then serves only its queues and tools)."""
    out = Out(db, as_json)
    agent = out.run(
        lambda store: agents.add(store, name, queues=queues, tools=tools or None, create_queues=create_queues or None,
                                 owner=owner, by=operator())  # fmt: skip
    )
    out.emit(agent.to_dict(), f"added {_agent_text(agent)}")


@agent_group.command("list")
@common
def agent_list(db: Path | None, as_json: bool | None) -> None:
    """List the agent profiles."""
    out = Out(db, as_json)
    found = out.run(agents.list_agents)
    rows = [[a.name, ",".join(a.queues), "*" if a.tools is None else ",".join(a.tools), a.owner or "-"] for a in found]
    out.emit([a.to_dict() for a in found], table(["NAME", "QUEUES", "TOOLS", "OWNER"], rows) if rows else "no agents")


@agent_group.command("show")
@click.argument("name", help="The profile's name.")
@common
def agent_show(db: Path | None, as_json: bool | None, name: str) -> None:
    """Show one agent profile."""
    out = Out(db, as_json)
    agent = out.run(lambda store: agents.get(store, name))
    out.emit(agent.to_dict(), _agent_text(agent))


@agent_group.command("remove")
@click.argument("name", help="The profile's name.")
@common
def agent_remove(db: Path | None, as_json: bool | None, name: str) -> None:
    """Delete an agent profile (its todos and their history stay)."""
    out = Out(db, as_json)
    agent = out.run(lambda store: agents.remove(store, name, by=operator()))
    out.emit(agent.to_dict(), f"removed agent {agent.name}")
