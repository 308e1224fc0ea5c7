"""The real Claude Code CLI (npm's @anthropic-ai/claude-code), for the tests that run the
`claude mcp add` lines we print (tests/cli/test_claude_code.py).

scripts/test.sh installs it into .venv/claude-code; $SWITCHBOARD_TEST_CLAUDE names
another `claude`. A missing one fails the tests that need it, never skips them.

``ClaudeHome`` is a temporary HOME with a project folder in it, where a line runs
in bash as a person would type it. `claude mcp get NAME` starts the registered server
over stdio and asks it to initialize, which needs no login and no network: "Connected"
means that Claude Code started our `mcp` from what was registered and it answered.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = ROOT / ".venv" / "claude-code" / "node_modules" / ".bin" / "claude"
TIMEOUT = 120  # seconds for one claude command (`mcp get` starts the server and waits for its answer)
# Claude Code reaches out for updates, telemetry and error reports: none of that here.
QUIET = {"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}  # fmt: skip
_CONNECTED = re.compile(r"^\s*Status:.*\bConnected\b", re.MULTILINE)


def claude_program() -> Path:
    """The `claude` to run: $SWITCHBOARD_TEST_CLAUDE, else the one scripts/test.sh installs; it must answer."""
    program = Path(os.environ.get("SWITCHBOARD_TEST_CLAUDE") or INSTALLED)
    try:
        ran = subprocess.run([str(program), "--version"], capture_output=True, text=True, timeout=TIMEOUT,
                             env={**os.environ, **QUIET}, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    except OSError as exc:
        pytest.fail(f"Claude Code's CLI is not at {program} ({exc.strerror}): run `bash scripts/test.sh`, "
                    "which installs it there with npm (or set SWITCHBOARD_TEST_CLAUDE to a `claude`)")  # fmt: skip
    assert ran.returncode == 0, f"{program} --version exits {ran.returncode}: {ran.stderr}"
    return program


def switchboard_script() -> Path:
    """The console script pip installed beside the interpreter running the tests."""
    script = Path(sys.executable).parent / "switchboard-local"
    assert script.is_file(), f"no {script}: install this checkout into {sys.prefix} (bash scripts/test.sh does)"
    return script


class ClaudeHome:
    """A HOME of its own, holding the project folder where lines run and `switchboard-local` links.

    The links stand where the README's installs put the command: ``~/.local/bin``
    (pipx's) and ``~/.venvs/switchboard/bin`` (the README's virtualenv), both to
    the console script of the environment running the tests. ``~/.local/bin`` is
    on PATH only when a line asks for it (``on_path``): pipx's folder is not on
    Debian's PATH until `pipx ensurepath` and a new shell.
    """

    def __init__(self, tmp_path: Path, claude: Path) -> None:
        self.home = tmp_path / "home"
        self.project = self.home / "project"
        self.project.mkdir(parents=True)
        self.claude_bin = tmp_path / "claude-bin"  # `claude` alone, whatever else its npm folder holds
        self.claude_bin.mkdir()
        (self.claude_bin / "claude").symlink_to(claude)
        self.local_bin = self.home / ".local" / "bin"
        script = switchboard_script()
        for folder in (self.local_bin, self.home / ".venvs" / "switchboard" / "bin"):
            folder.mkdir(parents=True)
            (folder / "switchboard-local").symlink_to(script)
        # Where the database goes when nothing names one (platformdirs' user data folder, under this HOME).
        self.default_db = self.home / ".local" / "share" / "switchboard-local" / "switchboard.db"

    def env(self, *, on_path: bool = True, **more: str) -> dict[str, str]:
        """A bare environment: this HOME, `claude` and the system on PATH (and ~/.local/bin when ``on_path``)."""
        folders = [str(self.claude_bin), *([str(self.local_bin)] if on_path else []), "/usr/bin", "/bin"]
        return {"HOME": str(self.home), "PATH": os.pathsep.join(folders), "LANG": "C.UTF-8", **QUIET, **more}

    def shell(self, line: str, *, on_path: bool = True, **more: str) -> subprocess.CompletedProcess[str]:
        """``line`` in bash, in the project folder, as typed there."""
        return subprocess.run(["bash", "-c", line], cwd=self.project, env=self.env(on_path=on_path, **more),
                              capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
                              check=False)  # fmt: skip

    def registered(self, name: str) -> dict[str, object]:
        """The server ``name`` as `claude mcp add` wrote it for this project (local scope), or user scope."""
        config = json.loads((self.home / ".claude.json").read_text())
        local = config.get("projects", {}).get(str(self.project), {}).get("mcpServers", {})
        found = local.get(name) or config.get("mcpServers", {}).get(name)
        assert isinstance(found, dict), f"no server {name!r} registered: {config}"
        return found

    def assert_connected(self, name: str, *, on_path: bool = True) -> str:
        """`claude mcp get NAME` (with no SWITCHBOARD_DB of its own) says Connected; its answer."""
        ran = self.shell(f"claude mcp get {name}", on_path=on_path)
        said = ran.stdout + ran.stderr
        assert ran.returncode == 0 and _CONNECTED.search(ran.stdout), f"{said}\n{self._server_logs()}"
        return said

    def _server_logs(self) -> str:
        """Claude Code's log of its attempts to start servers, for a failure's message."""
        logs = sorted((self.home / ".cache").glob("claude-cli-nodejs/*/mcp-logs-*/*"))
        return "\n".join(f"{log}:\n{log.read_text(errors='replace')[-4000:]}" for log in logs)
