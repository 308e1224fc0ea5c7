"""The unit files `service install` writes: a systemd user unit and a launchd agent.

A unit names the executable and the database path, nothing else from this
shell: no environment value is ever copied in (a secret in a unit file is a
secret the service manager shows to anyone who asks it). A PostgreSQL
database's URL, which may hold a password, is not written into the unit
either: `install` puts it in the owner-only environment file the systemd
unit reads (ENV_FILE), as SWITCHBOARD_DB, and the unit runs serve without
--db (``environment_line``, ``with_environment_line``). packaging/systemd/
and packaging/launchd/ hold the same texts with placeholders, for packagers;
tests/cli/test_service.py checks that they match these.

What hardening a user unit can have is decided here; the reasons are in the
comments of the unit itself, so that whoever reads the installed file sees them.
"""

from __future__ import annotations

import plistlib
import re
from collections.abc import Sequence

from ..core.errors import InvalidArgument
from ..core.text import first_control

SYSTEMD_UNIT = "switchboard-local.service"
LAUNCHD_LABEL = "dev.switchboard-local"
# The optional file of NAME=value lines the systemd unit reads, under $XDG_CONFIG_HOME (%E).
ENV_FILE = "switchboard-local/service.env"

# The first line of every file `install` writes: how `uninstall` tells its own file from someone else's.
MARKER = "Written by `switchboard-local service install`; `switchboard-local service uninstall` removes it."
INSTALLED_HEADER = (
    MARKER,
    "Install rewrites this file; keep your changes in a drop-in (systemctl --user edit switchboard-local).",
)
LAUNCHD_INSTALLED_HEADER = (MARKER, "Install rewrites this file.")

# The packaging templates: the same texts with placeholders a packager replaces.
TEMPLATE_EXEC_START = "@EXECUTABLE@ serve --db @DB@ @SERVE_ARGS@"
TEMPLATE_HEADER = (
    "switchboard-local serve as a systemd user service: a template for packagers.",
    "`switchboard-local service install` writes this unit for you, filled in.",
    "By hand: replace @EXECUTABLE@ (the absolute path of switchboard-local), @DB@ (the",
    "database file), @DB_DIR@ (its folder) and @SERVE_ARGS@ (more serve options, or",
    "nothing), then copy it to ~/.config/systemd/user/ with mode 0600.",
    "Generated from switchboard_local/cli/service_units.py; tests/cli/test_service.py",
    "checks that the two match.",
)
LAUNCHD_TEMPLATE_HEADER = (
    "switchboard-local serve as a launchd agent: a template for packagers.",
    "`switchboard-local service install` writes this agent for you, filled in.",
    "By hand: replace @EXECUTABLE@ (the absolute path of switchboard-local), @DB@ (the",
    "database file), @SERVE_ARGS@ (more serve options, one string each, or remove it)",
    "and @LOG_FILE@ (under ~/Library/Logs), then copy it to ~/Library/LaunchAgents/.",
    "Generated from switchboard_local/cli/service_units.py; tests/cli/test_service.py",
    "checks that the two match.",
)

_SYSTEMD = """\
{header}
[Unit]
Description=switchboard-local: webhook receiver, broker adapters and pruner (serve)

[Service]
# Type=exec: a start fails when the program cannot be run, not a moment later.
Type=exec
ExecStart={exec_start}
Restart=on-failure
RestartSec=5s
# Exit status 2 is a usage error (a bad serve option): no restart can mend it.
RestartPreventExitStatus=2
# The service gets none of your shell's environment. Secrets that sources read
# from it (--secret-env, --url-env) go in this optional owner-only file,
# NAME=value per line, as does SWITCHBOARD_DB for a PostgreSQL database (install
# writes it there); no value is ever written into this unit.
EnvironmentFile=-%E/{env_file}

# Hardening that a user service manager applies without user namespaces:
# prctl flags and seccomp filters. serve needs no more than AF_UNIX, AF_INET
# and AF_INET6 sockets, and no memory that is both writable and executable.
NoNewPrivileges=yes
UMask=0077
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
LockPersonality=yes
MemoryDenyWriteExecute=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
RestrictNamespaces=yes
SystemCallArchitectures=native

# Filesystem sandboxing, on with `switchboard-local service install --sandbox`.
# In a user unit these imply PrivateUsers=yes (systemd 254 and later), which
# needs unprivileged user namespaces: where the kernel refuses them the service
# fails to start (status 217/USER or 226/NAMESPACE). Before 254 a user unit
# ignores them. The database folder stays writable.
{off}PrivateTmp=yes
{off}ProtectSystem=strict
{off}ProtectHome=read-only
{off}ReadWritePaths={db_dir}

[Install]
WantedBy=default.target
"""


# ---------------------------------------------------------------- systemd


def systemd_unit(exec_start: str, db_dir: str, *, sandbox: bool, header: Sequence[str] = INSTALLED_HEADER) -> str:
    """The unit's text; ``exec_start`` and ``db_dir`` already in unit-file syntax (see ``exec_line``)."""
    return _SYSTEMD.format(
        header="\n".join(f"# {line}" for line in header),
        exec_start=exec_start,
        env_file=ENV_FILE,
        off="" if sandbox else "#",
        db_dir=db_dir,
    )


# A word that needs no quotes in a unit file (specifiers and variables are escaped anyway).
_PLAIN = re.compile(r"[A-Za-z0-9_@%$+=:,./-]+")


def _checked(word: str) -> str:
    bad = first_control(word)
    if bad is not None:
        raise InvalidArgument(f"{word!r} holds a control character ({bad}), which no unit file can carry")
    return word


def unit_word(word: str, *, expands_variables: bool = False) -> str:
    """One word of a unit-file setting, read back by systemd exactly as given.

    ``%`` starts a specifier everywhere (``%%``); ``$`` starts a variable in
    command lines (``$$``); a word with a space, a quote or a backslash goes in
    double quotes with those escaped.
    """
    text = _checked(word).replace("%", "%%")
    if expands_variables:
        text = text.replace("$", "$$")
    if _PLAIN.fullmatch(word):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_line(argv: Sequence[str]) -> str:
    """ExecStart='s value for this argument vector.

    systemd takes the program's path literally (no variables) and refuses one
    holding a quote or a backslash; the arguments after it expand variables.
    """
    program, *arguments = argv
    if any(c in program for c in "\"'\\"):
        raise InvalidArgument(f"systemd cannot start a program whose path holds a quote or a backslash: {program!r}")
    return " ".join([unit_word(program), *(unit_word(word, expands_variables=True) for word in arguments)])


# ---------------------------------------------------------------- the environment file

# A value systemd reads back unquoted as it is: no backslash, quote, whitespace or '$' (taken
# literally there, but a reader should not wonder), no '#' (a comment only at a line's start).
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_@%+=:,./?&~!*;()\[\]-]+")


def environment_line(name: str, value: str) -> str:
    """``NAME=value`` as systemd's EnvironmentFile= reads it back exactly: plain when it can
    be, else in single quotes (whose text systemd takes verbatim)."""
    bad = first_control(value)
    if bad is not None:
        raise InvalidArgument(f"${name} holds a control character ({bad}), which an environment file cannot carry")
    if _PLAIN_VALUE.fullmatch(value):
        return f"{name}={value}"
    if "'" in value:
        raise InvalidArgument(f"${name} holds a single quote, which the service's environment file cannot carry "
                              "quoted: percent-encode it (%27)")  # fmt: skip
    return f"{name}='{value}'"


def with_environment_line(text: str | None, name: str, line: str) -> str:
    """An environment file's ``text`` with ``line`` as its one assignment of ``name``: in
    place of the first one there was (others removed), else at the end; every other line kept."""
    assigns = re.compile(rf"\s*{re.escape(name)}\s*=")
    kept: list[str] = []
    placed = False
    for existing in (text or "").splitlines():
        if assigns.match(existing):
            if not placed:
                kept.append(line)
                placed = True
            continue
        kept.append(existing)
    if not placed:
        kept.append(line)
    return "\n".join(kept) + "\n"


_ASSIGNS = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=")


def assigned_names(text: str) -> set[str]:
    """The names an environment file assigns (comment lines, starting '#' or ';', assign none)."""
    return {found.group(1) for line in text.splitlines() if (found := _ASSIGNS.match(line))}


# ---------------------------------------------------------------- launchd


def launchd_plist(argv: Sequence[str], log_file: str, *, header: Sequence[str] = LAUNCHD_INSTALLED_HEADER) -> str:
    """The agent's property list: started at login, restarted when it crashes or fails, logs to ``log_file``."""
    for word in (*argv, log_file):
        _checked(word)
    agent = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": list(argv),
        "RunAtLoad": True,
        # Restarted after a failure (a non-zero exit) or a crash (a signal); a clean stop stays stopped.
        "KeepAlive": {"SuccessfulExit": False, "Crashed": True},
        "ThrottleInterval": 10,
        "Umask": 0o077,
        "StandardOutPath": log_file,
        "StandardErrorPath": log_file,
    }
    text = plistlib.dumps(agent, sort_keys=False).decode("utf-8")
    # An XML comment cannot hold "--": the header lines are written without one.
    comment = "".join(f"<!-- {line.replace('--', '- -')} -->\n" for line in header)
    head, sep, rest = text.partition("<plist ")
    return head + comment + sep + rest


# ---------------------------------------------------------------- whose file


def written_by_install(text: str) -> bool:
    """Whether ``text`` is a file `service install` wrote: the marker on one of its first lines."""
    return any(line.strip() in (f"# {MARKER}", f"<!-- {MARKER} -->") for line in text.splitlines()[:4])


def templates() -> dict[str, str]:
    """The packaging templates, by their path in the repository."""
    return {
        "packaging/systemd/switchboard-local.service": systemd_unit(
            TEMPLATE_EXEC_START, "@DB_DIR@", sandbox=False, header=TEMPLATE_HEADER
        ),
        f"packaging/launchd/{LAUNCHD_LABEL}.plist": launchd_plist(
            ["@EXECUTABLE@", "serve", "--db", "@DB@", "@SERVE_ARGS@"], "@LOG_FILE@", header=LAUNCHD_TEMPLATE_HEADER
        ),
    }
