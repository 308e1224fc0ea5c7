"""Reading a database file without changing it: ``inspect_store`` and ``open_store(read_only=True)``.

What `doctor` stands on: a missing file is never created, an older file is
never migrated, a file open to others is never chmod-ed, and the folder is
left as it was found (no -wal or -shm left behind).
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from switchboard_local.core import sources
from switchboard_local.core.errors import StoreUnusable, Unavailable
from switchboard_local.core.store.opener import inspect_store, open_store
from switchboard_local.core.store.shared import SCHEMA_VERSION

from support import sql

pytestmark = [pytest.mark.anyio, pytest.mark.sqlite_only]  # the SQLite store itself


def snapshot(folder: Path) -> dict[str, str]:
    """Every file of the folder with its mode and the hash of its bytes."""
    return {
        p.name: f"{p.stat().st_mode:o}:{hashlib.sha256(p.read_bytes()).hexdigest()}" for p in sorted(folder.iterdir())
    }


async def new_file(path: Path) -> None:
    async with await open_store(path) as store:
        await sources.add(store, "gh", family="webhook", kind="github", trust_mode="github", config={},
                          secrets=[{"env": "GH_SECRET"}])  # fmt: skip


async def test_inspect_reads_a_sound_file_and_leaves_its_folder_as_it_was(db_path: Path) -> None:
    await new_file(db_path)
    before = snapshot(db_path.parent)
    state = await inspect_store(db_path)
    assert state.database and state.ours and not state.empty
    assert (state.version, state.current) == (SCHEMA_VERSION, SCHEMA_VERSION)
    assert state.journal_mode == "wal" and state.problems == ()
    assert snapshot(db_path.parent) == before  # no -wal or -shm left behind


async def test_inspect_of_a_missing_file_is_unavailable_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "s.db"
    with pytest.raises(Unavailable):
        await inspect_store(missing)
    assert not missing.parent.exists()


async def test_inspect_tells_a_newer_a_foreign_and_a_non_sqlite_file_apart(tmp_path: Path) -> None:
    newer, foreign, text = tmp_path / "newer.db", tmp_path / "foreign.db", tmp_path / "text.db"
    await new_file(newer)
    sql.run(newer, f"PRAGMA user_version = {SCHEMA_VERSION + 3}")
    sql.run(foreign, "CREATE TABLE notes (body TEXT)")
    text.write_bytes(b"just some text, long enough to be more than a header " * 40)
    got = await inspect_store(newer)
    assert got.ours and got.version == SCHEMA_VERSION + 3
    got = await inspect_store(foreign)
    assert got.database and not got.ours
    got = await inspect_store(text)
    assert not got.database and "not a database" in str(got.error)


async def test_inspect_finds_a_corrupted_page(db_path: Path) -> None:
    await new_file(db_path)
    async with await open_store(db_path) as store:
        for i in range(60):
            await sources.add(store, f"s{i}", family="webhook", kind="open", trust_mode="open",
                              config={"pad": "x" * 2000})  # fmt: skip
    with sqlite3.connect(db_path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(db_path.read_bytes())
    middle = len(data) // page // 2
    data[middle * page : (middle + 1) * page] = b"\xa5" * page
    db_path.write_bytes(bytes(data))
    state = await inspect_store(db_path)
    assert state.database and state.problems


async def test_inspect_answers_while_another_process_holds_the_write_lock(db_path: Path) -> None:
    await new_file(db_path)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        state = await inspect_store(db_path)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert state.problems == () and state.version == SCHEMA_VERSION


async def test_a_read_only_store_reads_and_refuses_every_write(db_path: Path) -> None:
    await new_file(db_path)
    db_path.chmod(0o644)  # open to others: a read-write open would make it owner-only
    before = snapshot(db_path.parent)
    async with await open_store(db_path, read_only=True) as store:
        assert [s.name for s in await sources.list_sources(store)] == ["gh"]
        with pytest.raises(Unavailable):
            await sources.remove(store, "gh")
    assert snapshot(db_path.parent) == before


async def test_a_read_only_store_never_creates_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "s.db"
    with pytest.raises(Unavailable):
        await open_store(missing, read_only=True)
    assert list(tmp_path.iterdir()) == []


async def test_a_read_only_store_refuses_an_older_file_and_leaves_it_unmigrated(db_path: Path) -> None:
    await new_file(db_path)
    sql.run(db_path, f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    with pytest.raises(StoreUnusable, match="upgraded when opened for writing"):
        await open_store(db_path, read_only=True)
    assert sql.value(db_path, "PRAGMA user_version") == SCHEMA_VERSION - 1
