"""`db copy --to TARGET`: what it copied, per table (text and --json); a non-empty target refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.cli import as_json, invoke, run_cli


def populate(cli) -> dict:
    as_json(cli, "todo", "create", "--queue", "q", "--title", "keyed", "--key", "k")
    as_json(cli, "todo", "create", "--queue", "q", "--title", "held")
    claimed = as_json(cli, "todo", "claim", "--queue", "q", "--owner", "alice")
    as_json(cli, "config", "set", "limits.max_payload", "2MiB")
    return claimed


def test_copy_reports_the_rows_it_copied_per_table_as_json(cli, tmp_path: Path) -> None:
    populate(cli)
    target = tmp_path / "target.db"
    copied = as_json(cli, "db", "copy", "--to", str(target))
    assert copied["copied"]["todos"] == 2 and copied["copied"]["settings"] == 1
    assert copied["copied"]["events"] == 3  # the operator events of the two creates and the config change
    assert copied["total"] == sum(copied["copied"].values())
    assert copied["target"] == str(target)


def test_copy_tells_people_what_it_copied(cli, tmp_path: Path) -> None:
    populate(cli)
    result = cli("db", "copy", "--to", str(tmp_path / "target.db"))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith("copied ") and lines[0].endswith("target.db")
    assert lines[1].split() == ["WHAT", "ROWS"]
    assert ["todos", "2"] in [line.split() for line in lines] and lines[-1].split() == ["total", "6"]


def test_a_claimed_todo_is_completed_in_the_target_with_its_token(cli, tmp_path: Path) -> None:
    claimed = populate(cli)
    target = tmp_path / "target.db"
    as_json(cli, "db", "copy", "--to", str(target))
    done = as_json(lambda *a, **k: invoke(target, *a, **k), "todo", "complete", str(claimed["id"]),
                   "--token", claimed["lease_token"])  # fmt: skip
    assert done["state"] == "done"


def test_a_non_empty_target_is_refused_with_exit_1_naming_what_it_holds(cli, tmp_path: Path) -> None:
    populate(cli)
    target = tmp_path / "target.db"
    assert invoke(target, "todo", "create", "--queue", "other", "--title", "mine").code == 0
    result = cli("db", "copy", "--to", str(target))
    assert result.code == 1
    assert "switchboard-local: conflict:" in result.err and "is not empty: it holds 1 event, 1 todo;" in result.err
    listed = as_json(lambda *a, **k: invoke(target, *a, **k), "todo", "list")
    assert [t["title"] for t in listed] == ["mine"]


def test_a_refused_target_is_named_in_quotes_even_when_its_name_is_blank(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a file named " " in this folder, as the CLI fuzz test once made
    populate(cli)
    assert cli("db", "copy", "--to", " ").code == 0
    again = cli("db", "copy", "--to", " ")
    assert again.code == 1
    assert again.err.startswith("switchboard-local: conflict: the target ' ' is not empty: it holds")


def test_copy_runs_as_its_own_process(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    assert run_cli("todo", "create", "--queue", "q", "--title", "t", db=source).returncode == 0
    done = run_cli("db", "copy", "--to", str(tmp_path / "target.db"), "--json", db=source)
    assert done.returncode == 0, done.stderr
    assert '"todos": 1' in done.stdout


@pytest.mark.postgres
def test_copy_into_postgresql_by_url_and_the_lease_still_completes_there(cli, postgres_server) -> None:
    claimed = populate(cli)
    url = postgres_server.fresh_database()
    try:
        copied = as_json(cli, "db", "copy", "--to", url)
        assert copied["copied"]["todos"] == 2 and copied["target"] == url
        on_postgres = lambda *a, **k: invoke(url, *a, **k)  # noqa: E731
        again = as_json(on_postgres, "todo", "create", "--queue", "q", "--title", "again", "--key", "k")
        assert again["created"] is False and again["id"] == claimed["id"]  # the claimed todo holds the key
        done = as_json(on_postgres, "todo", "complete", str(claimed["id"]), "--token", claimed["lease_token"])
        assert done["state"] == "done"
    finally:
        postgres_server.release(url)


@pytest.mark.postgres
def test_a_url_s_password_is_never_printed(cli, postgres_server) -> None:
    populate(cli)
    url = postgres_server.fresh_database().replace("postgres@", "postgres:s3cret@")
    try:
        result = cli("db", "copy", "--to", url)
        assert result.code == 0, result.err
        assert "s3cret" not in result.out + result.err and "postgres:***@" in result.out
    finally:
        postgres_server.release(url)
