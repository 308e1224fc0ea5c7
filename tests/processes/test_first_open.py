"""Many processes opening a brand-new database at once (issue 33): as on a first install, where
Claude Code starts several `mcp` processes, or a `serve` and an `mcp` start together. Every one
succeeds, and the database gets exactly one schema; on both backends, real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from switchboard_local.core.store.shared import SCHEMA_VERSION
from switchboard_local.core.store.sqlite.migrations import APPLICATION_ID

from support.cli import REPO_ROOT
from support.receiver import ServeProcess
from support.sql import rows

ROUNDS = 3  # a new database each round (8 Python processes each: a few seconds a round)
VERBS = [["stats", "--json"], ["stats", "--json"], ["status", "--json"], ["todo", "list", "--json"],
         ["events", "list", "--json"], ["mcp"], ["mcp"]]  # fmt: skip  (and a `serve`: eight in all)


def tables(db: Path | str) -> set[str]:
    if isinstance(db, str):
        return {name for (name,) in rows(db, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    return {name for (name,) in rows(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'")}


def versions(db: Path | str) -> list[tuple]:
    if isinstance(db, str):
        return rows(db, "SELECT version FROM schema_migrations")
    return rows(db, "PRAGMA user_version") + rows(db, "PRAGMA application_id")


def test_processes_opening_a_new_database_at_once_all_succeed_and_make_one_schema(backend, tmp_path, request) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "XDG_DATA_HOME": str(tmp_path / "data")}
    if backend == "sqlite":
        databases: list[Path | str] = [tmp_path / f"round{n}" / "new" / "sb.db" for n in range(ROUNDS)]
        reference: Path | str = tmp_path / "reference.db"
        assert subprocess.run([sys.executable, "-m", "switchboard_local", "stats", "--db", str(reference)],
                              env=env, capture_output=True).returncode == 0  # fmt: skip
        wanted = [(SCHEMA_VERSION,), (APPLICATION_ID,)]
    else:
        server = request.getfixturevalue("postgres_server")
        databases = [server.empty_database() for _ in range(ROUNDS)]
        for url in databases:
            request.addfinalizer(lambda url=url: server.drop(url))
        reference = server.template_url()
        wanted = [(SCHEMA_VERSION,)]
    for db in databases:
        serve = ServeProcess(db, environ=env)  # started first of the eight, the others right after
        others = [subprocess.Popen([sys.executable, "-m", "switchboard_local", *verb], env={**env, "SWITCHBOARD_DB": str(db)},
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for verb in VERBS]  # fmt: skip
        try:
            serve.wait_serving(timeout=60)
        finally:
            stopped = serve.stop(timeout=60)
        errors = [proc.communicate(timeout=60)[1] for proc in others]
        failed = [(verb, proc.returncode, err[-500:]) for verb, proc, err in zip(VERBS, others, errors, strict=True)
                  if proc.returncode != 0]  # fmt: skip
        assert not failed and stopped == 0, (failed, stopped, serve.stderr[-1000:])
        assert versions(db) == wanted
        assert tables(db) == tables(reference)
