"""Agent profiles (issue 5 §3): the core verbs and the `agent` commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from switchboard_local.core import agents
from switchboard_local.core.agents import TOOL_NAMES
from switchboard_local.core.errors import Conflict, InvalidArgument, NotFound

from support.cli import as_json

pytestmark = pytest.mark.anyio


def test_agent_add_show_list_remove_round_trip(cli) -> None:
    added = as_json(cli, "agent", "add", "reviewer", "--queue", "review", "--queue", "triage", "--tool", "claim_next",
                    "--tool", "complete")  # fmt: skip
    assert {k: added[k] for k in ("name", "queues", "tools")} == {
        "name": "reviewer", "queues": ["review", "triage"], "tools": ["claim_next", "complete"]
    }  # fmt: skip
    as_json(cli, "agent", "add", "helper", "--queue", "help")
    assert as_json(cli, "agent", "show", "helper")["tools"] is None  # every tool
    assert [a["name"] for a in as_json(cli, "agent", "list")] == ["helper", "reviewer"]
    code, out, _, _ = cli("agent", "show", "reviewer")
    assert code == 0 and "review, triage" in out and "claim_next, complete" in out
    assert as_json(cli, "agent", "remove", "reviewer")["name"] == "reviewer"
    assert [a["name"] for a in as_json(cli, "agent", "list")] == ["helper"]


def test_agent_add_create_queue_sets_where_its_create_for_may_put_todos(cli) -> None:
    added = as_json(cli, "agent", "add", "dispatcher", "--queue", "inbox", "--create-queue", "review",
                    "--create-queue", "billing")  # fmt: skip
    assert added["create_queues"] == ["review", "billing"]
    assert as_json(cli, "agent", "add", "plain", "--queue", "q")["create_queues"] == ["q"]  # default: its own
    code, out, _, _ = cli("agent", "show", "dispatcher")
    assert code == 0 and "creates  review, billing" in out


def test_agent_add_refuses_a_tool_that_is_not_one_of_the_thirteen(cli) -> None:
    code, _, err, _ = cli("agent", "add", "x", "--queue", "q", "--tool", "drop_tables")
    assert code == 2 and "--tool" in err
    assert as_json(cli, "agent", "list") == []


def test_agent_add_needs_a_queue(cli) -> None:
    code, _, err, _ = cli("agent", "add", "x")
    assert code == 2 and "--queue" in err


def test_agent_add_refuses_an_existing_name_with_conflict(cli) -> None:
    as_json(cli, "agent", "add", "x", "--queue", "q")
    code, _, err, _ = cli("agent", "add", "x", "--queue", "other")
    assert code == 1 and "conflict: agent 'x' exists already" in err
    assert as_json(cli, "agent", "show", "x")["queues"] == ["q"]


def test_an_unknown_agent_is_not_found(cli) -> None:
    for command in ("show", "remove"):
        code, _, err, _ = cli("agent", command, "ghost")
        assert code == 1 and "not_found: agent 'ghost' does not exist" in err


async def test_the_core_checks_names_queues_and_tools(store) -> None:
    with pytest.raises(InvalidArgument, match="agent name"):
        await agents.add(store, "two words", queues=["q"])
    with pytest.raises(InvalidArgument, match="at least one queue"):
        await agents.add(store, "a", queues=[])
    with pytest.raises(InvalidArgument, match="unknown tool 'nope'"):
        await agents.add(store, "a", queues=["q"], tools=["claim", "nope"])
    agent = await agents.add(store, "a", queues=["q", "q"], tools=list(TOOL_NAMES))
    assert agent.queues == ("q",) and agent.may_use("replay_event")
    with pytest.raises(Conflict):
        await agents.add(store, "a", queues=["q"])
    await agents.remove(store, "a")
    with pytest.raises(NotFound):
        await agents.get(store, "a")


def test_agent_commands_do_not_import_the_mcp_sdk(db_path: Path) -> None:
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from switchboard_local.cli.main import main\n"
        f"r = CliRunner().invoke(main, ['agent', 'add', 'a', '--queue', 'q', '--db', {str(db_path)!r}])\n"
        "assert r.exit_code == 0, r.output\n"
        f"r = CliRunner().invoke(main, ['agent', 'list', '--db', {str(db_path)!r}])\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.') or m == 'pydantic'))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_agent_add_owner_names_the_person_it_works_for(cli) -> None:
    added = as_json(cli, "agent", "add", "reviewer", "--queue", "review", "--owner", "alice")
    assert added["owner"] == "alice"
    assert as_json(cli, "agent", "add", "helper", "--queue", "help")["owner"] is None
    code, out, _, _ = cli("agent", "show", "reviewer")
    assert code == 0 and "owner    alice" in out
    code, out, _, _ = cli("agent", "list")
    assert "OWNER" in out and "alice" in out


async def test_an_agents_owner_must_be_one_line_of_text(store) -> None:
    with pytest.raises(InvalidArgument, match="owner"):
        await agents.add(store, "reviewer", queues=["review"], owner="alice\x1b[2J")
    with pytest.raises(InvalidArgument, match="owner"):
        await agents.add(store, "reviewer", queues=["review"], owner=" ")
    assert await agents.list_agents(store) == []
