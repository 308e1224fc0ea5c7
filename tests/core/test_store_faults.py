"""A database that cannot be used, or not right now, is a clear error and a
documented exit status from every command, never a traceback (hardening §9).

Real faults, caused for real: a corrupted page, a lock held by another
process, a folder the user cannot write, a device, a full file system.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cli import run_cli

pytestmark = pytest.mark.sqlite_only  # the SQLite store itself


def refused(result: subprocess.CompletedProcess, status: int, code: str) -> str:
    assert result.returncode == status, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"switchboard-local: {code}: "), result.stderr
    return result.stderr


@contextlib.contextmanager
def unwritable(folder: Path) -> Iterator[None]:
    """The folder cannot be written to, even by root (immutable), for the block's time."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(folder)], check=True)
    else:
        folder.chmod(0o500)
    try:
        yield
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o700)


def with_todos(db: Path, n: int = 200) -> None:
    for i in range(3):
        assert run_cli("todo", "create", "--queue", "q", "--title", f"t{i}", "--payload", '"' + "x" * 4000 + '"',
                   db=db).returncode == 0  # fmt: skip


def test_a_corrupted_page_is_refused_as_unusable_with_exit_3(tmp_path):
    db = tmp_path / "s.db"
    with_todos(db)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(db.read_bytes())
    for page in range(1, len(data) // page_size):  # every page but the header's
        data[page * page_size : page * page_size + 64] = b"\xa5" * 64
    db.write_bytes(bytes(data))
    for command in (["todo", "list"], ["todo", "create", "--queue", "q", "--title", "t"], ["stats"]):
        refused(run_cli(*command, db=db), 3, "store_unusable")


def test_a_lock_held_past_the_busy_timeout_is_busy_with_exit_4(tmp_path):
    db = tmp_path / "s.db"
    with_todos(db)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        for command in (["todo", "create", "--queue", "q", "--title", "t"], ["todo", "claim"]):
            err = refused(run_cli(*command, db=db, env={"SWITCHBOARD_BUSY_TIMEOUT": "0.2"}), 4, "busy")
            assert "locked by another process" in err
        assert run_cli("todo", "list", db=db).returncode == 0  # reads never wait for the writer
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_new_database_in_a_folder_that_cannot_be_written_is_unavailable_with_exit_3(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    with unwritable(folder):
        refused(run_cli("todo", "list", db=folder / "s.db"), 3, "unavailable")
    assert list(folder.iterdir()) == []


def test_a_home_that_cannot_be_written_is_unavailable_with_exit_3(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "XDG_DATA_HOME": "", "SWITCHBOARD_DB": ""}
    with unwritable(home):
        err = refused(run_cli("todo", "list", env=env), 3, "unavailable")
    assert str(home) in err


@pytest.mark.parametrize("path", ["/dev/null", "/proc/self/status", "/proc/switchboard.db"])
def test_a_device_or_a_system_file_system_is_refused_with_exit_3(path):
    refused(run_cli("todo", "list", db=path), 3, "store_unusable")


@pytest.mark.parametrize("where", ["the file", "a folder above it"])
def test_a_symlink_loop_in_the_path_is_unavailable_with_exit_3(tmp_path, where):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    db = tmp_path / "a" if where == "the file" else tmp_path / "a" / "switchboard.db"
    refused(run_cli("todo", "list", db=db), 3, "unavailable")


@pytest.mark.parametrize("command", [("todo", "list"), ("db", "path")])
def test_a_path_in_the_home_of_a_user_that_does_not_exist_is_unavailable_with_exit_3(command):
    refused(run_cli(*command, db="~no-such-user-here/switchboard.db"), 3, "unavailable")


@pytest.mark.parametrize("name", [":memory:", "file:s.db?mode=ro"])
def test_a_file_named_like_an_sqlite_special_name_is_an_ordinary_file(tmp_path, name):
    # SQLite reads ":memory:" (and, with URIs on, "file:…") as no file at all.
    created = run_cli("todo", "create", "--queue", "q", "--title", "kept", "--db", name, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    listed = run_cli("todo", "list", "--db", name, cwd=tmp_path)
    assert listed.returncode == 0 and "kept" in listed.stdout, listed.stderr
    assert (tmp_path / name).is_file()


def test_a_busy_timeout_that_is_not_a_number_is_a_usage_error(tmp_path):
    refused(run_cli("todo", "list", db=tmp_path / "s.db", env={"SWITCHBOARD_BUSY_TIMEOUT": "soon"}), 2,
            "invalid_argument")  # fmt: skip


@pytest.fixture
def full_disk(tmp_path) -> Iterator[Path]:
    """A real file system of 2 MiB, filled to the last block once the test says so."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(folder: Path) -> None:
    # Unbuffered: a write the full disk cut short leaves nothing for close() to flush (and fail on).
    with open(folder / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 65536)
            f.flush()


def test_every_verb_on_a_full_disk_is_unavailable_with_exit_3(full_disk):
    db = full_disk / "s.db"
    with_todos(db)
    fill(full_disk)
    for command in (["todo", "list"], ["todo", "show", "1"], ["stats"], ["events", "list"],
                    ["todo", "create", "--queue", "q", "--title", "t"], ["todo", "claim"]):  # fmt: skip
        err = refused(run_cli(*command, db=db), 3, "unavailable")
        assert "full" in err
    (full_disk / "filler").unlink()
    assert run_cli("todo", "list", db=db).returncode == 0  # and all is well once there is room again
