"""Health: what `doctor` checks, one line per check, and the command that fixes each.

A check answers ``ok``, ``warn`` (it works, but look) or ``fail`` (something
will not work), with a fix (a command to run) when it is not ok. ``CHECKS``
is the list: each entry an async function of the ``Context`` answering its
lines, run in order (the database's first: it opens the file the others
read). Adding a check is one function and one entry there; the CLI adds the
checks of its own surroundings after these (``cli/doctor.py``).

Nothing here changes anything: the database is inspected and opened
read-only, never created, migrated or chmod-ed; a secret file is read (its
value never shown); a broker is only asked. What only an edge's library can
tell (a broker's backlog, here) comes in through ``Probes``, which the process
module fills, so the core imports no edge library.
"""

from __future__ import annotations

import os
import shlex
import socket
import stat
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import adapters as queue_family
from . import leadership, write_lock
from .adapters import PROBE_TIMEOUT, Brokers
from .clock import rfc3339
from .errors import Busy, InvalidArgument, StoreFault
from .sources import Source, list_sources, masked_url
from .store.interface import FileState, Store
from .store.opener import POSTGRESQL, backend, inspect_store, open_store
from .store.shared import Location, describe
from .webhook_config import needs_secret

OK, WARN, FAIL = "ok", "warn", "fail"

MiB = 1024 * 1024
GiB = 1024 * MiB
# Free space beside the database. Below DISK_FAIL a burst of writes can fill
# the disk: the WAL alone may grow to 64 MiB (journal_size_limit) before a
# checkpoint, and a full disk refuses every delivery (503, no ack).
DISK_FAIL = 100 * MiB
DISK_WARN = GiB
DISK_WARN_FRACTION = 0.05
# Messages an adapter has not stored yet (waiting, or read and not acked)
# beyond which its line warns: some 16 batches of 64, far more than one poll.
BACKLOG_WARN = 1000
APP = "switchboard-local"


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str
    status: str  # ok | warn | fail
    detail: str
    fix: str | None = None  # the command to run, when not ok

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


@dataclass(frozen=True)
class Probes:
    """The checks only an edge's library can make, handed in by the process module:
    ``brokers``, the broker registry (its entries probe each adapter's broker)."""

    brokers: Brokers | None = None


@dataclass
class Context:
    """What the checks share: the database path in use and what was learnt of it.

    ``origin`` says where the path came from (``--db``, ``$SWITCHBOARD_DB``,
    ``default``). The database group fills ``state``, ``store`` (the file
    opened read-only, when it is ours at the current version; ``run``
    closes it), ``sources`` (empty when nothing is stored yet) and
    ``leader`` (the process leading ingest, while its lease holds).
    """

    path: Location | None  # a file's path, or a PostgreSQL URL
    origin: str
    path_error: str | None = None
    probes: Probes = field(default_factory=Probes)
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    state: FileState | None = None
    store: Store | None = None
    sources: list[Source] = field(default_factory=list)
    leader: leadership.Leader | None = None

    def command(self, *args: str) -> str:
        """A switchboard-local command line on this database (--db when that is how it was named)."""
        # A URL with its password hidden: a fix printed on a terminal never shows a secret.
        db = ["--db", describe(self.path)] if self.origin == "--db" and self.path is not None else []
        return shlex.join([APP, *db, *args])


CheckGroup = Callable[[Context], Awaitable[list[Check]]]


async def run(ctx: Context, groups: tuple[CheckGroup, ...]) -> list[Check]:
    """Every group's lines, in order; the read-only store is closed at the end."""
    found: list[Check] = []
    try:
        for group in groups:
            found += await group(ctx)
    finally:
        if ctx.store is not None:
            await ctx.store.close()
            ctx.store = None
    return found


# ---------------------------------------------------------------- the database


async def database(ctx: Context) -> list[Check]:
    """Where the file is, its folder, permissions, schema, journal, integrity, and the disk under it."""
    if ctx.path is None:
        return [Check("database", FAIL, f"no database path: {ctx.path_error}",
                      "unset SWITCHBOARD_DB, or give --db PATH")]  # fmt: skip
    if backend(ctx.path) == POSTGRESQL:
        return await _server(ctx, str(ctx.path))
    path = Path(ctx.path).absolute()
    found = [Check("database", OK, f"{path} ({_ORIGINS.get(ctx.origin, ctx.origin)})")]
    found.append(_folder(path))
    file = _file(ctx, path)
    found.append(file)
    if file.status == OK:
        found.append(_permissions(path))
        found += await _contents(ctx, path)
    found.append(_disk(path))
    return found


_ORIGINS = {"--db": "from --db", "$SWITCHBOARD_DB": "from $SWITCHBOARD_DB", "default": "the default"}


def _folder(path: Path) -> Check:
    folder = path.parent
    try:
        info = folder.stat()
    except FileNotFoundError:
        return Check("database folder", WARN, f"{folder} does not exist yet: it is created (owner-only) on first use",
                     f"mkdir -p -m 700 {shlex.quote(str(folder))}")  # fmt: skip
    except OSError as exc:
        return Check("database folder", FAIL, f"{folder}: {exc.strerror}", f"ls -ld {shlex.quote(str(folder))}")
    mode = stat.S_IMODE(info.st_mode)
    quoted = shlex.quote(str(folder))
    if not stat.S_ISDIR(info.st_mode):
        return Check("database folder", FAIL, f"{folder} is not a folder", "give --db a path in a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        return Check("database folder", FAIL, f"{folder} ({mode:04o}) cannot be written by you: "
                     "SQLite creates the -wal and -shm there", f"chmod u+rwx {quoted}")  # fmt: skip
    if mode & 0o022:
        move = (f"mkdir -p -m 700 ~/switchboard && mv {shlex.quote(str(path))} ~/switchboard/ "
                f"(then use --db ~/switchboard/{shlex.quote(path.name)})")  # fmt: skip
        if mode & stat.S_ISVTX:  # /tmp-like: others cannot replace the file, but can plant a -wal before it exists
            return Check("database folder", WARN, f"{folder} ({mode:04o}) is shared: others can create files "
                         "beside the database, such as its -wal before it exists", move)  # fmt: skip
        fix = f"chmod go-w {quoted}" if info.st_uid == os.getuid() else move
        return Check("database folder", FAIL, f"{folder} ({mode:04o}) can be written by others: "
                     "they can replace the database", fix)  # fmt: skip
    return Check("database folder", OK, f"{folder} ({mode:04o}), not writable by others")


def _file(ctx: Context, path: Path) -> Check:
    try:
        info = path.stat()
    except FileNotFoundError:
        return Check("database file", WARN, "nothing stored yet; it is created on first use", ctx.command("stats"))
    except OSError as exc:
        return Check("database file", FAIL, f"{path}: {exc.strerror}", f"ls -l {shlex.quote(str(path))}")
    if not stat.S_ISREG(info.st_mode):
        return Check("database file", FAIL, f"{path} is not a regular file",
                     "point --db (or $SWITCHBOARD_DB) at a database file")  # fmt: skip
    wal = next((info for file, info in _present(path) if file.name == f"{path.name}-wal"), None)
    extra = f", WAL {_size(wal.st_size)}" if wal is not None else ""
    return Check("database file", OK, f"{_size(info.st_size)}{extra}")


def _present(path: Path) -> list[tuple[Path, os.stat_result]]:
    """The file, its -wal and its -shm, those that exist (a -wal may go at any moment: the last close removes it)."""
    found = []
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            found.append((file, file.stat()))
        except FileNotFoundError:
            pass
    return found


def _permissions(path: Path) -> Check:
    """The file and its -wal and -shm: owner-only (0600), and readable and writable by you."""
    present = _present(path)
    files = [f for f, _ in present]
    modes = {f: stat.S_IMODE(info.st_mode) for f, info in present}
    owners = {f: info.st_uid for f, info in present}
    shown = ", ".join(f"{f.name} {modes[f]:04o}" for f in files)
    open_to_others = [f for f in files if modes[f] & 0o077]
    if open_to_others:
        return Check("permissions", FAIL, f"open to others: {shown} (it holds payloads and may hold secrets)",
                     shlex.join(["chmod", "600", *map(str, open_to_others)]))  # fmt: skip
    locked = [f for f in files if not os.access(f, os.R_OK | os.W_OK)]
    if locked:
        return Check("permissions", FAIL, f"not readable and writable by you: {shown}",
                     shlex.join(["chmod", "600", *map(str, locked)]))  # fmt: skip
    others = [f for f in files if owners[f] != os.getuid()]
    if others:
        return Check("permissions", WARN, f"owned by another user (uid {owners[others[0]]}): {shown}",
                     shlex.join(["chown", str(os.getuid()), *map(str, others)]))  # fmt: skip
    return Check("permissions", OK, f"owner-only: {shown}")


async def _contents(ctx: Context, path: Path) -> list[Check]:
    """Schema, journal mode and integrity, read without changing the file; then its sources."""
    try:
        state = await inspect_store(path)
    except Busy as exc:
        return [Check("schema", WARN, f"not checked: {exc.message}", ctx.command("doctor"))]
    except StoreFault as exc:
        return [Check("schema", FAIL, f"cannot be read: {exc.message}", f"ls -l {shlex.quote(str(path))}")]
    ctx.state = state
    found = [_schema(ctx, state, path)]
    if state.database and state.ours and not state.empty:
        mode = state.journal_mode
        found.append(Check("journal mode", OK, mode) if mode == "wal" else Check(
            "journal mode", WARN, f"{mode}, not wal: switchboard-local sets WAL when it opens the file",
            ctx.command("stats")))  # fmt: skip
    if state.database:
        found.append(_integrity(state, path))
    if state.database and state.ours and state.version == state.current and not state.problems:
        found += await _open_sources(ctx, path)
    elif state.database and state.ours and 0 < state.version < state.current:
        found.append(Check("sources", WARN, "not checked: the file is upgraded when next opened",
                           ctx.command("stats")))  # fmt: skip
    return found


def _schema(ctx: Context, state: FileState, path: Location) -> Check:
    if backend(path) == POSTGRESQL:
        away, kind, version = "point --db at a database of its own", "a PostgreSQL", "no schema_migrations"
    else:
        away = f"mv {shlex.quote(str(path))} {shlex.quote(str(path) + '.not-switchboard')}  (or point --db elsewhere)"
        kind, version = "an SQLite", f"user version {state.version}"
    if not state.database:
        return Check("schema", FAIL, f"not an SQLite database ({state.error})", away)
    if not state.ours:
        return Check("schema", FAIL, f"{kind} database, but not a switchboard-local one ({version}); "
                     "switchboard-local refuses it", away)  # fmt: skip
    if state.empty:
        return Check("schema", WARN, "empty: the schema is created on first use", ctx.command("stats"))
    if state.version > state.current:
        return Check("schema", FAIL, f"version {state.version}, newer than this switchboard-local understands "
                     f"({state.current})", "pip install --upgrade switchboard-local  (or: pipx upgrade switchboard-local)")  # fmt: skip
    if state.version < state.current:
        return Check("schema", WARN, f"version {state.version}, older than this switchboard-local's "
                     f"({state.current}): it is upgraded in place when next opened", ctx.command("stats"))  # fmt: skip
    return Check("schema", OK, f"version {state.version} (current)")


def _integrity(state: FileState, path: Path) -> Check:
    if not state.problems:
        return Check("integrity", OK, "quick_check: ok")
    quoted = shlex.quote(str(path))
    more = f" (and {len(state.problems) - 1} more)" if len(state.problems) > 1 else ""
    return Check("integrity", FAIL, f"quick_check: {state.problems[0]}{more}",
                 f"sqlite3 {quoted} .recover | sqlite3 {shlex.quote(str(path) + '.recovered')}  "
                 "(then restore from a backup, or use the recovered copy)")  # fmt: skip


async def _server(ctx: Context, url: str) -> list[Check]:
    """A PostgreSQL database: reachable, its schema, then its sources (the server sees to its own files)."""
    found = [Check("database", OK, f"{describe(url)} ({_ORIGINS.get(ctx.origin, ctx.origin)})")]
    try:
        state = await inspect_store(url)
    except InvalidArgument as exc:  # a URL that does not read cleanly: its message says what is wrong
        return [*found, Check("schema", FAIL, f"cannot be read: {exc.message}",
                              "correct the URL (--db or $SWITCHBOARD_DB)")]  # fmt: skip
    except StoreFault as exc:
        return [*found, Check("schema", FAIL, f"cannot be read: {exc.message}",
                              "check that the server runs and the URL (--db or $SWITCHBOARD_DB) names it")]  # fmt: skip
    ctx.state = state
    found.append(_schema(ctx, state, url))
    if state.ours and state.version == state.current:
        found += await _open_sources(ctx, url)
    elif state.ours and 0 < state.version < state.current:
        found.append(Check("sources", WARN, "not checked: the database is upgraded when next opened",
                           ctx.command("stats")))  # fmt: skip
    return found


async def _open_sources(ctx: Context, path: Location) -> list[Check]:
    try:
        ctx.store = await open_store(path, read_only=True)
        ctx.sources = await list_sources(ctx.store)
        ctx.leader = await leadership.current(ctx.store)
    except StoreFault as exc:
        return [Check("sources", WARN, f"not checked: {exc.message}", ctx.command("source", "list"))]
    return []


def _disk(path: Path) -> Check:
    """Free space on the file system that holds (or will hold) the database."""
    folder = next((p for p in (path.parent, *path.parent.parents) if p.exists()), Path("/"))
    try:
        disk = os.statvfs(folder)
    except OSError as exc:
        return Check(
            "disk space", WARN, f"cannot tell for {folder}: {exc.strerror}", f"df -h {shlex.quote(str(folder))}"
        )
    free, total = disk.f_bavail * disk.f_frsize, disk.f_blocks * disk.f_frsize
    share = free / total if total else 0.0
    detail = f"{_size(free)} free ({share:.0%} of {_size(total)}) where the database lives"
    fix = f"free space on that file system (df -h {shlex.quote(str(folder))} shows it)"
    if free < DISK_FAIL:
        return Check("disk space", FAIL, f"{detail}: below {_size(DISK_FAIL)}, writes are about to fail", fix)
    if free < DISK_WARN or share < DISK_WARN_FRACTION:
        return Check("disk space", WARN, f"{detail}: below {_size(DISK_WARN)} or {DISK_WARN_FRACTION:.0%}", fix)
    return Check("disk space", OK, detail)


def _size(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


# ---------------------------------------------------------------- webhook sources' secrets


async def secrets(ctx: Context) -> list[Check]:
    """Each enabled webhook source: can at least one of its secrets be read here?"""
    return [_secret_check(ctx, s) for s in ctx.sources if s.family == "webhook"]


def _secret_check(ctx: Context, source: Source) -> Check:
    name = f"source {source.name}"
    if not source.enabled:
        return Check(name, OK, "disabled; its secret is not checked")
    if not needs_secret(source.kind):
        return Check(name, OK, f"kind {source.kind}: no secret (its events are labelled unverified)")
    if not source.secrets:
        return Check(name, FAIL, "no secret configured: every delivery is answered 503",
                     ctx.command("source", "rotate", source.name, "--secret-env", "VAR"))  # fmt: skip
    answers = [_secret_ref(ctx, ref) for ref in source.secrets]
    readable = [a for a in answers if a[0] != FAIL]
    detail = "; ".join(a[1] for a in answers)
    fix = next((a[2] for a in answers if a[0] != OK), None)
    if not readable:
        return Check(name, FAIL, f"{detail}: every delivery is answered 503", fix)
    if len(readable) < len(answers):  # mid-rotation: the readable one verifies
        return Check(name, WARN, f"{detail} (the readable secret still verifies)", fix)
    return Check(name, WARN if fix else OK, detail, fix)


def _secret_ref(ctx: Context, ref: Mapping[str, str]) -> tuple[str, str, str | None]:
    """(status, detail, fix) of one secret reference; the value is never part of it."""
    if "env" in ref:
        return _env_secret(ctx, ref["env"])
    if "file" in ref:
        return _secret_file(Path(ref["file"]))
    return OK, "kept in the database", None


def _env_secret(ctx: Context, var: str) -> tuple[str, str, str | None]:
    """A secret in an environment variable: here, and in the process that leads ingest (it says which it has).

    This shell may well lack what the leader was started with (a service's
    environment file, another terminal): the leader's word counts, and only
    when neither has it does the check fail.
    """
    export = f"export {var}=…  (in the environment serve starts with, too)"
    if not ctx.env.get(var):
        return _not_set_here(ctx, var, export)
    leader, has = _leader_has(ctx, var)
    if leader is None or has is None:
        return OK, f"${var} is set here (the serving process needs it too)", None
    if has:
        return OK, f"${var} is set here and in the leader ({_who(leader)})", None
    who = _who(leader)
    detail = f"${var} is set here, but not in the environment of the leader ({who})"
    return WARN, f"{detail}: the deliveries it receives are answered 503", f"restart {who} with {var} set ({export})"


def _not_set_here(ctx: Context, var: str, export: str) -> tuple[str, str, str | None]:
    """(status, detail, fix) of a variable this shell lacks: what the leader, which reads it, said of it."""
    leader, has = _leader_has(ctx, var)
    if leader is None:
        return FAIL, f"${var} is not set in this shell, and no process leads ingest to say whether it has it", export
    who = _who(leader)
    if has is None:
        unsaid = "has not said yet whether it has it (it says so within a second of a source's change)"
        return WARN, f"${var} is not set in this shell, and the leader ({who}) {unsaid}", ctx.command("doctor")
    if not has:
        return FAIL, f"${var} is not set in this shell, nor in the leader's environment ({who})", \
            f"{export}, then restart {who}"  # fmt: skip
    return OK, f"${var} is not set in this shell; the leader ({who}) has it", None


def _leader_has(ctx: Context, var: str) -> tuple[leadership.Leader | None, bool | None]:
    """The live leader (None: nobody leads, or its process is gone), and whether it has ``var`` set (None: not said)."""
    leader = ctx.leader
    if leader is None or (leader.host == socket.gethostname() and not leadership.pid_alive(leader.pid)):
        return None, None
    return leader, leader.has(var)


def _who(leader: leadership.Leader) -> str:
    where = "" if leader.host == socket.gethostname() else f" on {leader.host}"
    return f"{leader.kind} pid {leader.pid}{where}"


def _secret_file(path: Path) -> tuple[str, str, str | None]:
    quoted = shlex.quote(str(path))
    write = f"printf '%s' \"$SECRET\" > {quoted} && chmod 600 {quoted}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return FAIL, f"{path} does not exist", write
    except OSError as exc:
        return FAIL, f"{path} cannot be read: {exc.strerror}", f"chown {os.getuid()} {quoted} && chmod 600 {quoted}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return FAIL, f"{path} is not a regular file", write
        if not os.read(fd, 4096).strip():
            return FAIL, f"{path} is empty", write
    except OSError as exc:
        return FAIL, f"{path} cannot be read: {exc.strerror}", f"chmod 600 {quoted}"
    finally:
        os.close(fd)
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        return WARN, f"{path} is readable but open to others ({mode:04o})", f"chmod 600 {quoted}"
    return OK, f"{path} is readable and owner-only", None


# ---------------------------------------------------------------- adapters


async def adapters(ctx: Context) -> list[Check]:
    """Each enabled adapter: its broker answers, and how much waits there."""
    return [await _adapter_check(ctx, s) for s in ctx.sources if s.family == "queue"]


async def _adapter_check(ctx: Context, source: Source) -> Check:
    name, config, brokers = f"adapter {source.name}", source.config, ctx.probes.brokers
    if not source.enabled:
        return Check(name, OK, "disabled; its broker is not checked")
    if brokers is None:
        return Check(name, WARN, "not checked (no broker client here)", None)
    broker = brokers.of(source)
    if broker is None:
        return Check(name, FAIL, f"its broker {queue_family.broker_name(source, brokers)!r} is not one this "
                     "switchboard-local runs",
                     "pip install --upgrade switchboard-local  (or remove the adapter)")  # fmt: skip
    reads = f"{broker.name} {broker.where(config)}"
    url, var = queue_family.url(config, ctx.env), queue_family.url_env(config)
    if broker.takes_url and url is None:
        if var is None:
            return Check(name, FAIL, f"{reads}: no URL in its config", ctx.command("adapter", "show", source.name))
        return _url_via_leader(ctx, source, var, reads)
    where = f"{masked_url(url)} {reads}" if url else reads
    leader, has = (None, None) if var is None else _leader_has(ctx, var)
    if leader is not None and has is False:
        who = _who(leader)
        detail = f"{where}: ${var} is set here, but not in the environment of the leader ({who}), which consumes it"
        return Check(name, WARN, detail, f"restart {who} with {var} set")
    probe = await broker.probe(config, ctx.env, PROBE_TIMEOUT)
    if not probe.reachable:
        again = f"re-add {source.name} with the right --url" if url and var is None else f"correct ${var}" if var \
            else ctx.command("adapter", "show", source.name)  # fmt: skip
        fix = f"{probe.fix}, or {again}" if probe.fix else again
        return Check(name, FAIL, f"{where}: unreachable ({probe.error})", fix)
    if probe.error:
        return Check(name, WARN, f"{where}: reachable, but {probe.error}", ctx.command("adapter", "show", source.name))
    if probe.waiting is None and probe.unacked is None:
        return Check(name, OK, f"{where}: reachable" + (f" ({probe.note})" if probe.note else ""))
    waiting = "unknown" if probe.waiting is None else str(probe.waiting)
    unacked = "unknown" if probe.unacked is None else str(probe.unacked)  # some brokers cannot tell it
    detail = f"{where}: reachable; {waiting} waiting, {unacked} read but not acked"
    if probe.note:
        detail += f" ({probe.note})"
    if (probe.waiting or 0) + (probe.unacked or 0) >= BACKLOG_WARN:
        return Check(name, WARN, f"{detail}: a backlog of {BACKLOG_WARN} or more",
                     f"{ctx.command('serve')}  (drains it; if serve runs, see: {ctx.command('adapter', 'status')})")  # fmt: skip
    return Check(name, OK, detail)


def _url_via_leader(ctx: Context, source: Source, var: str, reads: str) -> Check:
    """An adapter whose URL is in a variable this shell lacks: the leader, which consumes it, may have it."""
    name = f"adapter {source.name}"
    export = f"export {var}=URL  (in the environment serve starts with, too)"
    status, detail, fix = _not_set_here(ctx, var, export)
    if status != OK:
        return Check(name, status, detail, fix)
    detail += f" and consumes {reads} (its broker is not asked from here)"
    if source.last_error:
        fix = ctx.command("adapter", "status")
        return Check(name, WARN, f"{detail}; its last poll failed: {source.last_error}", fix)
    return Check(name, OK, detail)


# ---------------------------------------------------------------- ingest leadership


async def ingest(ctx: Context) -> list[Check]:
    """Whether a process leads ingest (consumes the adapters, fires the schedules' ticks, prunes), and which."""
    if ctx.store is None:
        return []  # nothing stored yet, or the database line says why it cannot be read
    leader = ctx.leader
    consumed = [s.name for s in ctx.sources if s.family == "queue" and s.enabled]
    fired = [s.name for s in ctx.sources if s.family == "schedule" and s.enabled]
    start = f"{ctx.command('serve')}  (or {ctx.command('service', 'install')}, or an mcp with --ingest auto)"
    if leader is None:
        if consumed or fired:
            idle = [f"{', '.join(consumed)} not consumed"] if consumed else []
            idle += [f"schedule {', '.join(fired)} not fired"] if fired else []
            return [Check("ingest", FAIL, f"no process leads ingest: {'; '.join(idle)}", start)]
        return [Check("ingest", WARN, "no process leads ingest: nothing is pruned", start)]
    who = f"led by {leader.kind} pid {leader.pid} on {leader.host} since {rfc3339(leader.since)}"
    if leader.host == socket.gethostname() and not leadership.pid_alive(leader.pid):
        return [Check("ingest", WARN, f"{who}, but that process is gone: a standby takes over within seconds",
                      start)]  # fmt: skip
    receiver = f"; receiver {leader.http}" if leader.http else ""
    return [Check("ingest", OK, f"{who}{receiver}")]


# ---------------------------------------------------------------- the write lock

LOCK_WAIT_SECONDS = 2.0  # how long a process may hold the write lock before `doctor` names it


async def lock(ctx: Context) -> list[Check]:
    """Whether a process keeps the database's write lock: stopped inside a write transaction, or not
    letting go (SQLite; then nothing is written, whoever leads)."""
    if ctx.store is None or backend(ctx.store.where) == POSTGRESQL:
        return []
    holding = await write_lock.holders(ctx.store, LOCK_WAIT_SECONDS)
    if not holding:
        return [Check("write lock", OK, "no process keeps it")]
    holder = holding[0]
    if holder.stopped:
        return [Check("write lock", FAIL, f"held by {holder.name()}, which is stopped: nothing can be written, no "
                      "standby can take over and every webhook is answered 503 until it continues or ends",
                      f"kill -CONT {holder.pid}  (or end it: kill {holder.pid})")]  # fmt: skip
    return [Check("write lock", WARN, f"held by {holder.name()} ({holder.state}) for over {LOCK_WAIT_SECONDS:g} s: "
                  "writes wait for it, and webhooks are answered 503 after a few seconds",
                  f"ps -o pid,stat,etime,args -p {holder.pid}")]  # fmt: skip


# ---------------------------------------------------------------- the list

CHECKS: tuple[CheckGroup, ...] = (
    database,  # first: it opens the file (ctx.store, ctx.sources) for the checks after it
    secrets,
    adapters,
    lock,  # before ingest: a stopped process keeping the lock is why nobody leads
    ingest,
    # One more check is one entry here: an async function of the Context answering its lines.
)
