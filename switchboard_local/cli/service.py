"""`service`: run `serve` under this user's service manager (systemd --user, launchd).

`install` writes the unit (owner-only, marked as written by it) for the
executable running now and the database in use, then has the manager enable
and start it, one line per step; run again, it leaves an unchanged unit alone
and restarts a changed one. A PostgreSQL database's URL (it may hold a
password) goes in no unit: systemd's unit runs serve without --db, and
`install` sets SWITCHBOARD_DB in the owner-only environment file the unit
reads, keeping its other lines; launchd has no such file, so a URL is
refused there. `uninstall` stops the service and removes only a unit
`install` wrote (the environment file stays, and it says so). `status`
shows the file and the manager's view. `install` writes its files themselves,
never through a symbolic link, and names (service_checks.py) the variables the
service will not have and the folders others could write to.

Exit statuses: 0 done; `status` exits 0 whenever it can report, a missing
user service manager included (a container, or root without a login session:
said plainly). 1 when a unit file not written by `install` is in the way
(conflict), the unit file cannot be written or removed or a symbolic link
stands where install writes (unit_file), or the
service manager failed or is absent (service_manager: `install` has then
written the unit but not started it; `uninstall` removes nothing while a
manager it cannot reach may still run the service). 2 usage; 3 the database
cannot be used.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import click

from ..core import sources
from ..core.errors import Conflict, InvalidArgument, SwitchboardError
from ..core.store.shared import DB_ENV, Location, default_path, describe, is_url, local_path, location
from . import service_checks as checks
from . import service_units as units
from .common import EXIT_REFUSED, Out, common, json_text, printable
from .service_managers import Launchd, ManagerFailed, Step, Systemd, first_line, pick, run

MANAGERS = ("systemd", "launchd")
# What a service argument may not say: the unit gives --db itself, and --json or --help would stop serve.
NOT_SERVE_ARGUMENTS = ("--db", "--json", "--help", "-h")


def register(main: click.Group) -> None:
    main.add_command(service_group)


@click.group("service")
def service_group() -> None:
    """Run `serve` as a service of your user: systemd --user on Linux, launchd on macOS."""


# ---------------------------------------------------------------- what runs


def current_command() -> list[str]:
    """How a service manager starts this same switchboard-local: absolute paths, symlinks kept.

    Symlinks stay unresolved: a virtualenv's python is a link to the base
    interpreter, which has no switchboard_local, and a package manager's
    bin/ link points into a versioned folder that an upgrade removes.
    """
    if getattr(sys, "frozen", False):  # a PyInstaller binary: sys.executable is the binary itself
        return [os.path.abspath(sys.executable)]
    script = sys.argv[0] if sys.argv else ""
    if Path(script).name.startswith("switchboard-local"):  # the console script (.exe on Windows)
        found = script if os.sep in script else shutil.which(script)
        if found and os.path.isfile(found) and os.access(found, os.X_OK):
            return [os.path.abspath(found)]
    if not sys.executable:
        raise InvalidArgument("cannot tell which program runs switchboard-local (sys.executable is empty)")
    return [os.path.abspath(sys.executable), "-m", "switchboard_local"]  # `python -m switchboard_local`


def _serve_arguments(args: tuple[str, ...]) -> list[str]:
    """More serve options for the unit, checked by serve's own parser: a typo must not crash-loop a service."""
    for arg in args:
        if arg.split("=", 1)[0] in NOT_SERVE_ARGUMENTS:
            raise click.UsageError(
                f"{arg.split('=', 1)[0]} cannot be a serve option of the service (--db: give it to install)"
            )
    root = click.get_current_context().find_root()
    serve = root.command.get_command(root, "serve") if isinstance(root.command, click.Group) else None
    if serve is not None and args:
        try:
            serve.make_context("serve", list(args))
        except click.UsageError as exc:
            raise click.UsageError(f"serve options: {exc.format_message()}") from None
    return list(args)


def _database(out: Out, chosen: Systemd | Launchd) -> Location:
    """The database in use (--db, $SWITCHBOARD_DB or the default): an absolute path, or a PostgreSQL URL."""
    try:
        where = location(out.db) if out.db is not None else default_path()
    except SwitchboardError as exc:
        out.fail(exc)
    if not is_url(where):
        return Path(os.path.abspath(where))
    if isinstance(chosen, Launchd):  # a unit file is no place for a URL that may hold a password
        out.fail(InvalidArgument(
            f"launchd gives an agent no environment but what its property list holds, which launchctl shows "
            f"on request: the URL of {describe(where)} (it may hold a password) goes in no service file, so "
            "launchd cannot run serve on it here; run `switchboard-local serve` with SWITCHBOARD_DB set under a "
            "supervisor of your own, or use a SQLite file"))  # fmt: skip
    return where


def _writable(database: Location) -> Path:
    """The folder --sandbox leaves writable: the database file's, or where a PostgreSQL database's local files go."""
    return local_path(database).parent if is_url(database) else Path(database).parent


# ---------------------------------------------------------------- files


@dataclass
class EnvFile:
    """The environment file the systemd unit reads, as install leaves it: SWITCHBOARD_DB set to the URL."""

    path: Path
    text: str
    state: str  # new, changed or unchanged
    shown: str  # the database as it may be printed (its password hidden)


def _env_file(out: Out, chosen: Systemd, url: str) -> EnvFile:
    path = chosen.environment_file()
    try:
        line = units.environment_line(DB_ENV, url)
    except SwitchboardError as exc:
        out.fail(exc)
    try:
        existing = _read_own(out, path, holds="the database's URL (it may hold a password)")
    except UnicodeDecodeError:
        _fail(out, f"{path} is not UTF-8 text: mend it or move it away, then install again", code="unit_file")
    text = units.with_environment_line(existing, DB_ENV, line)
    state = "new" if existing is None else "unchanged" if existing == text else "changed"
    return EnvFile(path, text, state, describe(url))


def _existing(out: Out, path: Path) -> str | None:
    """The unit file's text, or None where there is none (a path through a plain file included)."""
    try:
        return path.read_text("utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        _fail(out, f"cannot read {path}: {exc.strerror or exc}", code="unit_file")


def _read_own(out: Out, path: Path, *, holds: str, errors: str = "strict") -> str | None:
    """The text of a file install writes, or None where there is none; a symbolic link there is refused.

    Install writes (and chmods) the file itself, never what a link points to:
    a link in its place would carry what the file holds (a URL's password, the
    command the service runs) wherever the link's target is, readable there.
    """
    if path.is_symlink():
        _fail(out, f"{path} is a symbolic link (to {os.readlink(path)}): install writes {holds} into no file but "
                   "its own; move the link away (or put the file itself there), then install again",
              code="unit_file")  # fmt: skip
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))  # a link put there since: refused by the OS
        with os.fdopen(fd, encoding="utf-8", errors=errors) as file:
            return file.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        _fail(out, f"cannot read {path}: {exc.strerror or exc}", code="unit_file")


def _make_owner_only(path: Path) -> None:
    """chmod 600 on the file itself (a link put in its place since it was read is not followed)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _make_folders(folder: Path, say: Callable[[str], None]) -> None:
    """Each missing folder created owner-only (mkdir's parents= would give them the umask's mode)."""
    for missing in reversed([p for p in (folder, *folder.parents) if not p.exists()]):
        missing.mkdir(mode=0o700)
        os.chmod(missing, 0o700)  # whatever the umask
        say(f"created {missing} (owner-only)")


def _write_owner_only(path: Path, text: str) -> None:
    """Written whole or not at all (a temporary file renamed over it), mode 0600."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------- the report


@dataclass
class Report:
    """The lines a command prints as it goes (text), or the one JSON value it ends with."""

    out: Out
    value: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)

    def say(self, text: str, argv: list[str] | None = None) -> None:
        self.steps.append({"text": text, "command": argv})
        if not self.out.json:
            click.echo(printable(text + (f" ({shlex.join(argv)})" if argv else "")))

    def do(self, step: Step) -> None:
        ran = run(step.argv)
        if ran.code != 0:
            why = first_line(ran.err) or first_line(ran.out) or f"exit status {ran.code}"
            raise ManagerFailed(f"{shlex.join(step.argv)} failed: {why}")
        self.say(step.done, step.argv)

    def finish(self, **more: Any) -> None:
        if self.out.json:
            click.echo(json_text({**self.value, **more, "steps": self.steps}, indent=2))

    def fail(self, message: str, code: str = "service_manager") -> NoReturn:
        _fail(self.out, message, code=code, **self.value, steps=self.steps)


def _fail(out: Out, message: str, *, code: str, **more: Any) -> NoReturn:
    """The one error line (and with --json the error object, beside what was done): exit 1."""
    if out.json:
        click.echo(json_text({"error": {"code": code, "message": message}, **more}, indent=2))
    click.echo(f"switchboard-local: {code}: {printable(message, one_line=True)}", err=True)
    sys.exit(EXIT_REFUSED)


def _not_ours(path: Path) -> Conflict:
    return Conflict(f"{path} was not written by `switchboard-local service install`; it is left as it is "
                    "(move it away yourself to go on)")  # fmt: skip


# ---------------------------------------------------------------- commands

manager_option = click.option("--manager", "manager_name", type=click.Choice(MANAGERS), default=None,
                              help="The service manager (default: launchd on macOS, systemd elsewhere).")  # fmt: skip
user_option = click.option("--user", "user_scope", is_flag=True, default=True,
                           help="Your user's service manager: the default, and the only scope offered.")  # fmt: skip
dry_run_option = click.option("--dry-run", is_flag=True, help="Print the unit and the commands; change nothing.")


@service_group.command("install", context_settings={"ignore_unknown_options": True})
@manager_option
@user_option
@click.option("--sandbox", is_flag=True,
              help="systemd: add PrivateTmp, ProtectSystem=strict, ProtectHome=read-only (needs user namespaces).")  # fmt: skip
@dry_run_option
@click.argument("serve_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SERVE OPTIONS]",
                help="Options the service's serve runs with, after -- (e.g. -- --port 9000).")
@common
def service_install(db: Path | None, as_json: bool | None, manager_name: str | None, user_scope: bool, sandbox: bool,
                    dry_run: bool, serve_args: tuple[str, ...]) -> None:  # fmt: skip
    """Write the unit for `serve` on this database, then enable and start it.

    The unit runs the switchboard-local running now with --db set to the
    database file in use, plus any serve options given after `--` (checked
    first). It holds no environment value: secrets a source reads from the
    environment go in the file the unit names (systemd). A PostgreSQL URL
    goes there too, as SWITCHBOARD_DB (the file's other lines kept), and the
    unit runs serve without --db. Run again, an unchanged unit is left alone
    and a changed one (or a changed URL) rewritten and restarted.
    """
    out = Out(db, as_json)
    chosen = pick(manager_name)
    if sandbox and chosen.name != "systemd":
        raise click.UsageError("--sandbox is for systemd units")
    database = _database(out, chosen)
    if sandbox and not is_url(database) and any(Path(database).is_relative_to(tmp) for tmp in ("/tmp", "/var/tmp")):
        raise click.UsageError(f"--sandbox gives the service a private /tmp: it would not see {database}")
    # A URL is not on the command line (the process list shows it): serve reads $SWITCHBOARD_DB.
    env = _env_file(out, chosen, str(database)) if is_url(database) and isinstance(chosen, Systemd) else None
    try:
        named = [] if env is not None else ["--db", str(database)]
        argv = [*current_command(), "serve", *named, *_serve_arguments(serve_args)]
        text = chosen.render(argv, _writable(database), sandbox)
    except SwitchboardError as exc:
        out.fail(exc)
    path = chosen.path()
    existing = _read_own(out, path, holds="the command the service runs", errors="replace")
    if existing is not None and not units.written_by_install(existing):
        out.fail(_not_ours(path))
    state = "new" if existing is None else "unchanged" if existing == text else "changed"
    # The same unit on a new URL: the service must start again to read it.
    start = "changed" if state == "unchanged" and env is not None and env.state != "unchanged" else state
    value = {"manager": chosen.name, "path": str(path), "state": state, "command": argv, "dry_run": dry_run,
             "logs": chosen.logs, **({"env_file": str(env.path)} if env is not None else {}),
             "warnings": checks.open_folders(chosen)}  # fmt: skip
    report = Report(out, value)

    if dry_run:
        try:
            found, unread = checks.sources_as_they_are(database), None
        except SwitchboardError as exc:  # a dry run changes nothing, an older file's upgrade included
            found, unread = [], exc.message
        unset = checks.unset(found, database, checks.given(chosen, env.text if env is not None else None))
        _dry_install(report, chosen, path, text, state, start, env, unset, unread)
        return
    out.db = database
    found = out.run(sources.list_sources)  # an unusable database stops us here (exit 3), before any unit exists
    unset = checks.unset(found, database, checks.given(chosen, env.text if env is not None else None))
    report.value["unset_env"] = [u.to_dict() for u in unset]
    if os.geteuid() == 0 and os.environ.get("SUDO_USER"):
        report.say(
            f"note: this installs for root, not for {os.environ['SUDO_USER']} (run it without sudo for your own)"
        )
    try:
        if env is not None:  # before the unit: a service started by it finds its database
            _put_env(report, env)
            if sandbox:  # ReadWritePaths= names a folder that must exist
                _make_folders(_writable(database), report.say)
        _put_unit(report, chosen, path, text, state)
    except OSError as exc:  # a read-only home, a file where a folder should be
        report.fail(f"cannot write {exc.filename or path}: {exc.strerror or exc}", code="unit_file")
    note = checks.unset_note(unset, chosen)  # said before the manager is asked: a failed start is when it matters
    if note:
        report.say(note)
    why = chosen.unreachable()
    if why is not None:
        report.fail(f"{why}; the unit is written but not started: run `switchboard-local service install` again "
                    "where your user's service manager runs (a login session)")  # fmt: skip
    try:
        for step in chosen.start(start):
            report.do(step)
    except ManagerFailed as exc:
        report.fail(str(exc))
    report.say(f"logs: {chosen.logs}")
    report.finish()


def _put_env(report: Report, env: EnvFile) -> None:
    """SWITCHBOARD_DB in the environment file, owner-only; the URL itself is never printed."""
    if env.state == "unchanged":
        report.say(_env_told(env, done=True))
        if env.path.lstat().st_mode & 0o077:
            _make_owner_only(env.path)
            report.say(f"made {env.path} owner-only")
        return
    _make_folders(env.path.parent, report.say)
    _write_owner_only(env.path, env.text)  # the file itself: a link there was refused when it was read
    report.say(_env_told(env, done=True))


def _env_told(env: EnvFile, *, done: bool) -> str:
    """What install says of the environment file (done, or would do), the URL's password hidden."""
    if env.state == "unchanged":
        return f"{env.path} sets {DB_ENV}={env.shown} already"
    kept = ", its other lines kept" if env.state == "changed" else ""
    if not done:
        return f"would set {DB_ENV}={env.shown} in {env.path} (owner-only{kept})"
    return f"set {DB_ENV}={env.shown} in {env.path} (owner-only{kept}): serve reads its database there"


def _put_unit(report: Report, chosen: Systemd | Launchd, path: Path, text: str, state: str) -> None:
    if state == "unchanged":
        report.say(f"{path} is installed already, unchanged")
        if path.lstat().st_mode & 0o077:
            _make_owner_only(path)
            report.say(f"made {path} owner-only")
    else:
        _make_folders(path.parent, report.say)
        _write_owner_only(path, text)
        runs = shlex.join(report.value["command"])
        report.say(f"{'wrote' if state == 'new' else 'rewrote'} {path} (owner-only): runs {runs}")
    if isinstance(chosen, Launchd):
        _make_folders(chosen.log_file.parent, report.say)


def _dry_install(report: Report, chosen: Systemd | Launchd, path: Path, text: str, state: str, start: str,
                 env: EnvFile | None, unset: list[checks.Unset], unread: str | None) -> None:  # fmt: skip
    commands = [step.argv for step in chosen.start(start)]
    if report.out.json:
        click.echo(json_text({**report.value, "unit": text, "commands": commands,
                              "unset_env": [u.to_dict() for u in unset], "sources_unread": unread}, indent=2))  # fmt: skip
        return
    if env is not None:
        click.echo(printable(_env_told(env, done=False)))
    if state == "unchanged":
        click.echo(printable(f"{path} is installed already, unchanged"))
    else:
        click.echo(printable(f"would write {path} (owner-only):"))
        click.echo(printable(text.rstrip("\n")))
    for argv in commands:
        click.echo(printable(f"would run: {shlex.join(argv)}"))
    note = checks.unset_note(unset, chosen)
    if note:
        click.echo(printable(note))
    if unread is not None:
        click.echo(printable(f"note: cannot read the sources ({unread}): the variables they read from the "
                             "environment are not named here"))  # fmt: skip


@service_group.command("uninstall")
@manager_option
@user_option
@dry_run_option
@common
def service_uninstall(
    db: Path | None, as_json: bool | None, manager_name: str | None, user_scope: bool, dry_run: bool
) -> None:
    """Stop and disable the service, then remove the unit `install` wrote (never another file)."""
    out = Out(db, as_json)
    chosen = pick(manager_name)
    path = chosen.path()
    existing = _existing(out, path)
    report = Report(out, {"manager": chosen.name, "path": str(path), "dry_run": dry_run})
    if existing is None:
        report.say(f"no unit at {path}: nothing to uninstall")
        report.finish(removed=False)
        return
    if not units.written_by_install(existing):
        out.fail(_not_ours(path))
    why = chosen.unreachable()
    elsewhere = chosen.maybe_running_elsewhere() if why is not None else None
    if elsewhere is not None:
        report.fail(f"{why}, yet {elsewhere}: nothing removed, as the service may still run "
                    "(set XDG_RUNTIME_DIR=/run/user/$(id -u), or use a login session)")  # fmt: skip
    stop = chosen.stop() if why is None else []
    after = chosen.after_removal() if why is None else []
    env = chosen.environment_file() if isinstance(chosen, Systemd) else None
    # Not ours alone: a source's secrets may be there beside SWITCHBOARD_DB, and a reinstall reads it again.
    left = (f"left {env} as it is (it may hold secrets, {DB_ENV} among them): remove it yourself "
            "once nothing needs it") if env is not None and env.exists() else None  # fmt: skip
    if dry_run:
        for step in stop:
            report.say(f"would run: {shlex.join(step.argv)}")
        report.say(f"would remove {path}")
        for step in after:
            report.say(f"would run: {shlex.join(step.argv)}")
        if left:
            report.say(f"would have {left}")
        report.finish(removed=False)
        return
    try:
        for step in stop:
            report.do(step)
        if why is not None:
            report.say(f"{why}: nothing to stop")
        path.unlink()
        report.say(f"removed {path}")
        for step in after:
            report.do(step)
    except ManagerFailed as exc:
        report.fail(str(exc))
    except OSError as exc:
        report.fail(f"cannot remove {path}: {exc.strerror or exc}", code="unit_file")
    if left:
        report.say(left)
    report.finish(removed=True)


@service_group.command("status")
@manager_option
@user_option
@common
def service_status(db: Path | None, as_json: bool | None, manager_name: str | None, user_scope: bool) -> None:
    """Whether the unit file is there and written by `install`, and what the service manager says of it."""
    out = Out(db, as_json)
    chosen = pick(manager_name)
    path = chosen.path()
    existing = _existing(out, path)
    ours = existing is not None and units.written_by_install(existing)
    why = chosen.unreachable()
    view = chosen.view() if why is None else {"active": None, "enabled": None, "pid": None}
    value = {"manager": chosen.name, "path": str(path), "present": existing is not None, "ours": ours,
             "runs": chosen.runs(existing) if ours and existing else None, "manager_available": why is None,
             "manager_note": why, **view, "logs": chosen.logs}  # fmt: skip
    if existing is None:
        file_text = f"{path}: not installed"
    else:
        file_text = f"{path}: " + ("written by service install" if ours else "NOT written by service install")
    lines = [f"unit file  {file_text}"]
    if value["runs"]:
        lines.append(f"runs       {value['runs']}")
    if why is not None:
        lines.append(f"service    unknown: {why}")
    else:
        state = ", ".join(str(v) for v in (view["active"], view["enabled"]) if v is not None)
        lines.append(f"service    {state}" + (f" (pid {view['pid']})" if view["pid"] else ""))
    lines.append(f"logs       {chosen.logs}")
    out.emit(value, "\n".join(lines))
