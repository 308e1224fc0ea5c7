"""`service install|uninstall|status`: the unit files and what the service manager is asked to do.

Units are written to a temporary HOME / XDG_CONFIG_HOME. `systemctl` and
`launchctl` are fakes first on PATH that log their arguments and answer as
a test tells them (a user service manager, none, or one that fails): the
fault hook for what a test machine cannot do for real. The unit's syntax is
checked by the real `systemd-analyze verify` where it is installed.
"""

from __future__ import annotations

import json
import os
import plistlib
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from switchboard_local.cli import service, service_managers, service_units

from support import fake_broker
from support.backends import PASSWORD, with_password
from support.cli import REPO_ROOT, Result, invoke, run_cli
from support.postgres import PostgresServer

UNIT = "switchboard-local.service"
LABEL = "dev.switchboard-local"

FAKE_SYSTEMCTL = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_LOG"
case " $* " in *" is-system-running "*)
    if [ "$FAKE_MANAGER" = offline ]; then echo offline; exit 1; fi
    echo running; exit 0;;
esac
if [ "$FAKE_MANAGER" = offline ]; then echo "Failed to connect to bus: No medium found" >&2; exit 1; fi
if [ -n "$FAKE_FAIL" ]; then case " $* " in *" $FAKE_FAIL "*)
    echo "Failed to $FAKE_FAIL unit: Access denied" >&2; exit 1;;
esac; fi
case " $* " in
    *" is-active "*) echo "${FAKE_ACTIVE:-active}";;
    *" is-enabled "*) echo "${FAKE_ENABLED:-enabled}";;
esac
exit 0
"""

FAKE_LAUNCHCTL = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_LOG"
if [ "$1" = print ]; then
    case "$2" in */dev.switchboard-local)
        if [ -n "$FAKE_LOADED" ]; then
            printf '%s = {\\n\\tstate = running\\n\\tpid = %s\\n}\\n' "$2" "${FAKE_PID:-4242}"; exit 0
        fi
        echo "Could not find service" >&2; exit 113;;
    esac
    echo "$2 = {"; exit 0
fi
exit 0
"""


class Box:
    """A temporary home with fake service managers on PATH; ``cli()`` runs a command in it."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.config = tmp_path / "config"
        self.db = tmp_path / "data" / "switchboard.db"
        self.log = tmp_path / "manager.log"
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for name, text in (("systemctl", FAKE_SYSTEMCTL), ("launchctl", FAKE_LAUNCHCTL)):
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
        self.env: dict[str, str | None] = {
            "HOME": str(self.home), "XDG_CONFIG_HOME": str(self.config), "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "FAKE_LOG": str(self.log), "FAKE_MANAGER": "running", "FAKE_FAIL": None, "FAKE_LOADED": None,
            "FAKE_PID": None,
            "SUDO_USER": None, "SWITCHBOARD_DB": None, "XDG_DATA_HOME": str(tmp_path / "data-home"),
        }  # fmt: skip

    @property
    def unit(self) -> Path:
        return self.config / "systemd" / "user" / UNIT

    @property
    def plist(self) -> Path:
        return self.home / "Library" / "LaunchAgents" / f"{LABEL}.plist"

    @property
    def env_file(self) -> Path:
        return self.config / "switchboard-local" / "service.env"

    def cli(self, *args: str, db: Path | str | None = None, **env: str | None) -> Result:
        # --db first: whatever follows `--` is serve's.
        return invoke(None, "--db", str(db or self.db), "service", *args, env={**self.env, **env})

    def calls(self) -> list[str]:
        """What the service manager was asked to change (its queries left out), and the log emptied."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.unlink(missing_ok=True)
        return [line for line in lines if not line.startswith(("--user is-", "print"))]


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Box]:
    monkeypatch.setattr(service_managers, "RUNTIME_ROOT", tmp_path / "run-user")  # no real user manager seems to run
    yield Box(tmp_path)


def this_command() -> list[str]:
    """What a unit runs when the command runs in this process (as `python -m switchboard_local`)."""
    return [os.path.abspath(sys.executable), "-m", "switchboard_local"]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---------------------------------------------------------------- systemd: install


def test_install_writes_an_owner_only_unit_for_this_executable_and_database_then_starts_it(box: Box) -> None:
    result = box.cli("install")
    assert result.code == 0, result.err
    text = box.unit.read_text()
    assert text.splitlines()[0] == f"# {service_units.MARKER}"
    assert f"ExecStart={' '.join(this_command())} serve --db {box.db}\n" in text
    assert mode(box.unit) == 0o600
    for folder in (box.config, box.config / "systemd", box.unit.parent):
        assert mode(folder) == 0o700, folder
    assert box.calls() == ["--user daemon-reload", f"--user enable --now {UNIT}"]
    assert f"wrote {box.unit}" in result.out
    assert f"enabled and started {UNIT} (systemctl --user enable --now {UNIT})" in result.out
    assert "logs: journalctl --user -u switchboard-local" in result.out
    assert box.db.exists()  # checked usable before any unit was written


def test_the_unit_goes_under_home_when_xdg_config_home_is_unset(box: Box) -> None:
    assert box.cli("install", XDG_CONFIG_HOME=None).code == 0
    assert (box.home / ".config" / "systemd" / "user" / UNIT).is_file()
    assert not box.unit.exists()


def test_install_leaves_an_existing_folder_as_it_was(box: Box) -> None:
    box.config.mkdir(mode=0o755)
    box.config.chmod(0o755)
    assert box.cli("install").code == 0
    assert mode(box.config) == 0o755
    assert mode(box.unit.parent) == 0o700


def test_the_unit_is_owner_only_whatever_the_umask(box: Box) -> None:
    previous = os.umask(0)
    try:
        assert box.cli("install").code == 0
    finally:
        os.umask(previous)
    assert mode(box.unit) == 0o600


def test_install_again_leaves_an_unchanged_unit_alone(box: Box) -> None:
    assert box.cli("install").code == 0
    before = box.unit.stat()
    box.calls()
    again = box.cli("install")
    assert again.code == 0, again.err
    assert "is installed already, unchanged" in again.out
    after = box.unit.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert box.calls() == [f"--user enable --now {UNIT}"]  # no reload; starts it only if it was stopped


def test_install_on_another_database_rewrites_the_unit_and_restarts_it(box: Box, tmp_path: Path) -> None:
    assert box.cli("install").code == 0
    box.calls()
    other = tmp_path / "other" / "b.db"
    result = box.cli("install", db=other)
    assert result.code == 0, result.err
    assert f"serve --db {other}\n" in box.unit.read_text()
    assert box.calls() == ["--user daemon-reload", f"--user enable {UNIT}", f"--user restart {UNIT}"]
    assert f"rewrote {box.unit}" in result.out


def test_serve_options_after_the_separator_are_checked_and_carried(box: Box) -> None:
    result = box.cli("install", "--", "--port", "9000", "--host", "127.0.0.1")
    assert result.code == 0, result.err
    assert f"serve --db {box.db} --port 9000 --host 127.0.0.1\n" in box.unit.read_text()
    for bad in (["--port", "nope"], ["--bogus"], ["--db", "/x.db"], ["--json"], ["--help"]):
        refused = box.cli("install", "--", *bad)
        assert refused.code == 2, (bad, refused.err)
        assert refused.err.startswith("switchboard-local: invalid_argument: ")
    assert "--port 9000" in box.unit.read_text()  # a refused install changed nothing


def test_the_unit_holds_no_environment_value(box: Box) -> None:
    secret = "hunter2-not-in-any-unit"
    env = {"GH_SECRET": secret, "REDIS_URL": f"redis://:{secret}@127.0.0.1:6379/0"}
    added = invoke(box.db, "source", "add", "gh", "--kind", "github", "--secret-env", "GH_SECRET", env=env)
    assert added.code == 0, added.err
    adapter = invoke(box.db, "adapter", "add", "orders", "--redis-url-env", "REDIS_URL", "--mode", "stream",
                     "--key", "k", env=env)  # fmt: skip
    assert adapter.code == 0, adapter.err
    result = box.cli("install", **env)
    assert result.code == 0, result.err
    text = box.unit.read_text()
    assert secret not in text
    assert [line for line in text.splitlines() if line.startswith("Environment")] == [
        "EnvironmentFile=-%E/switchboard-local/service.env"
    ]
    assert "gh reads $GH_SECRET (set in this shell), orders reads $REDIS_URL (set in this shell)" in result.out
    assert str(box.config / "switchboard-local" / "service.env") in result.out
    assert secret not in result.out + result.err


def test_install_names_the_variables_an_adapter_s_broker_reads(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_broker.register(monkeypatch)  # a broker whose entry says its consumers read $FAKE_REGION
    added = invoke(box.db, "adapter", "add", "feed", "--broker", "fake", "--url-env", "FEED_URL", "--topic", "news",
                   env={"FEED_URL": "fake://local"})  # fmt: skip
    assert added.code == 0, added.err
    result = box.cli("install", "--dry-run", FEED_URL=None, FAKE_REGION=None)
    assert result.code == 0, result.err
    assert ("feed reads $FEED_URL (not set in this shell either), feed reads $FAKE_REGION (not set in this shell "
            "either)") in result.out  # fmt: skip


def add_env_readers(box: Box) -> None:
    """A webhook source whose secret and an adapter whose Redis URL are read from serve's environment."""
    added = invoke(box.db, "source", "add", "gh", "--kind", "github", "--secret-env", "GH_SECRET")
    assert added.code == 0, added.err
    adapter = invoke(box.db, "adapter", "add", "orders", "--redis-url-env", "REDIS_URL", "--mode", "stream",
                     "--key", "k")  # fmt: skip
    assert adapter.code == 0, adapter.err


def test_a_dry_run_names_the_variables_the_service_will_not_have(box: Box) -> None:
    add_env_readers(box)
    shell = {"GH_SECRET": "hunter2-only-here", "REDIS_URL": None, "SWITCHBOARD_LOG_LEVEL": "debug"}
    result = box.cli("install", "--dry-run", **shell)
    assert result.code == 0, result.err
    assert ("gh reads $GH_SECRET (set in this shell), orders reads $REDIS_URL (not set in this shell either), "
            "serve reads $SWITCHBOARD_LOG_LEVEL (set in this shell)") in result.out  # fmt: skip
    assert f"{box.env_file} sets none of these" in result.out
    assert "hunter2-only-here" not in result.out + result.err
    assert not box.config.exists() and box.calls() == []
    answer = json.loads(box.cli("install", "--dry-run", "--json", **shell).out)
    assert answer["unset_env"] == [
        {"name": "GH_SECRET", "read_by": "gh", "set_in_this_shell": True},
        {"name": "REDIS_URL", "read_by": "orders", "set_in_this_shell": False},
        {"name": "SWITCHBOARD_LOG_LEVEL", "read_by": "serve", "set_in_this_shell": True},
    ]  # fmt: skip


def test_a_variable_the_environment_file_sets_is_not_named(box: Box) -> None:
    add_env_readers(box)
    box.env_file.parent.mkdir(parents=True)
    box.env_file.write_text("# for the service\nGH_SECRET=abc\n")
    answer = json.loads(box.cli("install", "--dry-run", "--json", GH_SECRET="abc", REDIS_URL="redis://x").out)
    assert [u["name"] for u in answer["unset_env"]] == ["REDIS_URL"]
    box.env_file.write_text("GH_SECRET=abc\nREDIS_URL=redis://127.0.0.1/0\n")
    result = box.cli("install", "--dry-run", GH_SECRET="abc", REDIS_URL="redis://x")
    assert result.code == 0 and "sets none of these" not in result.out, result.out


def test_install_names_the_variables_even_when_the_service_manager_fails(box: Box) -> None:
    add_env_readers(box)
    result = box.cli("install", FAKE_FAIL="enable", GH_SECRET="abc", REDIS_URL=None)
    assert result.code == 1
    assert "gh reads $GH_SECRET (set in this shell), orders reads $REDIS_URL (not set in this shell either)" in (
        result.out
    )


def test_a_dry_run_on_a_url_names_the_libpq_variables_of_this_shell(box: Box) -> None:
    result = box.cli("install", "--dry-run", db=A_URL, PGPASSFILE="/somewhere/pgpass")
    assert result.code == 0, result.err
    assert "libpq reads $PGPASSFILE (set in this shell)" in result.out
    assert "note: cannot read the sources (postgresql://sb:***@db.example:5432/queue" in result.out  # no server there
    assert "s3cret" not in result.out + result.err


def test_install_refuses_a_symlinked_unit_and_changes_nothing(box: Box, tmp_path: Path) -> None:
    assert box.cli("install").code == 0
    kept = tmp_path / "dotfiles" / UNIT  # a unit kept elsewhere, linked into place
    kept.parent.mkdir()
    box.unit.rename(kept)
    kept.chmod(0o644)
    box.unit.symlink_to(kept)
    text = kept.read_text()
    box.calls()
    for args in (["install"], ["install", "--dry-run"]):
        result = box.cli(*args)
        assert result.code == 1, (args, result.out)
        assert result.err.startswith(f"switchboard-local: unit_file: {box.unit} is a symbolic link (to {kept})")
    assert mode(kept) == 0o644 and kept.read_text() == text and box.unit.is_symlink()
    assert box.calls() == []


def test_install_refuses_a_symlinked_environment_file_on_a_dry_run_too(box: Box, tmp_path: Path) -> None:
    target = tmp_path / "dotfiles" / "service.env"
    target.parent.mkdir()
    target.write_text("GH_SECRET=abc\n")
    box.env_file.parent.mkdir(parents=True)
    box.env_file.symlink_to(target)
    result = box.cli("install", "--dry-run", db=A_URL)
    assert result.code == 1
    assert result.err.startswith(f"switchboard-local: unit_file: {box.env_file} is a symbolic link (to {target})")
    assert "s3cret" not in result.out + result.err


@pytest.mark.postgres
def test_install_writes_no_url_through_a_symlinked_environment_file(box: Box, url: str, tmp_path: Path) -> None:
    target = tmp_path / "dotfiles" / "service.env"  # where the link points: not the owner-only file install makes
    target.parent.mkdir()
    target.write_text("GH_SECRET=abc\n")
    target.chmod(0o644)
    box.env_file.parent.mkdir(parents=True)
    box.env_file.symlink_to(target)
    result = box.cli("install", db=url)
    assert result.code == 1
    assert result.err.startswith(f"switchboard-local: unit_file: {box.env_file} is a symbolic link (to {target})")
    assert "move the link away" in result.err
    assert target.read_text() == "GH_SECRET=abc\n" and mode(target) == 0o644  # neither the URL nor a chmod
    assert PASSWORD not in result.out + result.err
    assert not box.unit.exists() and box.calls() == []


def test_install_warns_of_a_config_folder_others_can_write_and_leaves_it(box: Box) -> None:
    box.config.mkdir(mode=0o775)
    box.config.chmod(0o775)
    for args in (["install", "--dry-run"], ["install"]):
        result = box.cli(*args)
        assert result.code == 0, result.err
        assert (f"switchboard-local: warning: {box.config} is writable by its group (mode 0775): another account "
                "could put its own unit or environment file there") in result.err  # fmt: skip
        assert f"fix: chmod go-w {box.config}" in result.err
    assert mode(box.config) == 0o775
    answer = json.loads(box.cli("install", "--json").out)
    assert [w.split(" is writable")[0] for w in answer["warnings"]] == [str(box.config)]
    box.config.chmod(0o755)
    assert "warning" not in box.cli("install").err


def test_sandbox_turns_on_the_filesystem_options_with_the_database_folder_writable(box: Box) -> None:
    db = Path("/nonexistent-switchboard/data/x.db")  # rendered only: a dry run creates nothing
    plain = json.loads(box.cli("install", "--dry-run", "--json", db=db).out)["unit"]
    sandboxed = json.loads(box.cli("install", "--sandbox", "--dry-run", "--json", db=db).out)["unit"]
    options = ["PrivateTmp=yes", "ProtectSystem=strict", "ProtectHome=read-only", f"ReadWritePaths={db.parent}"]
    for option in options:
        assert f"\n#{option}\n" in plain and f"\n{option}\n" in sandboxed, option
    for always in ("NoNewPrivileges=yes", "UMask=0077", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
                   "LockPersonality=yes", "MemoryDenyWriteExecute=yes", "Restart=on-failure"):  # fmt: skip
        assert f"\n{always}\n" in plain and f"\n{always}\n" in sandboxed, always


def test_sandbox_refuses_a_database_its_private_tmp_would_hide(box: Box) -> None:
    result = box.cli("install", "--sandbox", db=Path("/tmp/somewhere/x.db"))
    assert result.code == 2
    assert "private /tmp" in result.err
    assert box.cli("install", "--sandbox", "--manager", "launchd").code == 2


def test_dry_run_prints_the_unit_and_the_commands_and_changes_nothing(box: Box) -> None:
    result = box.cli("install", "--dry-run")
    assert result.code == 0, result.err
    assert f"would write {box.unit} (owner-only):\n# {service_units.MARKER}" in result.out
    assert "would run: systemctl --user daemon-reload\nwould run: systemctl --user enable --now" in result.out
    assert not box.unit.exists() and not box.config.exists() and not box.db.exists()
    assert box.calls() == []


# ---------------------------------------------------------------- systemd: not ours, uninstall, status


def test_install_and_uninstall_refuse_a_unit_they_did_not_write(box: Box) -> None:
    box.unit.parent.mkdir(parents=True)
    foreign = "[Service]\nExecStart=/usr/bin/something-else\n"
    box.unit.write_text(foreign)
    for verb in ("install", "uninstall"):
        result = box.cli(verb)
        assert result.code == 1, (verb, result.err)
        assert "was not written by `switchboard-local service install`" in result.err
    assert box.unit.read_text() == foreign
    assert box.calls() == []
    status = box.cli("status")
    assert status.code == 0 and "NOT written by service install" in status.out


def test_uninstall_stops_the_service_then_removes_only_its_unit(box: Box) -> None:
    assert box.cli("install").code == 0
    box.calls()
    result = box.cli("uninstall")
    assert result.code == 0, result.err
    assert box.calls() == [f"--user disable --now {UNIT}", "--user daemon-reload"]
    assert not box.unit.exists()
    assert box.unit.parent.is_dir()  # the folder may hold other units: not ours to remove
    assert f"removed {box.unit}" in result.out
    again = box.cli("uninstall")
    assert again.code == 0 and "nothing to uninstall" in again.out


def test_status_shows_the_file_and_the_managers_view(box: Box) -> None:
    assert box.cli("install").code == 0
    text = box.cli("status", FAKE_ACTIVE="active", FAKE_ENABLED="enabled")
    assert text.code == 0, text.err
    assert "written by service install" in text.out
    assert f"runs       {' '.join(this_command())} serve --db {box.db}" in text.out
    assert "service    active, enabled" in text.out
    found = json.loads(box.cli("status", "--json", FAKE_ACTIVE="failed", FAKE_ENABLED="enabled").out)
    assert found | {"runs": None} == {
        "manager": "systemd", "path": str(box.unit), "present": True, "ours": True, "runs": None,
        "manager_available": True, "manager_note": None, "active": "failed", "enabled": "enabled", "pid": None,
        "logs": "journalctl --user -u switchboard-local",
    }  # fmt: skip


def test_without_a_user_manager_status_says_so_and_succeeds(box: Box) -> None:
    result = box.cli("status", FAKE_MANAGER="offline")
    assert result.code == 0, result.err
    assert "not installed" in result.out
    assert "no user service manager is reachable" in result.out
    found = json.loads(box.cli("status", "--json", FAKE_MANAGER="offline").out)
    assert (found["manager_available"], found["active"], found["present"]) == (False, None, False)


def test_without_a_user_manager_install_writes_the_unit_but_fails(box: Box) -> None:
    result = box.cli("install", FAKE_MANAGER="offline")
    assert result.code == 1
    assert box.unit.is_file()
    assert result.err.startswith("switchboard-local: service_manager: no user service manager is reachable")
    assert "written but not started" in result.err
    assert box.calls() == []
    # Where a manager runs, the same command finishes the job.
    assert box.cli("install").code == 0
    assert box.calls() == [f"--user enable --now {UNIT}"]


def test_without_a_user_manager_uninstall_removes_the_unit(box: Box) -> None:
    assert box.cli("install").code == 0
    result = box.cli("uninstall", FAKE_MANAGER="offline")
    assert result.code == 0, result.err
    assert not box.unit.exists()
    assert "nothing to stop" in result.out


def test_uninstall_keeps_the_unit_while_an_unreachable_manager_may_run_it(box: Box, tmp_path: Path) -> None:
    assert box.cli("install").code == 0
    (tmp_path / "run-user" / str(os.getuid()) / "systemd").mkdir(parents=True)
    result = box.cli("uninstall", FAKE_MANAGER="offline")
    assert result.code == 1
    assert box.unit.is_file()
    assert "nothing removed" in result.err


def test_a_failing_service_manager_stops_install_with_its_error(box: Box) -> None:
    result = box.cli("install", "--json", FAKE_FAIL="enable")
    assert result.code == 1
    assert result.err.startswith(f"switchboard-local: service_manager: systemctl --user enable --now {UNIT} failed: "
                                 "Failed to enable unit: Access denied")  # fmt: skip
    answer = json.loads(result.out)
    assert answer["error"]["code"] == "service_manager"
    assert [step["command"] for step in answer["steps"]][-1] == ["systemctl", "--user", "daemon-reload"]


def test_a_unit_that_cannot_be_written_is_one_error_line(box: Box, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # where the config folder should be: mkdir fails, even for root
    result = box.cli("install", XDG_CONFIG_HOME=str(blocker / "config"))
    assert result.code == 1
    assert result.err.startswith(f"switchboard-local: unit_file: cannot write {blocker / 'config'}: Not a directory")
    assert box.calls() == []


def test_install_json_lists_each_step(box: Box) -> None:
    answer = json.loads(box.cli("install", "--json").out)
    assert answer["state"] == "new" and answer["command"] == [*this_command(), "serve", "--db", str(box.db)]
    assert [step["command"] for step in answer["steps"] if step["command"]] == [
        ["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", "--now", UNIT]
    ]  # fmt: skip


# ---------------------------------------------------------------- systemd: a PostgreSQL database

A_URL = "postgresql://sb:s3cret@db.example:5432/queue"  # no server: a dry run or a refusal never connects


@pytest.fixture
def url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh PostgreSQL database's URL with a password in it (the test server takes any)."""
    plain = postgres_server.fresh_database()
    yield str(with_password(plain))
    postgres_server.release(plain)


def exec_start(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("ExecStart="))


@pytest.mark.postgres
def test_install_on_a_postgresql_url_writes_no_url_into_the_unit_and_never_prints_its_password(
    box: Box, url: str
) -> None:
    result = box.cli("install", db=url)
    assert result.code == 0, result.err
    text = box.unit.read_text()
    assert exec_start(text) == f"ExecStart={' '.join(this_command())} serve"  # serve reads $SWITCHBOARD_DB
    assert PASSWORD not in text and url.split("@", 1)[1] not in text and "postgresql://" not in text
    assert mode(box.unit) == 0o600
    assert PASSWORD not in result.out + result.err
    assert f"set SWITCHBOARD_DB=postgresql://postgres:***@{url.split('@', 1)[1]} in {box.env_file}" in result.out
    assert box.calls() == ["--user daemon-reload", f"--user enable --now {UNIT}"]
    answer = json.loads(box.cli("install", "--json", db=url).out)
    assert answer["command"] == [*this_command(), "serve"] and answer["env_file"] == str(box.env_file)
    assert PASSWORD not in json.dumps(answer)


@pytest.mark.postgres
def test_install_on_a_postgresql_url_sets_it_in_the_owner_only_environment_file(box: Box, url: str) -> None:
    assert box.cli("install", db=url).code == 0
    assert box.env_file.read_text() == f"SWITCHBOARD_DB={url}\n"
    assert mode(box.env_file) == 0o600 and mode(box.env_file.parent) == 0o700


@pytest.mark.postgres
def test_install_keeps_the_environment_files_other_lines_and_replaces_its_database(box: Box, url: str) -> None:
    box.env_file.parent.mkdir(parents=True)
    box.env_file.write_text("GH_SECRET=abc\n# the Redis of orders\nSWITCHBOARD_DB=postgresql://old/db\n"
                            "REDIS_URL=redis://:pw@127.0.0.1/0\n")  # fmt: skip
    box.env_file.chmod(0o644)
    result = box.cli("install", db=url)
    assert result.code == 0, result.err
    assert box.env_file.read_text().splitlines() == [
        "GH_SECRET=abc", "# the Redis of orders", f"SWITCHBOARD_DB={url}", "REDIS_URL=redis://:pw@127.0.0.1/0"
    ]  # fmt: skip
    assert mode(box.env_file) == 0o600
    assert "its other lines kept" in result.out
    assert "abc" not in result.out and ":pw@" not in result.out


@pytest.mark.postgres
def test_install_on_a_new_url_restarts_the_service_with_its_unit_unchanged(box: Box, url: str) -> None:
    assert box.cli("install", db=url).code == 0
    before = box.unit.stat()
    box.calls()
    moved = url.replace(PASSWORD, "a-new-password")
    result = box.cli("install", db=moved)
    assert result.code == 0, result.err
    assert "is installed already, unchanged" in result.out
    assert (box.unit.stat().st_ino, box.unit.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert f"SWITCHBOARD_DB={moved}\n" == box.env_file.read_text()
    assert box.calls() == ["--user daemon-reload", f"--user enable {UNIT}", f"--user restart {UNIT}"]
    again = box.cli("install", db=moved)
    assert again.code == 0 and "sets SWITCHBOARD_DB=postgresql://postgres:***@" in again.out
    assert box.calls() == [f"--user enable --now {UNIT}"]  # nothing changed: nothing restarted
    assert "a-new-password" not in result.out + again.out


def test_a_dry_run_on_a_url_shows_where_it_would_go_and_changes_nothing(box: Box) -> None:
    result = box.cli("install", "--dry-run", db=A_URL)
    assert result.code == 0, result.err
    assert "s3cret" not in result.out + result.err
    assert f"would set SWITCHBOARD_DB=postgresql://sb:***@db.example:5432/queue in {box.env_file}" in result.out
    assert f"ExecStart={' '.join(this_command())} serve\n" in result.out
    assert not box.config.exists()
    answer = json.loads(box.cli("install", "--dry-run", "--json", db=A_URL).out)
    assert "s3cret" not in json.dumps(answer) and "--db" not in answer["command"]


def test_a_url_the_environment_file_cannot_carry_is_refused(box: Box) -> None:
    result = box.cli("install", "--dry-run", db="postgresql://sb:it's@db.example/queue")
    assert result.code == 2
    assert "single quote" in result.err and "it's" not in result.err
    assert not box.config.exists()


def test_the_environment_file_reads_back_a_url_as_it_is() -> None:
    line = service_units.environment_line
    assert line("SWITCHBOARD_DB", A_URL) == f"SWITCHBOARD_DB={A_URL}"
    awkward = "postgresql://sb:p a$s#w\\d@db.example/queue"
    assert line("SWITCHBOARD_DB", awkward) == f"SWITCHBOARD_DB='{awkward}'"  # systemd takes '…' verbatim


def test_launchd_refuses_a_url_naming_why(box: Box) -> None:
    result = box.cli("install", "--manager", "launchd", db=A_URL)
    assert result.code == 2
    assert "launchd gives an agent no environment but what its property list holds" in result.err
    assert "postgresql://sb:***@db.example:5432/queue" in result.err and "s3cret" not in result.err
    assert not box.plist.exists() and box.calls() == []


def test_uninstall_leaves_the_environment_file_and_says_so(box: Box) -> None:
    assert box.cli("install").code == 0
    box.env_file.parent.mkdir()
    box.env_file.write_text("GH_SECRET=abc\n")
    result = box.cli("uninstall")
    assert result.code == 0, result.err
    assert not box.unit.exists()
    assert box.env_file.read_text() == "GH_SECRET=abc\n"
    assert f"left {box.env_file} as it is" in result.out


@pytest.mark.postgres
def test_the_unit_on_a_url_passes_systemd_analyze_verify(box: Box, url: str, tmp_path: Path) -> None:
    assert box.cli("install", "--sandbox", db=url).code == 0
    verify(box.unit, tmp_path)


# ---------------------------------------------------------------- the unit as systemd reads it


def verify(unit: Path, tmp_path: Path) -> None:
    """`systemd-analyze verify` finds nothing to say about the unit (a user manager's view where it can start one)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here (it comes with systemd): the unit's syntax goes unchecked")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "HOME": str(tmp_path), "SYSTEMD_LOG_COLOR": "0"}
    ran = subprocess.run(
        [analyze, "verify", "--user", str(unit)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    if "Failed to initialize manager" in ran.stderr:  # no user manager can be set up here: a system manager reads it
        ran = subprocess.run(
            [analyze, "verify", str(unit)], capture_output=True, text=True, env=env, timeout=60, check=False
        )
    said = ran.stdout + ran.stderr
    assert ran.returncode == 0, said
    assert unit.name not in said, said  # warnings (an unknown key, a bad value) do not fail verify: none may appear


def test_the_installed_unit_passes_systemd_analyze_verify(box: Box, tmp_path: Path) -> None:
    assert box.cli("install", "--", "--port", "9000").code == 0
    verify(box.unit, tmp_path)


def test_a_sandboxed_unit_on_an_awkward_path_passes_systemd_analyze_verify(box: Box, tmp_path: Path) -> None:
    db = Path('/srv/my data/100% $HOME "quoted" back\\slash/x.db')
    answer = json.loads(box.cli("install", "--sandbox", "--dry-run", "--json", db=db).out)
    line = next(line for line in answer["unit"].splitlines() if line.startswith("ExecStart="))
    assert line.endswith(' serve --db "/srv/my data/100%% $$HOME \\"quoted\\" back\\\\slash/x.db"')
    unit = tmp_path / UNIT
    unit.write_text(answer["unit"])
    verify(unit, tmp_path)


# ---------------------------------------------------------------- launchd


def test_launchd_install_writes_an_owner_only_agent_and_loads_it(box: Box) -> None:
    result = box.cli("install", "--manager", "launchd")
    assert result.code == 0, result.err
    agent = plistlib.loads(box.plist.read_bytes())
    log = str(box.home / "Library" / "Logs" / "switchboard-local" / "serve.log")
    assert agent == {
        "Label": LABEL, "ProgramArguments": [*this_command(), "serve", "--db", str(box.db)], "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False, "Crashed": True}, "ThrottleInterval": 10, "Umask": 0o077,
        "StandardOutPath": log, "StandardErrorPath": log,
    }  # fmt: skip
    assert box.plist.read_text().splitlines()[2] == f"<!-- {service_units.MARKER} -->"
    assert mode(box.plist) == 0o600 and mode(Path(log).parent) == 0o700
    uid = os.getuid()
    assert box.calls() == [f"enable gui/{uid}/{LABEL}", f"bootstrap gui/{uid} {box.plist}"]
    assert box.cli("install", "--manager", "launchd", FAKE_LOADED="1").code == 0
    assert box.calls() == []  # unchanged and loaded: nothing to do


@pytest.mark.parametrize("pid", ["²", "٤٢"])  # '²' passes str.isdigit(), int() refuses it; int('٤٢') is 42
def test_launchd_status_reads_a_pid_only_in_ascii_digits(box: Box, pid: str) -> None:
    assert box.cli("install", "--manager", "launchd").code == 0
    status = box.cli("status", "--manager", "launchd", "--json", FAKE_LOADED="1", FAKE_PID=pid)
    assert status.code == 0, status.err
    assert json.loads(status.out)["pid"] is None


def test_launchd_status_and_uninstall(box: Box) -> None:
    assert box.cli("install", "--manager", "launchd").code == 0
    box.calls()
    status = box.cli("status", "--manager", "launchd", FAKE_LOADED="1")
    assert status.code == 0, status.err
    assert "service    running (pid 4242)" in status.out
    result = box.cli("uninstall", "--manager", "launchd", FAKE_LOADED="1")
    assert result.code == 0, result.err
    assert box.calls() == [f"bootout gui/{os.getuid()}/{LABEL}"]
    assert not box.plist.exists()


# ---------------------------------------------------------------- which executable, and the templates


def test_a_frozen_binary_runs_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/switchboard/switchboard-local")
    assert service.current_command() == ["/opt/switchboard/switchboard-local"]


def test_python_dash_m_runs_the_same_interpreter_with_dash_m(tmp_path: Path) -> None:
    ran = run_cli("service", "install", "--dry-run", "--json", db=tmp_path / "x.db",
                  env={"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")})  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["command"][:3] == this_command()


def test_the_console_script_runs_itself_by_the_path_it_was_called_by(tmp_path: Path) -> None:
    script = tmp_path / "venv" / "bin" / "switchboard-local"
    script.parent.mkdir(parents=True)
    script.write_text(f"#!{sys.executable}\nfrom switchboard_local.cli.main import main\nmain()\n")
    script.chmod(0o755)
    link = tmp_path / "bin" / "switchboard-local"  # a package manager's link: kept, not resolved
    link.parent.mkdir()
    link.symlink_to(script)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c")}
    ran = subprocess.run([str(link), "--db", str(tmp_path / "x.db"), "service", "install", "--dry-run", "--json"],
                         capture_output=True, text=True, env=env, timeout=120, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["command"][0] == str(link)


def test_the_packaging_templates_match_what_install_writes() -> None:
    for relative, text in service_units.templates().items():
        shipped = (REPO_ROOT / relative).read_text()
        assert shipped == text, f"{relative} differs from service_units.py: write templates() out again"
        assert not service_units.written_by_install(shipped)  # a hand-installed template is not uninstall's to remove
    agent = plistlib.loads((REPO_ROOT / "packaging" / "launchd" / f"{LABEL}.plist").read_bytes())
    assert agent["Label"] == LABEL and agent["RunAtLoad"] is True and agent["KeepAlive"]["SuccessfulExit"] is False
