"""`doctor`: every problem it reports, caused for real, with its fix; all ok exits 0.

Each test makes one thing wrong the way it goes wrong on a machine (a mode,
a version, a foreign or corrupt file, a missing variable, an unreadable
file, a Redis that refuses or lags, no `claude`, a small disk) and reads the
one line doctor gives it. Root reads any file whatever its mode, so the
unreadable-file test runs doctor without root's power over modes (setpriv);
the small disk is a real tmpfs in a private mount namespace (unshare).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from switchboard_local.core import leadership
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.shared import SCHEMA_VERSION

from support import sql
from support.cli import REPO_ROOT, Result, invoke
from support.receiver import serve_process
from support.redis_server import RedisServer, free_port, in_ci, started_redis_server
from support.signing import delivery

SECRET = "hunter2-never-shown"
# A PATH without `claude` (unless the system has one there: then the tests that want none say so).
BARE_PATH = os.pathsep.join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())


# ---------------------------------------------------------------- helpers


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home of the test's own: no ~/.claude.json unless the test writes one."""
    folder = tmp_path / "home"
    folder.mkdir(mode=0o700)
    return folder


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory doctor runs in (where a project's .mcp.json is looked for)."""
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture
def claude_bin(tmp_path: Path) -> Path:
    """A folder holding a `claude` that answers --version, as Claude Code's does."""
    folder = tmp_path / "bin"
    folder.mkdir()
    claude = folder / "claude"
    claude.write_text("#!/bin/sh\necho '2.1.197 (Claude Code)'\n")
    claude.chmod(0o755)
    return folder


@pytest.fixture
def run_doctor(db_path: Path, home: Path, project: Path, claude_bin: Path) -> Callable[..., tuple[int, dict[str, Any]]]:
    """doctor --json in this process on ``db_path``: (exit status, {name: check}); ``env`` adds or unsets variables."""

    def run(*, env: Mapping[str, str | None] | None = None, db: Path | None = db_path) -> tuple[int, dict[str, Any]]:
        result = invoke(db, "doctor", "--json", env={**base_env(home, claude_bin), **(env or {})})
        return result.code, parse(result)

    return run


def base_env(home: Path, claude_bin: Path | None) -> dict[str, str | None]:
    path = os.pathsep.join([str(claude_bin), BARE_PATH]) if claude_bin else BARE_PATH
    return {"HOME": str(home), "PATH": path, "CLAUDE_CONFIG_DIR": None, "SWITCHBOARD_DB": None}


def parse(result: Result | subprocess.CompletedProcess[str]) -> dict[str, Any]:
    out = result.out if isinstance(result, Result) else result.stdout
    report = json.loads(out)
    assert set(report) == {"ok", "checks"}
    for check in report["checks"]:
        assert set(check) == {"name", "status", "detail", "fix"} and check["status"] in ("ok", "warn", "fail")
        assert (check["fix"] is None) == (check["status"] == "ok"), check  # a fix exactly when not ok
    assert report["ok"] == all(c["status"] != "fail" for c in report["checks"])
    return {c["name"]: c for c in report["checks"]}


def cli(db: Path, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
    result = invoke(db, *args, env=env)
    assert result.code == 0, result.err
    return result


def register(project: Path) -> None:
    """A `switchboard` server in the project's .mcp.json, running this checkout's switchboard-local."""
    program = str(Path(sys.executable).parent / "switchboard-local")
    servers = {"switchboard": {"type": "stdio", "command": program, "args": ["mcp"], "env": {}}}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: f"{p.stat().st_mode:o}:{hashlib.sha256(p.read_bytes()).hexdigest()}" for p in folder.iterdir()
            if p.is_file()}  # fmt: skip


def subprocess_doctor(db: Path, home: Path, *, prefix: list[str] = (), env: Mapping[str, str] | None = None,
                      args: list[str] = ()) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """doctor --json as a real process (``prefix`` runs it under setpriv or unshare)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HOME": str(home), "PATH": BARE_PATH, **(env or {})}
    full_env.pop("SWITCHBOARD_DB", None)
    command = [*prefix, sys.executable, "-m", "switchboard_local", *(args or ["--db", str(db)]), "doctor", "--json"]
    return subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=120, check=False)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = started_redis_server(tmp_path)
    yield server
    server.stop()


def lead(db: Path, *, pid: int, environ: Mapping[str, str] | None = None) -> None:
    """A process of ``pid`` on this host takes the ingest lead (as `serve` would), with ``environ`` (default: ours)."""

    async def take() -> None:
        async with await open_store(db) as store:
            me = leadership.Candidate(holder=f"test-{pid}", pid=pid, host=socket.gethostname(), kind="serve")
            assert await leadership.try_lead(store, me, environ=environ) is not None

    asyncio.run(take())


# ---------------------------------------------------------------- all ok


def test_a_healthy_setup_is_all_ok_and_exits_0(run_doctor, db_path: Path, project: Path, tmp_path: Path,
                                               redis_server: RedisServer) -> None:  # fmt: skip
    secret_file = tmp_path / "stripe.secret"
    secret_file.write_text("whsec_from_a_file\n")
    secret_file.chmod(0o600)
    cli(db_path, "source", "add", "gh", "--kind", "github", "--secret-env", "GH_DOCTOR_SECRET")
    cli(db_path, "source", "add", "pay", "--kind", "stripe", "--secret-file", str(secret_file))
    cli(db_path, "source", "add", "kept", "--kind", "gitlab", "--secret", SECRET)
    cli(db_path, "adapter", "add", "orders", "--redis-url", redis_server.url, "--mode", "stream", "--key", "orders")
    register(project)
    lead(db_path, pid=os.getpid(), environ={"GH_DOCTOR_SECRET": SECRET})
    code, checks = run_doctor(env={"GH_DOCTOR_SECRET": SECRET})
    assert {name: c["status"] for name, c in checks.items() if c["status"] != "ok"} == {}
    assert code == 0
    expected = {"database", "database folder", "database file", "permissions", "schema", "journal mode", "integrity",
                "disk space", "source gh", "source pay", "source kept", "adapter orders", "write lock", "ingest", "claude",
                "mcp server", "mcp sdk"}  # fmt: skip
    assert set(checks) == expected
    assert checks["database"]["detail"] == f"{db_path} (from --db)"
    assert checks["source gh"]["detail"] == f"$GH_DOCTOR_SECRET is set here and in the leader (serve pid {os.getpid()})"
    assert "0 waiting" in checks["adapter orders"]["detail"]
    assert checks["mcp server"]["detail"].startswith("'switchboard' in project scope")
    assert checks["claude"]["detail"].endswith("(2.1.197 (Claude Code))")
    assert checks["mcp sdk"]["detail"].startswith("mcp 2.")


def test_text_output_is_one_aligned_line_per_check_with_the_fix(db_path: Path, home: Path, project: Path) -> None:
    cli(db_path, "todo", "create", "--queue", "q", "--title", "t")
    db_path.chmod(0o644)
    result = invoke(db_path, "doctor", env=base_env(home, None))
    assert result.code == 1
    lines = result.out.splitlines()
    names = list(parse(invoke(db_path, "doctor", "--json", env=base_env(home, None))))
    assert len(lines) == len(names)
    width = max(map(len, names))
    for line, name in zip(lines, names):  # status, name and detail in three aligned columns
        assert line[:4].rstrip() in ("ok", "warn", "fail") and line[4:6] == "  "
        assert (
            line[6 : 6 + width] == name.ljust(width) and line[6 + width : 8 + width] == "  " and line[8 + width] != " "
        )
    permissions = lines[names.index("permissions")]
    assert permissions.startswith("fail  ") and permissions.endswith(f"  fix: chmod 600 {db_path}")


def test_doctor_changes_nothing_in_the_database_folder(run_doctor, db_path: Path) -> None:
    cli(db_path, "todo", "create", "--queue", "q", "--title", "t")
    cli(db_path, "source", "add", "gh", "--kind", "github", "--secret-env", "GH_DOCTOR_SECRET")
    before = snapshot(db_path.parent)
    run_doctor()
    assert snapshot(db_path.parent) == before  # no -wal, no -shm, the same bytes and modes


# ---------------------------------------------------------------- the database


def test_a_missing_database_is_a_warning_and_is_not_created(run_doctor, tmp_path: Path) -> None:
    db = tmp_path / "not-yet" / "switchboard.db"
    code, checks = run_doctor(db=db)
    assert code == 0
    assert checks["database file"]["status"] == "warn"
    assert checks["database file"]["detail"] == "nothing stored yet; it is created on first use"
    assert checks["database file"]["fix"] == f"switchboard-local --db {db} stats"
    assert checks["database folder"]["status"] == "warn"
    assert not db.parent.exists()
    assert "schema" not in checks and checks["disk space"]["status"] == "ok"


def test_the_database_path_says_where_it_came_from(home: Path, project: Path, tmp_path: Path) -> None:
    from_env = tmp_path / "env.db"
    report = parse(invoke(None, "doctor", "--json", env={**base_env(home, None), "SWITCHBOARD_DB": str(from_env)}))
    assert report["database"]["detail"] == f"{from_env} (from $SWITCHBOARD_DB)"
    report = parse(invoke(None, "doctor", "--json", env={**base_env(home, None), "XDG_DATA_HOME": None}))
    default = home / ".local" / "share" / "switchboard-local" / "switchboard.db"
    assert report["database"]["detail"] == f"{default} (the default)"
    assert not from_env.exists() and not default.parent.exists()


def test_a_database_open_to_others_fails_and_chmod_fixes_it(run_doctor, db_path: Path) -> None:
    cli(db_path, "todo", "create", "--queue", "q", "--title", "t")
    db_path.chmod(0o644)
    code, checks = run_doctor()
    assert code == 1
    assert checks["permissions"]["status"] == "fail"
    assert "open to others" in checks["permissions"]["detail"] and "0644" in checks["permissions"]["detail"]
    assert db_path.stat().st_mode & 0o777 == 0o644  # doctor reports; it does not chmod
    subprocess.run(shlex.split(checks["permissions"]["fix"]), check=True)
    code, checks = run_doctor()
    assert checks["permissions"]["status"] == "ok" and code == 0


def test_a_folder_others_can_write_fails(run_doctor, tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    db = folder / "s.db"
    cli(db, "todo", "create", "--queue", "q", "--title", "t")
    folder.chmod(0o777)
    code, checks = run_doctor(db=db)
    assert code == 1 and checks["database folder"]["status"] == "fail"
    assert checks["database folder"]["fix"] == f"chmod go-w {folder}"


def test_a_shared_sticky_folder_warns_and_the_fix_moves_the_database(run_doctor, tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    db = folder / "s.db"
    cli(db, "todo", "create", "--queue", "q", "--title", "t")
    folder.chmod(0o1777)  # as /tmp is: others cannot replace the file, but can create its -wal first
    code, checks = run_doctor(db=db)
    assert code == 0 and checks["database folder"]["status"] == "warn"
    assert checks["database folder"]["fix"].startswith(f"mkdir -p -m 700 ~/switchboard && mv {db} ~/switchboard/")


def test_a_newer_schema_fails_with_upgrade_as_the_fix_and_is_left_as_it_is(run_doctor, db_path: Path) -> None:
    cli(db_path, "todo", "create", "--queue", "q", "--title", "t")
    sql.run(db_path, "PRAGMA user_version = 99")
    before = snapshot(db_path.parent)
    code, checks = run_doctor()
    assert code == 1
    schema = checks["schema"]
    assert schema["status"] == "fail"
    assert schema["detail"] == f"version 99, newer than this switchboard-local understands ({SCHEMA_VERSION})"
    assert "pip install --upgrade switchboard-local" in schema["fix"]
    assert snapshot(db_path.parent) == before


def test_an_older_schema_is_a_warning_it_is_upgraded_when_next_opened(run_doctor, db_path: Path) -> None:
    cli(db_path, "todo", "create", "--queue", "q", "--title", "t")
    sql.run(db_path, f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    code, checks = run_doctor()
    assert code == 0
    assert checks["schema"]["status"] == "warn" and "upgraded in place when next opened" in checks["schema"]["detail"]
    assert checks["sources"]["status"] == "warn"
    assert sql.value(db_path, "PRAGMA user_version") == SCHEMA_VERSION - 1  # not migrated by doctor


def test_a_foreign_sqlite_file_fails_as_not_ours(run_doctor, db_path: Path) -> None:
    sql.run(db_path, "CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    db_path.chmod(0o600)
    code, checks = run_doctor()
    assert code == 1
    assert checks["schema"]["status"] == "fail"
    assert "not a switchboard-local one" in checks["schema"]["detail"]
    assert "journal mode" not in checks and checks["integrity"]["status"] == "ok"


def test_a_file_that_is_not_sqlite_fails(run_doctor, db_path: Path) -> None:
    db_path.write_bytes(b"meeting notes, not a database\n" * 100)
    db_path.chmod(0o600)
    code, checks = run_doctor()
    assert code == 1
    assert checks["schema"]["status"] == "fail" and "not an SQLite database" in checks["schema"]["detail"]


def test_a_corrupted_page_fails_integrity_with_recover_as_the_fix(run_doctor, db_path: Path, tmp_path: Path) -> None:
    original = tmp_path / "original.db"
    for i in range(40):
        cli(original, "todo", "create", "--queue", "q", "--title", f"t{i}", "--payload", json.dumps("x" * 3000))
    with sqlite3.connect(original) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(original.read_bytes())  # a copy, its middle pages overwritten with garbage
    middle = len(data) // page // 2
    data[middle * page : (middle + 3) * page] = b"\xa5" * (3 * page)
    db_path.write_bytes(bytes(data))
    db_path.chmod(0o600)
    code, checks = run_doctor()
    assert code == 1
    assert checks["integrity"]["status"] == "fail"
    assert checks["integrity"]["fix"].startswith(f"sqlite3 {db_path} .recover | sqlite3 {db_path}.recovered")
    assert db_path.read_bytes() == bytes(data)


# ---------------------------------------------------------------- disk space


def in_a_private_mount_namespace() -> list[str]:
    """unshare as an unprivileged user may: a user and mount namespace where the test mounts a tmpfs."""
    unshare = shutil.which("unshare")
    probe = [unshare, "--user", "--map-root-user", "--mount", "true"] if unshare else None
    if probe is None or subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        reason = "unshare cannot make a user and mount namespace here (needed to mount a small tmpfs)"
        if in_ci():
            pytest.fail(f"{reason}; CI is set, so the disk-space tests must run", pytrace=False)
        pytest.skip(reason)
    return [unshare, "--user", "--map-root-user", "--mount"]


@pytest.mark.parametrize(("size", "status"), [("150m", "warn"), ("64m", "fail")])
def test_disk_space_on_a_small_file_system(tmp_path: Path, home: Path, size: str, status: str) -> None:
    """A real tmpfs of 150 MiB (under 1 GiB: warn) or 64 MiB (under 100 MiB: fail) holds the database."""
    source = tmp_path / "source.db"
    cli(source, "todo", "create", "--queue", "q", "--title", "t")
    small = tmp_path / "small"
    small.mkdir()
    mount = 'mount -t tmpfs -o size="$1",mode=700 tmpfs "$2" && cp "$3" "$2/s.db" && chmod 600 "$2/s.db" && shift 3 && exec "$@"'
    prefix = [*in_a_private_mount_namespace(), "sh", "-c", mount, "sh", size, str(small), str(source)]
    result = subprocess_doctor(small / "s.db", home, prefix=prefix)
    checks = parse(result)
    assert checks["disk space"]["status"] == status, checks["disk space"]
    assert checks["schema"]["status"] == "ok"  # the database was really there
    assert result.returncode == (1 if status == "fail" else 0)


# ---------------------------------------------------------------- webhook sources' secrets


def test_a_missing_secret_variable_fails_and_says_serve_needs_it_too(run_doctor, db_path: Path) -> None:
    cli(db_path, "source", "add", "gh", "--kind", "github", "--secret-env", "GH_DOCTOR_SECRET")
    code, checks = run_doctor(env={"GH_DOCTOR_SECRET": None})
    assert code == 1
    gh = checks["source gh"]
    assert gh["status"] == "fail"
    assert gh["detail"].startswith("$GH_DOCTOR_SECRET is not set in this shell, and no process leads ingest to say "
                                   "whether it has it")  # fmt: skip
    assert gh["fix"].startswith("export GH_DOCTOR_SECRET=")
    code, checks = run_doctor(env={"GH_DOCTOR_SECRET": SECRET})
    assert code == 0 and checks["source gh"]["status"] == "ok"


def test_a_secret_is_never_printed(db_path: Path, home: Path, project: Path, tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET)
    secret_file.chmod(0o644)
    cli(db_path, "source", "add", "a", "--kind", "github", "--secret-env", "GH_DOCTOR_SECRET")
    cli(db_path, "source", "add", "b", "--kind", "github", "--secret-file", str(secret_file))
    cli(db_path, "source", "add", "c", "--kind", "github", "--secret", SECRET)
    env = {**base_env(home, None), "GH_DOCTOR_SECRET": SECRET}
    for args in (["doctor"], ["doctor", "--json"]):
        result = invoke(db_path, *args, env=env)
        assert SECRET not in result.out + result.err


def test_a_secret_file_open_to_others_warns_with_chmod(run_doctor, db_path: Path, tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET)
    secret_file.chmod(0o644)
    cli(db_path, "source", "add", "gh", "--kind", "github", "--secret-file", str(secret_file))
    code, checks = run_doctor()
    assert code == 0
    assert checks["source gh"]["status"] == "warn" and "open to others (0644)" in checks["source gh"]["detail"]
    assert checks["source gh"]["fix"] == f"chmod 600 {secret_file}"


def without_root_over_modes() -> list[str]:
    """Run a command that cannot read past a file's mode: root can, unless it drops these two capabilities."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("setpriv (util-linux) is needed to test an unreadable file as root", pytrace=False)
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"]


def test_an_unreadable_secret_file_fails(db_path: Path, home: Path, tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET)
    secret_file.chmod(0o000)
    cli(db_path, "source", "add", "gh", "--kind", "github", "--secret-file", str(secret_file))
    result = subprocess_doctor(db_path, home, prefix=without_root_over_modes())
    checks = parse(result)
    assert result.returncode == 1, result.stderr
    gh = checks["source gh"]
    assert gh["status"] == "fail"
    assert gh["detail"] == f"{secret_file} cannot be read: Permission denied: every delivery is answered 503"
    assert gh["fix"].endswith(f"chmod 600 {secret_file}")
    assert checks["schema"]["status"] == "ok"  # the database itself was readable


def test_a_missing_secret_file_fails(run_doctor, db_path: Path, tmp_path: Path) -> None:
    gone = tmp_path / "gone.secret"
    cli(db_path, "source", "add", "gh", "--kind", "github", "--secret-file", str(gone))
    code, checks = run_doctor()
    assert code == 1 and checks["source gh"]["detail"].startswith(f"{gone} does not exist")


def test_one_unreadable_secret_of_two_mid_rotation_is_a_warning(run_doctor, db_path: Path) -> None:
    cli(db_path, "source", "add", "gh", "--kind", "github", "--secret", SECRET)
    cli(db_path, "source", "rotate", "gh", "--secret-env", "GH_DOCTOR_NEW")
    code, checks = run_doctor(env={"GH_DOCTOR_NEW": None})
    assert code == 0 and checks["source gh"]["status"] == "warn"


def without(*names: str) -> dict[str, str]:
    """This process's environment without ``names``: what a process started from another shell has."""
    return {k: v for k, v in os.environ.items() if k not in names}


def until_led(db: Path, pid: int, timeout: float = 30) -> None:
    """Until the process ``pid`` leads ingest, as `status --json` tells it."""
    deadline = time.monotonic() + timeout
    while (json.loads(cli(db, "status", "--json").out)["leader"] or {}).get("pid") != pid:
        assert time.monotonic() < deadline, f"pid {pid} never led ingest"
        time.sleep(0.05)


def test_a_secret_variable_only_the_leader_has_is_no_failure_and_doctor_says_the_leader_has_it(
    run_doctor, db_path: Path
) -> None:
    cli(db_path, "source", "add", "gh", "--kind", "github", "--secret-env", "GH_DOCTOR_SECRET")
    with serve_process(db_path, environ=without("GH_DOCTOR_SECRET"), env={"GH_DOCTOR_SECRET": SECRET}) as serve:
        receiver = serve.wait_serving()
        until_led(db_path, serve.proc.pid)
        code, checks = run_doctor(env={"GH_DOCTOR_SECRET": None})
        sent = delivery("github", SECRET)
        assert receiver.post("gh", sent.body, sent.headers).status == 202  # what doctor says is what senders get
    said = f"$GH_DOCTOR_SECRET is not set in this shell; the leader (serve pid {serve.proc.pid}) has it"
    assert (checks["source gh"]["status"], checks["source gh"]["detail"]) == ("ok", said)
    assert code == 0, checks


def test_a_leader_without_the_secret_variable_warns_when_this_shell_has_it_and_fails_when_neither_has(
    run_doctor, db_path: Path
) -> None:
    cli(db_path, "source", "add", "gh", "--kind", "github", "--secret-env", "GH_DOCTOR_SECRET")
    with serve_process(db_path, environ=without("GH_DOCTOR_SECRET")) as serve:
        receiver = serve.wait_serving()
        until_led(db_path, serve.proc.pid)
        _, here = run_doctor(env={"GH_DOCTOR_SECRET": SECRET})
        code, neither = run_doctor(env={"GH_DOCTOR_SECRET": None})
        sent = delivery("github", SECRET)
        assert receiver.post("gh", sent.body, sent.headers).status == 503
    who = f"serve pid {serve.proc.pid}"
    said = f"$GH_DOCTOR_SECRET is set here, but not in the environment of the leader ({who})"
    assert (here["source gh"]["status"], here["source gh"]["detail"]) == (
        "warn", f"{said}: the deliveries it receives are answered 503")  # fmt: skip
    assert here["source gh"]["fix"].startswith(f"restart {who} with GH_DOCTOR_SECRET set")
    assert code == 1
    said = f"$GH_DOCTOR_SECRET is not set in this shell, nor in the leader's environment ({who})"
    assert (neither["source gh"]["status"], neither["source gh"]["detail"]) == (
        "fail", f"{said}: every delivery is answered 503")  # fmt: skip


def test_a_source_the_leader_has_not_answered_for_yet_is_a_warning(run_doctor, db_path: Path) -> None:
    lead(db_path, pid=os.getpid(), environ={})
    cli(db_path, "source", "add", "gh", "--kind", "github", "--secret-env", "GH_DOCTOR_SECRET")  # after the lead
    code, checks = run_doctor(env={"GH_DOCTOR_SECRET": None})
    assert code == 0
    assert checks["source gh"]["status"] == "warn"
    assert checks["source gh"]["detail"].startswith(
        f"$GH_DOCTOR_SECRET is not set in this shell, and the leader (serve pid {os.getpid()}) has not said yet")


# ---------------------------------------------------------------- Redis adapters


def test_a_redis_that_refuses_connections_fails(run_doctor, db_path: Path) -> None:
    port = free_port()  # nothing listens there
    cli(db_path, "adapter", "add", "orders", "--redis-url", f"redis://127.0.0.1:{port}/0", "--mode", "stream",
        "--key", "orders")  # fmt: skip
    code, checks = run_doctor()
    assert code == 1
    orders = checks["adapter orders"]
    assert orders["status"] == "fail" and "unreachable" in orders["detail"]
    assert orders["fix"].startswith(f"start Redis on 127.0.0.1:{port} (redis-server --port {port})")


def test_a_redis_url_from_an_unset_variable_fails(run_doctor, db_path: Path) -> None:
    cli(db_path, "adapter", "add", "orders", "--redis-url-env", "ORDERS_REDIS_URL", "--mode", "list", "--key", "o")
    code, checks = run_doctor(env={"ORDERS_REDIS_URL": None})
    assert code == 1 and checks["adapter orders"]["detail"] == (
        "$ORDERS_REDIS_URL is not set in this shell, and no process leads ingest to say whether it has it")


def test_a_redis_url_variable_only_the_leader_has_is_no_failure(run_doctor, db_path: Path,
                                                                redis_server: RedisServer) -> None:  # fmt: skip
    cli(db_path, "adapter", "add", "orders", "--redis-url-env", "ORDERS_REDIS_URL", "--mode", "list", "--key", "orders",
        env={"ORDERS_REDIS_URL": None})  # fmt: skip
    environ = without("ORDERS_REDIS_URL")
    with serve_process(db_path, environ=environ, env={"ORDERS_REDIS_URL": redis_server.url}) as serve:
        serve.wait_serving()
        until_led(db_path, serve.proc.pid)
        code, checks = run_doctor(env={"ORDERS_REDIS_URL": None})
    said = f"$ORDERS_REDIS_URL is not set in this shell; the leader (serve pid {serve.proc.pid}) has it"
    said += " and consumes redis list 'orders' (its broker is not asked from here)"
    assert (checks["adapter orders"]["status"], checks["adapter orders"]["detail"]) == ("ok", said)
    assert code == 0, checks


def test_a_stream_backlog_in_a_real_redis_warns(run_doctor, db_path: Path, redis_server: RedisServer) -> None:
    cli(db_path, "adapter", "add", "orders", "--redis-url", redis_server.url, "--mode", "stream", "--key", "orders")
    lead(db_path, pid=os.getpid())  # consumed: only the backlog is judged
    client = redis_server.client()
    pipe = client.pipeline(transaction=False)
    for i in range(1200):
        pipe.xadd("orders", {"n": i})
    pipe.execute()
    code, checks = run_doctor()  # no group yet: serve creates it at the stream's start, so all 1200 wait
    assert code == 0
    orders = checks["adapter orders"]
    assert orders["status"] == "warn" and "1200 waiting, 0 read but not acked" in orders["detail"]
    assert orders["fix"].startswith(f"switchboard-local --db {db_path} serve")
    client.xgroup_create("orders", "switchboard", id="0")
    client.xreadgroup("switchboard", "c1", {"orders": ">"}, count=1195)  # read by a consumer that never acks
    code, checks = run_doctor()
    assert checks["adapter orders"]["status"] == "warn"  # 1200 not stored yet, in all
    assert "5 waiting, 1195 read but not acked" in checks["adapter orders"]["detail"]
    client.xack("orders", "switchboard", *[e[0] for e in client.xrange("orders", count=300)])
    code, checks = run_doctor()
    assert checks["adapter orders"]["status"] == "ok"
    assert "5 waiting, 895 read but not acked" in checks["adapter orders"]["detail"]


def test_a_list_backlog_and_its_processing_list_count(run_doctor, db_path: Path, redis_server: RedisServer) -> None:
    cli(db_path, "adapter", "add", "jobs", "--redis-url", redis_server.url, "--mode", "list", "--key", "jobs")
    lead(db_path, pid=os.getpid())  # consumed: only the backlog is judged
    client = redis_server.client()
    client.lpush("jobs", *[f"job {i}" for i in range(1000)])
    for _ in range(10):
        client.lmove("jobs", "jobs:processing", "RIGHT", "RIGHT")
    code, checks = run_doctor()
    assert checks["adapter jobs"]["status"] == "warn"
    assert "990 waiting, 10 read but not acked" in checks["adapter jobs"]["detail"]
    client.ltrim("jobs", 0, 9)
    code, checks = run_doctor()
    assert code == 0 and checks["adapter jobs"]["status"] == "ok"
    assert "10 waiting, 10 read but not acked" in checks["adapter jobs"]["detail"]


def test_a_pubsub_adapter_is_only_pinged(run_doctor, db_path: Path, redis_server: RedisServer) -> None:
    cli(db_path, "adapter", "add", "news", "--redis-url", redis_server.url, "--mode", "pubsub", "--key", "news")
    lead(db_path, pid=os.getpid())  # consumed: only the backlog is judged
    code, checks = run_doctor()
    assert code == 0 and checks["adapter news"]["detail"].endswith("reachable (pub/sub keeps no backlog)")


# ---------------------------------------------------------------- Claude Code and the MCP SDK


def test_no_claude_on_path_is_a_warning(db_path: Path, home: Path, project: Path) -> None:
    if shutil.which("claude", path=BARE_PATH):
        pytest.skip(f"this system has claude in {BARE_PATH}")
    result = invoke(db_path, "doctor", "--json", env=base_env(home, None))
    checks = parse(result)
    assert checks["claude"]["status"] == "warn" and "not on PATH" in checks["claude"]["detail"]
    assert checks["claude"]["fix"] == "npm install -g @anthropic-ai/claude-code"
    assert result.code == 0  # a warning: the CLI and serve work without Claude Code


def test_an_unregistered_server_warns_with_the_claude_mcp_add_command(run_doctor, db_path: Path) -> None:
    code, checks = run_doctor()
    assert code == 0 and checks["mcp server"]["status"] == "warn"
    fix = shlex.split(checks["mcp server"]["fix"])
    # The name before -e, which would take it as one more NAME=value (tests/cli/test_claude_code.py runs it).
    assert fix[:6] == ["claude", "mcp", "add", "switchboard", "-e", f"SWITCHBOARD_DB={db_path}"]
    assert fix[-1] == "mcp"


def test_a_server_registered_in_claude_json_is_found_in_local_then_user_scope(run_doctor, home: Path,
                                                                            project: Path) -> None:  # fmt: skip
    program = str(Path(sys.executable).parent / "switchboard-local")
    user = {"command": program, "args": ["mcp"]}
    local = {"command": program, "args": ["mcp", "--agent", "reviewer"]}
    config = {"mcpServers": {"switchboard": user}, "projects": {str(project.parent): {"mcpServers": {"sb": local}}}}
    (home / ".claude.json").write_text(json.dumps(config))
    _, checks = run_doctor()
    assert checks["mcp server"]["status"] == "ok"
    assert checks["mcp server"]["detail"].startswith(
        f"'sb' in local scope ({home / '.claude.json'}, project {project.parent})"
    )
    del config["projects"]
    (home / ".claude.json").write_text(json.dumps(config))
    _, checks = run_doctor()
    assert checks["mcp server"]["detail"].startswith(f"'switchboard' in user scope ({home / '.claude.json'})")


def test_a_registered_server_whose_command_is_gone_warns(run_doctor, project: Path) -> None:
    servers = {"switchboard": {"command": "/nowhere/switchboard-local", "args": ["mcp"]}}
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
    _, checks = run_doctor()
    assert checks["mcp server"]["status"] == "warn" and "is not found on PATH" in checks["mcp server"]["detail"]
    assert checks["mcp server"]["fix"].startswith("claude mcp remove switchboard && claude mcp add")


def test_an_mcp_sdk_that_does_not_import_fails(db_path: Path, home: Path, tmp_path: Path) -> None:
    """A broken `mcp` package ahead of the real one on the path: the import fails as a damaged install's would."""
    broken = tmp_path / "broken" / "mcp"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('a damaged install')\n")
    cli(db_path, "todo", "create", "--queue", "q", "--title", "t")
    result = subprocess_doctor(db_path, home, env={"PYTHONPATH": os.pathsep.join([str(broken.parent), str(REPO_ROOT)])})
    checks = parse(result)
    assert result.returncode == 1
    assert checks["mcp sdk"]["status"] == "fail" and "a damaged install" in checks["mcp sdk"]["detail"]
    assert " -m pip install 'mcp" in checks["mcp sdk"]["fix"]


# ---------------------------------------------------------------- ingest leadership


def test_adapters_with_no_process_leading_ingest_fail_naming_them(run_doctor, db_path: Path) -> None:
    cli(db_path, "adapter", "add", "orders", "--redis-url", f"redis://127.0.0.1:{free_port()}/0", "--mode", "list",
        "--key", "orders")  # fmt: skip
    code, checks = run_doctor()
    assert code == 1
    assert checks["ingest"]["status"] == "fail" and "orders not consumed" in checks["ingest"]["detail"]
    assert "serve" in checks["ingest"]["fix"]


def test_schedules_with_no_process_leading_ingest_fail_naming_them(run_doctor, db_path: Path) -> None:
    cli(db_path, "source", "add", "nightly", "--kind", "schedule", "--cron", "30 2 * * *")
    code, checks = run_doctor()
    assert code == 1
    assert checks["ingest"]["status"] == "fail" and "schedule nightly not fired" in checks["ingest"]["detail"]


def test_no_process_leading_ingest_without_adapters_is_a_warning(run_doctor, db_path: Path) -> None:
    cli(db_path, "todo", "create", "--queue", "q", "--title", "t")
    _, checks = run_doctor()
    assert (checks["ingest"]["status"], checks["ingest"]["detail"]) == ("warn", "no process leads ingest: nothing is pruned")


def test_a_leader_whose_process_is_gone_is_a_warning(run_doctor, db_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lead(db_path, pid=int(gone.stdout))  # a pid that has just ended
    _, checks = run_doctor()
    assert checks["ingest"]["status"] == "warn" and "that process is gone" in checks["ingest"]["detail"]


def test_a_live_leader_is_named(run_doctor, db_path: Path) -> None:
    lead(db_path, pid=os.getpid())
    _, checks = run_doctor()
    assert checks["ingest"]["status"] == "ok"
    assert checks["ingest"]["detail"].startswith(f"led by serve pid {os.getpid()} on {socket.gethostname()} since ")
