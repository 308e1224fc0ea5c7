"""A real PostgreSQL server for the tests: initdb in a temporary folder, a free loopback port.

``PostgresServer`` runs Debian's PostgreSQL (``initdb`` and ``postgres`` from
PATH or /usr/lib/postgresql/*/bin) as an unprivileged user when the tests run
as root (PostgreSQL refuses root): ``nobody``, through ``setpriv``, which
execs the server itself, so the process started is the server's postmaster.
Trust authentication for the superuser ``postgres`` on 127.0.0.1 only, the
socket in the temporary folder, fsync on as in production. One server per
test session (tests/conftest.py), stopped at its end; each test gets a fresh
database of its own, copied from a template (``fresh_database``).

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
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

START_SECONDS = 60
TEMPLATE = "switchboard_template"
READY_AHEAD = 2  # databases copied ahead of the tests that will take them


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


class PostgresServer:
    """One PostgreSQL server in a temporary folder, for one test session."""

    def __init__(self) -> None:
        self.bin = find_bin()
        self._prefix, uid, gid = _as_server_user()
        # As root the server runs as nobody, who must reach the folder: /tmp, whatever $TMPDIR says.
        self.root = Path(tempfile.mkdtemp(prefix="switchboard-pg-", dir="/tmp" if uid is not None else None))
        self.data = self.root / "data"
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)
        self._worker: ThreadPoolExecutor | None = None
        self._ready: list[Future[str]] = []
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
        self.process = subprocess.Popen(
            [*self._prefix, str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.root}",
             "-c", "fsync=on", "-c", "max_connections=300", "-c", "log_min_messages=warning"],  # fmt: skip
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "server.log", "wb"),  # noqa: SIM115 (the server's, closed with it)
            start_new_session=True,
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

    def template_url(self) -> str:
        return self.url(TEMPLATE)

    def admin(self, *statements: str) -> None:
        """Run statements as the superuser on the maintenance database, each committed at once."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]

    def prepare_template(self, schema: str | None = None) -> None:
        """The template every test's database is copied from: empty, or with ``schema`` (SQL) run in it."""
        import psycopg

        self.admin(f"DROP DATABASE IF EXISTS {TEMPLATE}", f"CREATE DATABASE {TEMPLATE}")
        if schema:
            with psycopg.connect(self.url(TEMPLATE), autocommit=True) as conn:
                conn.execute(schema)  # type: ignore[arg-type]

    def fresh_database(self) -> str:
        """A new database copied from the template (made ahead, in the background); its URL.

        Copying the template takes about 0.1 s (its pages go through the
        WAL, fsynced): a worker thread keeps READY_AHEAD copies made while
        tests run, and drops the databases tests are done with.
        """
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pg-databases")
            for _ in range(READY_AHEAD):
                self._ready.append(self._worker.submit(self._create))
        self._ready.append(self._worker.submit(self._create))
        return self._ready.pop(0).result()

    def _create(self) -> str:
        name = f"t{os.getpid()}_{next(self._names)}"
        self.admin(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return self.url(name)

    def empty_database(self) -> str:
        """A new database with nothing in it (not even the schema); its URL. Drop it with ``release``."""
        name = f"e{os.getpid()}_{next(self._names)}"
        self.admin(f"CREATE DATABASE {name}")
        return self.url(name)

    def drop(self, url: str) -> None:
        """Drop a test's database now (connections still on it are ended)."""
        name = url.rsplit("/", 1)[1]
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def release(self, url: str) -> None:
        """Drop a test's database in the background, while the next test runs."""
        if self._worker is None:
            self.drop(url)
        else:
            self._worker.submit(self.drop, url)

    def stop(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=True, cancel_futures=True)
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.root)
