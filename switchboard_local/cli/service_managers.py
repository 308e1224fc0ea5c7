"""The two service managers `service` drives: where each keeps the unit, and what it is asked.

systemd's user manager (`systemctl --user`) on Linux and launchd's per-user
agents (`launchctl … gui/UID`) on macOS. Each gives the unit's path and text,
the commands that start and stop it, and its view of the service; nothing
here prints or decides, service.py does.
"""

from __future__ import annotations

import os
import plistlib
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.parsers.expat import ExpatError

from ..core.text import digits
from . import service_units as units

COMMAND_TIMEOUT = 60  # seconds for one systemctl or launchctl call (a start waits for the program to run)
# Where a running user manager keeps its sockets (/run/user/UID/systemd), reachable from this shell or not.
RUNTIME_ROOT = Path("/run/user")


def config_home() -> Path:
    configured = os.environ.get("XDG_CONFIG_HOME", "")
    return Path(configured) if os.path.isabs(configured) else Path.home() / ".config"


@dataclass(frozen=True)
class Ran:
    code: int | None  # None: the program is missing or gave no answer
    out: str
    err: str


def run(argv: list[str]) -> Ran:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=COMMAND_TIMEOUT,
                              stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    except FileNotFoundError:
        return Ran(None, "", f"{argv[0]} is not installed here")
    except subprocess.TimeoutExpired:
        return Ran(None, "", f"no answer within {COMMAND_TIMEOUT} s")
    return Ran(done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class Step:
    argv: list[str]
    done: str  # what it did, for the one line that says so


class ManagerFailed(Exception):
    pass


class Systemd:
    """systemd's user service manager (`systemctl --user`)."""

    name = "systemd"
    logs = "journalctl --user -u switchboard-local"

    def path(self) -> Path:
        return config_home() / "systemd" / "user" / units.SYSTEMD_UNIT

    def render(self, argv: list[str], writable: Path, sandbox: bool) -> str:
        """The unit; ``writable`` is the folder --sandbox leaves writable (the database file's)."""
        return units.systemd_unit(units.exec_line(argv), units.unit_word(str(writable)), sandbox=sandbox)

    def environment_file(self) -> Path:
        """The optional NAME=value file the unit reads (EnvironmentFile=-%E/…)."""
        return config_home() / units.ENV_FILE

    def unreachable(self) -> str | None:
        """Why there is no user service manager to talk to, or None when there is one."""
        ran = run(["systemctl", "--user", "is-system-running"])
        state = ran.out.strip()
        if ran.code is None:
            return f"no user service manager is reachable ({ran.err})"
        if state == "offline" or not state:  # systemctl(1): "offline", the manager is not running
            detail = first_line(ran.err) or state or f"exit {ran.code}"
            return (f"no user service manager is reachable (systemctl --user is-system-running: {detail}); "
                    "a container, or root without a login session, has none")  # fmt: skip
        return None

    def maybe_running_elsewhere(self) -> str | None:
        """A user manager this shell cannot reach (no XDG_RUNTIME_DIR, say) may still run the service."""
        runtime = RUNTIME_ROOT / str(os.getuid()) / "systemd"
        return f"{runtime} exists: your user service manager may be running" if runtime.exists() else None

    def start(self, state: str) -> list[Step]:
        sc, unit = ["systemctl", "--user"], units.SYSTEMD_UNIT
        reload = Step([*sc, "daemon-reload"], "reloaded the user service manager")
        if state == "new":
            return [reload, Step([*sc, "enable", "--now", unit], f"enabled and started {unit}")]
        if state == "changed":
            return [reload, Step([*sc, "enable", unit], f"enabled {unit}"),
                    Step([*sc, "restart", unit], f"restarted {unit} with the new unit")]  # fmt: skip
        return [Step([*sc, "enable", "--now", unit], f"{unit} is enabled and started")]

    def stop(self) -> list[Step]:
        return [
            Step(
                ["systemctl", "--user", "disable", "--now", units.SYSTEMD_UNIT],
                f"stopped and disabled {units.SYSTEMD_UNIT}",
            )
        ]

    def after_removal(self) -> list[Step]:
        return [Step(["systemctl", "--user", "daemon-reload"], "reloaded the user service manager")]

    def view(self) -> dict[str, Any]:
        def ask(verb: str) -> str:
            ran = run(["systemctl", "--user", verb, units.SYSTEMD_UNIT])
            return ran.out.strip() or "unknown"

        return {"active": ask("is-active"), "enabled": ask("is-enabled"), "pid": None}

    def runs(self, text: str) -> str | None:
        lines = [line for line in text.splitlines() if line.startswith("ExecStart=")]
        return lines[0].removeprefix("ExecStart=") if lines else None


class Launchd:
    """launchd's per-user agents, in the GUI login session's domain (`launchctl … gui/UID`)."""

    name = "launchd"

    def __init__(self) -> None:
        self.domain = f"gui/{os.getuid()}"
        self.target = f"{self.domain}/{units.LAUNCHD_LABEL}"
        self.log_file = Path.home() / "Library" / "Logs" / "switchboard-local" / "serve.log"
        self.logs = f"tail -f {shlex.quote(str(self.log_file))}"

    def path(self) -> Path:
        return Path.home() / "Library" / "LaunchAgents" / f"{units.LAUNCHD_LABEL}.plist"

    def render(self, argv: list[str], writable: Path, sandbox: bool) -> str:
        return units.launchd_plist(argv, str(self.log_file))

    def unreachable(self) -> str | None:
        ran = run(["launchctl", "print", self.domain])
        if ran.code is None:
            return ran.err
        if ran.code != 0:
            return f"no GUI login session to run an agent in (launchctl print {self.domain}: {first_line(ran.err) or ran.code})"
        return None

    def maybe_running_elsewhere(self) -> str | None:
        return None

    def loaded(self) -> bool:
        return run(["launchctl", "print", self.target]).code == 0

    def start(self, state: str) -> list[Step]:
        loaded = self.loaded()
        if state == "unchanged" and loaded:
            return []
        steps = [Step(["launchctl", "bootout", self.target], "unloaded the old agent")] if loaded else []
        return [*steps, Step(["launchctl", "enable", self.target], f"enabled {units.LAUNCHD_LABEL}"),
                Step(["launchctl", "bootstrap", self.domain, str(self.path())], f"loaded and started {units.LAUNCHD_LABEL}")]  # fmt: skip

    def stop(self) -> list[Step]:
        return (
            [Step(["launchctl", "bootout", self.target], f"stopped and unloaded {units.LAUNCHD_LABEL}")]
            if self.loaded()
            else []
        )

    def after_removal(self) -> list[Step]:
        return []

    def view(self) -> dict[str, Any]:
        ran = run(["launchctl", "print", self.target])
        if ran.code != 0:
            return {"active": "not loaded", "enabled": None, "pid": None}
        fields: dict[str, str] = {}
        for line in ran.out.splitlines():  # the service's own fields come first, nested sections after
            if " = " in line:
                key, value = line.strip().split(" = ", 1)
                fields.setdefault(key, value)
        pid = fields.get("pid", "")
        return {"active": fields.get("state", "loaded"), "enabled": None, "pid": digits(pid)}

    def runs(self, text: str) -> str | None:
        found = _plist(text).get("ProgramArguments")
        return shlex.join(found) if isinstance(found, list) and all(isinstance(w, str) for w in found) else None


def _plist(text: str) -> dict[str, Any]:
    try:
        found = plistlib.loads(text.encode("utf-8"))
    except (ValueError, ExpatError):  # not a property list (plistlib.InvalidFileException is a ValueError)
        return {}
    return found if isinstance(found, dict) else {}


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def pick(name: str | None) -> Systemd | Launchd:
    chosen = name or ("launchd" if sys.platform == "darwin" else "systemd")
    return Launchd() if chosen == "launchd" else Systemd()
