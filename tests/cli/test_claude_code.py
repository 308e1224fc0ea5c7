"""Every `claude mcp add` line that the README, the docs pages and `doctor` print registers a server
that the real Claude Code connects to.

Each line runs in bash with the real `claude` (npm's @anthropic-ai/claude-code: support/claude_code.py)
in a HOME of its own, the docs' paths standing for real ones (the console script of the
environment running the tests, a temporary database); then `claude mcp get switchboard`, which
starts the registered `switchboard-local mcp` over stdio and asks it to initialize, must say
Connected. Where a line names a database, the server must have opened that one (and not the
default): `get` itself runs with no SWITCHBOARD_DB, so only what was registered can name it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.backends import with_password
from support.claude_code import ClaudeHome, claude_program
from support.cli import REPO_ROOT
from support.postgres import PostgresServer

pytestmark = pytest.mark.claude_code

README_DB = "/path/to/switchboard.db"  # the docs' stand-in for a database file
# Where a user reads the lines: the README, then the docs site's pages.
DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def documented_lines() -> list[str]:
    """Each `claude mcp add` command in the README and the docs: a code block's line, or an inline code span.

    `claude mcp add -s project …` is left out: an ellipsis is no command.
    """
    code, prose, in_block = [], [], False
    for line in "\n".join(path.read_text("utf-8") for path in DOCUMENTS).splitlines():
        if line.startswith("```"):
            in_block = not in_block
        elif in_block:
            code.append(line.strip())
        else:
            prose.append(line)
    found = [line for line in code if line.startswith("claude mcp add")]
    found += re.findall(r"`(claude mcp add [^`]+)`", " ".join(prose))  # a span may run over a line break
    return list(dict.fromkeys(line for line in found if "…" not in line))  # each once, in order


@pytest.fixture(scope="module")
def claude() -> Path:
    return claude_program()


@pytest.fixture
def home(tmp_path: Path, claude: Path) -> ClaudeHome:
    return ClaudeHome(tmp_path, claude)


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh PostgreSQL database's URL, with a password in it and an option after `?` (a second `=`)."""
    server: PostgresServer = request.getfixturevalue("postgres_server")
    plain = server.fresh_database()
    yield f"{with_password(plain)}?connect_timeout=10"
    server.release(plain)


def test_the_docs_have_the_claude_mcp_add_lines_this_file_runs() -> None:
    lines = documented_lines()
    # README's Start here (four), guide/claude-code.md (one more), operations/postgresql.md (one)
    assert len(lines) >= 6, lines
    assert all(" -- " in line for line in lines), lines


@pytest.mark.parametrize("line", documented_lines(), ids=lambda line: re.split(r"\s+#", line)[0])
def test_each_documented_claude_mcp_add_line_registers_a_server_claude_code_connects_to(
    line: str, home: ClaudeHome, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db = tmp_path / "named.db"
    shell_env = {}
    if '"$SWITCHBOARD_DB"' in line:  # operations/postgresql.md: the URL of the PostgreSQL database, exported beforehand
        shell_env["SWITCHBOARD_DB"] = request.getfixturevalue("pg_url")
    # Start here's absolute path for pipx is the form for when ~/.local/bin is not on PATH.
    added = home.shell(line.replace(README_DB, str(db)), on_path="/.local/bin/" not in line, **shell_env)
    assert added.returncode == 0, added.stdout + added.stderr
    bare = line.split(" -- ", 1)[1].startswith("switchboard-local ")
    # A line that names the command by its path works where Claude Code's PATH has none.
    said = home.assert_connected("switchboard", on_path=bare)
    if not bare:
        assert Path(str(home.registered("switchboard")["command"])).is_absolute(), said
    named = home.registered("switchboard").get("env") or {}
    if README_DB in line:
        assert named == {"SWITCHBOARD_DB": str(db)}, said
        assert db.is_file() and not home.default_db.exists()  # the server opened the file the line names
    elif shell_env:
        assert named == shell_env, said
        assert not home.default_db.exists()  # so the server, which connected, opened the URL
    else:
        assert not named, said
        assert home.default_db.is_file()


def doctors_fix(home: ClaudeHome, program: str, *args: str, on_path: bool = True, **env: str) -> str:
    """The fix that `doctor` prints on its `mcp server` line, as a person would copy it."""
    ran = home.shell(shlex.join([program, "doctor", *args]), on_path=on_path, **env)
    lines = [line for line in ran.stdout.splitlines() if re.match(r"\w+\s+mcp server\s", line)]
    assert len(lines) == 1 and "  fix: " in lines[0], ran.stdout + ran.stderr
    return lines[0].split("  fix: ", 1)[1]


@pytest.mark.parametrize("named_by", ["default", "$SWITCHBOARD_DB", "--db"])
def test_doctors_claude_mcp_add_line_registers_a_server_on_its_database(
    named_by: str, home: ClaudeHome, tmp_path: Path
) -> None:
    db = tmp_path / "named.db"
    env = {"SWITCHBOARD_DB": str(db)} if named_by == "$SWITCHBOARD_DB" else {}
    fix = doctors_fix(home, "switchboard-local", *(["--db", str(db)] if named_by == "--db" else []), **env)
    assert fix.startswith("claude mcp add switchboard "), fix
    ran = home.shell(fix)  # with no SWITCHBOARD_DB: what the line registers alone names the database
    assert ran.returncode == 0, ran.stdout + ran.stderr
    home.assert_connected("switchboard")
    if named_by == "default":
        assert home.default_db.is_file() and not db.exists()
    else:
        assert home.registered("switchboard")["env"] == {"SWITCHBOARD_DB": str(db)}
        assert db.is_file() and not home.default_db.exists()


def test_doctors_line_names_switchboard_local_by_its_path_when_it_is_not_on_path(home: ClaudeHome) -> None:
    # pipx's ~/.local/bin before `pipx ensurepath`: the command is typed by its path, Claude Code
    # starts with the same PATH and would not find a bare `switchboard-local`.
    program = str(home.local_bin / "switchboard-local")
    fix = doctors_fix(home, program, on_path=False)
    ran = home.shell(fix, on_path=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert home.registered("switchboard")["command"] == program
    home.assert_connected("switchboard", on_path=False)


def test_doctors_line_replaces_a_registered_server_whose_program_is_gone(home: ClaudeHome, tmp_path: Path) -> None:
    gone = home.shell(f"claude mcp add switchboard -- {tmp_path / 'uninstalled' / 'switchboard-local'} mcp")
    assert gone.returncode == 0, gone.stderr
    fix = doctors_fix(home, "switchboard-local")
    assert fix.startswith("claude mcp remove switchboard && claude mcp add switchboard "), fix
    ran = home.shell(fix)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    home.assert_connected("switchboard")
