"""A real PostgreSQL server for the tests: initdb in a temporary folder, a free loopback port.

``PostgresServer`` runs Debian's PostgreSQL (``initdb`` and ``postgres`` from
PATH or /usr/lib/postgresql/*/bin) as an unprivileged user when the tests run
as root (PostgreSQL refuses root): ``nobody``, through ``setpriv``, which
execs the server itself, so the process started is the server's postmaster.
Trust authentication for the superuser ``postgres`` on 127.0.0.1 only, the
socket in the temporary folder, fsync on as in production unless
``fsync=False`` (the tests' server: tests/conftest.py says why; bench/ keeps
it on). One server per test session (tests/conftest.py), stopped at its end;
each test gets a fresh database of its own, copied from a template
(``fresh_database``).

When PostgreSQL is not installed, ``find_bin`` raises: scripts/test.sh
installs Debian's ``postgresql`` package, and a missing server is a failure,
never a skip.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

START_SECONDS = 60
TEMPLATE = "switchboard_template"


class NoPostgres(RuntimeError):
    pass


def find_bin() -> Path:
    """The folder holding initdb and postgres: PATH first, else the newest /usr/lib/postgresql/*/bin."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return Path(on_path).resolve().parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise NoPostgres(
            "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin): "
            "scripts/test.sh installs Debian's postgresql package"
        )
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user() -> tuple[list[str], int | None, int | None]:
    """The command prefix that runs a program as the server's user, and its uid/gid (None: ourselves)."""
    if os.geteuid() != 0:
        return [], None, None
    import grp
    import pwd

    user = pwd.getpwnam("nobody")
    try:
        gid = grp.getgrnam("nogroup").gr_gid
    except KeyError:
        gid = user.pw_gid
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={gid}", "--clear-groups"], user.pw_uid, gid


def _die_with_parent() -> None:
    """In the server's child before exec: a fast shutdown (SIGINT) when the test run dies, even by kill -9."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


class PostgresServer:
    """One PostgreSQL server in a temporary folder, for one test session."""

    def __init__(self, *, fsync: bool = True) -> None:
        self.fsync = fsync
        self.bin = find_bin()
        self._prefix, uid, gid = _as_server_user()
        # As root the server runs as nobody, who must reach the folder: /tmp, whatever $TMPDIR says.
        self.root = Path(tempfile.mkdtemp(prefix="switchboard-pg-", dir="/tmp" if uid is not None else None))
        self.data = self.root / "data"
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)
        self._free: list[str] = []  # databases emptied for reuse
        self._admin: Any = None  # the maintenance connection (admin)
        self._admin_lock = threading.Lock()
        self._lock = threading.Lock()
        self._template_fingerprint: tuple[Any, ...] = ()
        self._reset = self._truncate = ""
        if uid is not None:
            os.chown(self.root, uid, gid if gid is not None else -1)
            self.root.chmod(0o700)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        log = self.root / "initdb.log"
        with open(log, "wb") as out:
            done = subprocess.run(
                [*self._prefix, str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                 "-E", "UTF8", "--no-locale", "--no-sync"],  # fmt: skip
                stdout=out, stderr=subprocess.STDOUT, check=False,
            )  # fmt: skip
        if done.returncode != 0:
            raise NoPostgres(f"initdb failed: {log.read_text(errors='replace')[-2000:]}")
        return self._launch()

    def _launch(self) -> PostgresServer:
        # setpriv clears the parent-death signal as it changes user: it sets it again after.
        prefix = [*self._prefix, "--pdeathsig", "INT"] if self._prefix else []
        self.process = subprocess.Popen(
            [*prefix, str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.root}",
             "-c", f"fsync={'on' if self.fsync else 'off'}", "-c", "max_connections=300", "-c", "log_min_messages=warning"],  # fmt: skip
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "server.log", "ab"),  # noqa: SIM115 (the server's, closed with it)
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 (nothing but a prctl, before exec)
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + START_SECONDS
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise NoPostgres(f"postgres exited: {(self.root / 'server.log').read_text(errors='replace')[-2000:]}")
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def halt(self) -> None:
        """Stop the server as an outage would (a fast shutdown: every connection is cut), keeping
        its data and port: ``resume`` starts it again."""
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        self.process.wait(30)

    def resume(self) -> None:
        """Start a halted server again, on the same data and port; back once it takes connections."""
        self._launch()

    def template_url(self) -> str:
        return self.url(TEMPLATE)

    def admin(self, *statements: str) -> None:
        """Run statements as the superuser on the maintenance database, each committed at once."""
        import psycopg

        with self._admin_lock:
            if self._admin is None or self._admin.closed:
                self._admin = psycopg.connect(self.url(), autocommit=True)
            for statement in statements:
                self._admin.execute(statement)  # type: ignore[arg-type]

    def prepare_template(self, setup: Callable[[str], None] | None = None) -> None:
        """The template every test's database is copied from: empty, or as ``setup(url)`` leaves it."""
        import psycopg

        self.admin(f"DROP DATABASE IF EXISTS {TEMPLATE}", f"CREATE DATABASE {TEMPLATE}")
        if setup is not None:
            setup(self.template_url())
        with psycopg.connect(self.template_url(), autocommit=True) as conn:
            self._template_fingerprint = _fingerprint(conn)
            tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                                 "AND tablename <> 'schema_migrations' ORDER BY tablename")]  # fmt: skip
            sequences = [r[0] for r in conn.execute("SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'")]
        # DELETE, not TRUNCATE: a few rows go in well under a millisecond, TRUNCATE's new files take 50.
        self._truncate = f"TRUNCATE {', '.join(tables)} RESTART IDENTITY"
        self._reset = "BEGIN; " + "".join(f"DELETE FROM {t}; " for t in tables) + "".join(
            f"SELECT setval('{q}', 1, false); " for q in sequences) + "COMMIT"  # fmt: skip

    def fresh_database(self) -> str:
        """A database of the test's own, as the template is (the schema, no rows, ids from 1); its URL.

        Copying the template takes 25 ms to 0.1 s or more (its pages go
        through the WAL, fsynced when ``fsync``), so a database a test is done with is emptied and reused
        instead (``release``: a few milliseconds) whenever it still has exactly
        the template's objects; else it is dropped and a new copy made.
        """
        with self._lock:
            if self._free:
                return self._free.pop()
        return self._create()

    def _create(self) -> str:
        name = f"t{os.getpid()}_{next(self._names)}"
        self.admin(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return self.url(name)

    def release(self, url: str) -> None:
        """A test is done with its database: empty it for the next test, or drop it (see ``fresh_database``)."""
        import psycopg

        name = url.rsplit("/", 1)[1]
        self.admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}' "
                   "AND pid <> pg_backend_pid()")  # fmt: skip
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                if _fingerprint(conn) != self._template_fingerprint:
                    raise LookupError("the test changed the schema")
                many = conn.execute("SELECT (SELECT count(*) FROM todos) + (SELECT count(*) FROM events)").fetchone()
                # Few rows: DELETE (well under a millisecond). Many: TRUNCATE (some 50 ms, whatever the rows).
                conn.execute(self._truncate if many and many[0] > 300 else self._reset)  # type: ignore[arg-type]
        except (LookupError, psycopg.Error):
            self.drop(url)
            return
        with self._lock:
            self._free.append(self.url(name))  # as fresh_database gives it: not with a test's own password

    def empty(self, url: str) -> None:
        """Empty a test's database while it is in use (the schema kept, ids from 1 again), as
        ``release`` does between tests: for a test that wants a new store many times over
        (a hypothesis example each), on one database."""
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(self._reset)  # type: ignore[arg-type]

    def empty_database(self) -> str:
        """A new database with nothing in it (not even the schema); its URL. Drop it with ``release``."""
        name = f"e{os.getpid()}_{next(self._names)}"
        self.admin(f"CREATE DATABASE {name}")
        return self.url(name)

    def drop(self, url: str) -> None:
        """Drop a test's database now (connections still on it are ended)."""
        name = url.rsplit("/", 1)[1]
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.root)


def _fingerprint(conn: Any) -> tuple[Any, ...]:
    """The objects of a database (relations, functions, triggers, schemas) and its schema versions."""
    objects = tuple(conn.execute("""
        SELECT (SELECT string_agg(c.relname || ':' || c.relkind::text, ',' ORDER BY c.relname)
                FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'),
               (SELECT string_agg(p.proname, ',' ORDER BY p.proname)
                FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'),
               (SELECT string_agg(tgname, ',' ORDER BY tgname) FROM pg_trigger WHERE NOT tgisinternal),
               (SELECT string_agg(nspname, ',' ORDER BY nspname) FROM pg_namespace),
               to_regclass('schema_migrations') IS NOT NULL
    """).fetchone())
    if not objects[-1]:
        return objects
    versions = conn.execute("SELECT string_agg(version::text, ',' ORDER BY version) FROM schema_migrations").fetchone()
    return (*objects, *versions)
