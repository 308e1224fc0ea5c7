"""The `todo` commands, and the command line as a whole (`--db`, `python -m`, the schema check).

Here: each todo verb's JSON shape and exit status, bad todo arguments refused
before anything is written, `@FILE` payloads, todo output on a terminal.
Sources, events, prune and adapters are in test_source_commands.py; the one
error format every command shares (usage errors, --json errors, Ctrl-C) is in
test_errors.py.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from switchboard_local.cli.common import operator

from support.cli import as_json, invoke, run_cli
from support.sql import count, rows, run

TODO_FIELDS = {
    "id", "queue", "title", "kind", "payload", "state", "dead_letter", "priority", "assignee",
    "attempt", "max_attempts", "owner", "lease_expires_at", "visible_at", "idempotency_key",
    "event_id", "result", "last_error", "created_at", "updated_at", "claimed_at", "completed_at",
    "cancelled_by", "cancel_reason", "blocked",
}  # fmt: skip
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.mark.both_backends
def test_round_trip_create_claim_complete(cli) -> None:
    created = as_json(cli, "todo", "create", "--queue", "review", "--title", "Review PR 42", "--payload", '{"pr": 42}')
    assert created["created"] is True
    assert set(created) == TODO_FIELDS | {"created"}
    assert created["state"] == "pending" and created["payload"] == {"pr": 42}
    assert RFC3339.match(created["created_at"])

    claimed = as_json(cli, "todo", "claim", "--queue", "review", "--owner", "alice")
    assert set(claimed) == TODO_FIELDS | {"lease_token"}
    assert claimed["id"] == created["id"] and claimed["owner"] == "alice" and claimed["attempt"] == 1
    assert RFC3339.match(claimed["lease_expires_at"])

    done = as_json(cli, "todo", "complete", str(claimed["id"]), "--token", claimed["lease_token"], "--result", '{"ok": true}')
    assert done["state"] == "done" and done["result"] == {"ok": True}
    assert "lease_token" not in done

    shown = as_json(cli, "todo", "show", str(created["id"]))
    assert [(a["owner"], a["outcome"]) for a in shown["attempts"]] == [("alice", "completed")]


@pytest.mark.both_backends
def test_create_with_a_live_key_returns_the_existing_todo(cli, db_path: Path) -> None:
    first = as_json(cli, "todo", "create", "--queue", "q", "--title", "one", "--key", "k")
    again = as_json(cli, "todo", "create", "--queue", "q", "--title", "two", "--key", "k")
    assert again["created"] is False and again["id"] == first["id"] and again["title"] == "one"
    assert count(db_path, "todos") == 1


def test_claim_with_nothing_claimable_prints_null_and_exits_zero(cli) -> None:
    code, out, _, _ = cli("todo", "claim", "--json")
    assert (code, json.loads(out)) == (0, None)
    code, out, _, _ = cli("todo", "claim")
    assert (code, out.strip()) == (0, "nothing to claim")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["todo", "create", "--queue", "q", "--title", "t", "--payload", "{bad"], "--payload"),
        (["todo", "create", "--queue", "q", "--title", "t", "--delay", "-1"], "--delay"),
        (["todo", "create", "--queue", "q", "--title", "t", "--max-attempts", "0"], "--max-attempts"),
        (["todo", "create", "--queue", "q", "--title", "t", "--priority", "high"], "--priority"),
        (["todo", "create", "--queue", "q", "--title", "   "], "title"),
        (["todo", "create", "--queue", "q", "--title", "t", "--payload", "@/nonexistent/file.json"], "--payload"),
        (["todo", "list", "--state", "sleeping"], "--state"),
        (["todo", "claim", "--lease", "-5"], "--lease"),
        (["todo", "heartbeat", "1", "--token", "x", "--lease", "0"], "--lease"),
        (["todo", "complete", "1", "--token", "x", "--result", "nope"], "--result"),
        (["todo", "complete", "1"], "--token"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_bad_arguments_exit_2_name_the_argument_and_write_nothing(cli, db_path: Path, args, named) -> None:
    code, out, err, _ = cli(*args)
    assert code == 2
    assert named in err
    assert count(db_path, "todos") == 0


def test_payload_from_a_file_and_from_stdin(cli, tmp_path: Path) -> None:
    payload_file = tmp_path / "payload.json"
    payload_file.write_text('{"from": "file"}')
    from_file = as_json(cli, "todo", "create", "--queue", "q", "--title", "t", "--payload", f"@{payload_file}")
    from_stdin = as_json(cli, "todo", "create", "--queue", "q", "--title", "t", "--payload", "@-", input='["stdin"]')
    assert from_file["payload"] == {"from": "file"}
    assert from_stdin["payload"] == ["stdin"]


def test_stale_token_is_refused_with_exit_1_and_a_conflict_code(cli) -> None:
    as_json(cli, "todo", "create", "--queue", "q", "--title", "t")
    claimed = as_json(cli, "todo", "claim")
    code, out, err, _ = cli("todo", "complete", str(claimed["id"]), "--token", "not-the-token", "--json")
    assert code == 1
    assert json.loads(out)["error"]["code"] == "conflict"
    assert "conflict:" in err
    assert as_json(cli, "todo", "show", str(claimed["id"]))["state"] == "claimed"


def test_unknown_id_exits_1_with_not_found(cli) -> None:
    code, _, err, _ = cli("todo", "show", "404")
    assert code == 1 and "not_found: todo 404 does not exist" in err


@pytest.mark.both_backends
def test_fail_to_dead_letter_then_redrive(cli) -> None:
    todo = as_json(cli, "todo", "create", "--queue", "q", "--title", "t", "--max-attempts", "1")
    claimed = as_json(cli, "todo", "claim", str(todo["id"]))
    failed = as_json(cli, "todo", "fail", str(todo["id"]), "--token", claimed["lease_token"], "--error", "boom")
    assert failed["state"] == "failed" and failed["dead_letter"] is True and failed["last_error"] == "boom"
    stats = as_json(cli, "stats")["queues"]
    assert stats == [
        {"queue": "q", "ready": 0, "delayed": 0, "pending": 0, "claimed": 0, "done": 0, "dead": 1, "cancelled": 0,
         "oldest_ready_age_seconds": None, "paused": False, "blocked": 0, "max_claimed": None,
         "max_per_minute": None, "claims_last_minute": None}
    ]  # fmt: skip
    redriven = as_json(cli, "todo", "redrive", str(todo["id"]))
    assert (redriven["state"], redriven["attempt"], redriven["dead_letter"]) == ("pending", 0, False)


def test_release_puts_the_todo_back_with_the_attempt_refunded(cli) -> None:
    todo = as_json(cli, "todo", "create", "--queue", "q", "--title", "t")
    claimed = as_json(cli, "todo", "claim")
    released = as_json(cli, "todo", "release", str(todo["id"]), "--token", claimed["lease_token"])
    assert (released["state"], released["attempt"], released["owner"]) == ("pending", 0, None)


@pytest.mark.both_backends
def test_list_filters_by_queue_and_state_newest_first(cli) -> None:
    for queue, title in [("a", "one"), ("b", "two"), ("a", "three")]:
        as_json(cli, "todo", "create", "--queue", queue, "--title", title)
    as_json(cli, "todo", "claim", "--queue", "b")
    assert [t["title"] for t in as_json(cli, "todo", "list", "--queue", "a")] == ["three", "one"]
    assert [t["title"] for t in as_json(cli, "todo", "list", "--state", "claimed")] == ["two"]
    assert [t["title"] for t in as_json(cli, "todo", "list", "--limit", "1")] == ["three"]


def test_db_option_works_before_the_command_and_env_var_is_honoured(tmp_path: Path) -> None:
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    result = invoke(None, "--db", str(first), "--json", "todo", "create", "--queue", "q", "--title", "t")
    assert result.code == 0 and json.loads(result.out)["id"] == 1
    result = invoke(None, "db", "path", env={"SWITCHBOARD_DB": str(second)})
    assert result.out.strip() == str(second)
    result = invoke(None, "todo", "list", "--json", env={"SWITCHBOARD_DB": str(first)})
    assert [t["title"] for t in json.loads(result.out)] == ["t"]


def test_a_database_from_a_newer_version_is_refused_with_exit_3(cli, db_path: Path) -> None:
    as_json(cli, "todo", "list")
    run(db_path, "PRAGMA user_version = 999")
    code, _, err, _ = cli("todo", "list")
    assert code == 3
    assert "schema version 999" in err and "upgrade switchboard-local" in err


@pytest.mark.both_backends
def test_python_dash_m_runs_the_cli_as_a_real_process(db_path: Path) -> None:
    created = run_cli("todo", "create", "--queue", "q", "--title", "t", "--json", db=db_path)
    assert created.returncode == 0, created.stderr
    missing = run_cli("todo", "show", "99", db=db_path)
    assert missing.returncode == 1 and "not_found" in missing.stderr
    usage = run_cli("todo", "list", "--state", "nope", db=db_path)
    assert usage.returncode == 2


def test_cli_commands_do_not_import_the_mcp_sdk(db_path: Path) -> None:
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from switchboard_local.cli.main import main\n"
        f"r = CliRunner().invoke(main, ['todo', 'create', '--queue', 'q', '--title', 't', '--db', {str(db_path)!r}])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "args",
    [
        ["todo", "show", str(2**63)],
        ["todo", "redrive", "0"],
        ["events", "list", "--since", str(2**64)],
        ["prune", "--older-than", "inf"],
        ["todo", "create", "--queue", "q", "--title", "t", "--payload", '"\\ud800"'],
        ["todo", "create", "--queue", "q", "--title", "t", "--payload", "[" * 5000 + "]" * 5000],
        ["todo", "create", "--queue", "q", "--title", "t", "--payload", "1" * 5000],
        ["todo", "create", "--queue", "q", "--title", "t", "--key", "k\udcff"],  # an undecodable byte in argv
        ["todo", "list", "--queue", "\udced\udca0\udc80"],
        ["rule", "test", "--event", str(2**63)],
        ["prune", "--max-events", str(2**63)],
        ["adapter", "add", "o", "--redis-url", "redis://h", "--mode", "stream", "--key", "k", "--claim-idle", str(2**63)],
    ],
    ids=["id-2**63", "id-0", "since-2**64", "older-than-inf", "surrogate-payload", "deep-payload",
         "5000-digit-payload", "undecodable-key", "undecodable-filter", "event-2**63", "max-events-2**63",
         "claim-idle-2**63"],
)  # fmt: skip
def test_hostile_arguments_exit_2_with_an_error_and_write_nothing(cli, db_path: Path, args) -> None:
    code, out, err, _ = cli(*args, "--json")
    assert code == 2, err
    assert json.loads(out)["error"]["code"] == "invalid_argument"
    assert "Traceback" not in err
    assert count(db_path, "todos") == 0


# ---------------------------------------------------------------- @FILE: what may be read


def test_a_payload_file_that_is_not_utf8_is_refused_naming_the_byte(cli, db_path: Path, tmp_path: Path) -> None:
    payload = tmp_path / "latin1.json"
    payload.write_bytes(b'{"a": "caf\xe9"}')
    code, _, err, _ = cli("todo", "create", "--queue", "q", "--title", "t", "--payload", f"@{payload}")
    assert code == 2
    assert f"invalid_argument: --payload: {payload} is not valid UTF-8 text (byte 10)" in err
    assert count(db_path, "todos") == 0


def test_a_payload_from_a_fifo_without_a_writer_is_refused_at_once(db_path: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    result = run_cli("todo", "create", "--queue", "q", "--title", "t", "--payload", f"@{fifo}", db=db_path)
    assert result.returncode == 2  # before anything was read: run_cli's timeout fails a hang
    assert f"--payload: {fifo} is not a regular file (use @- to read stdin)" in result.stderr


@pytest.mark.parametrize("where", ["/dev/zero", "a directory"])
def test_a_payload_from_a_device_or_a_directory_is_refused_before_reading(db_path: Path, tmp_path: Path, where: str) -> None:
    path = tmp_path if where == "a directory" else Path(where)
    result = run_cli("todo", "complete", "1", "--token", "x", "--result", f"@{path}", db=db_path)
    assert result.returncode == 2
    assert f"--result: {path} is not a regular file" in result.stderr


def test_a_payload_over_the_read_ceiling_is_refused_from_a_file_and_from_stdin(db_path: Path, tmp_path: Path) -> None:
    from switchboard_local.cli.common import MAX_READ

    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(MAX_READ + 1)  # sparse: no disk used
    from_file = run_cli("todo", "create", "--queue", "q", "--title", "t", "--payload", f"@{huge}", db=db_path)
    assert from_file.returncode == 2 and f"--payload: {huge} is larger than 64 MiB" in from_file.stderr
    with huge.open("rb") as stdin:
        from_stdin = run_cli("todo", "create", "--queue", "q", "--title", "t", "--payload", "@-", db=db_path, stdin=stdin)
    assert from_stdin.returncode == 2 and "--payload: stdin is larger than 64 MiB" in from_stdin.stderr
    assert count(db_path, "todos") == 0


# ---------------------------------------------------------------- what reaches a terminal

RAW_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
HOSTILE_TITLE = "evil\x1b]0;owned\x07\x00\x9b2J\u202etxt\x7f"


def test_todo_output_never_writes_a_raw_control_character(cli, db_path: Path) -> None:
    todo = as_json(cli, "todo", "create", "--queue", "q", "--title", "t")
    with sqlite3.connect(db_path) as conn:  # as an older version (or a hand edit) could have stored it
        conn.execute(
            "UPDATE todos SET title = ?, queue = ?, kind = ?, last_error = ?, payload = ? WHERE id = ?",
            (HOSTILE_TITLE, "q\x1b[31m\nforged row", "k\x9d", "\x1b[2J", json.dumps({"k": "\x9b\u202e\x7f\x1b"}, ensure_ascii=False), todo["id"]),
        )  # fmt: skip
    for args in (["todo", "list"], ["todo", "show", "1"], ["stats"], ["todo", "list", "--json"], ["todo", "show", "1", "--json"]):
        result = run_cli(*args, db=db_path)
        assert result.returncode == 0, result.stderr
        assert not RAW_CONTROLS.search(result.stdout + result.stderr), args
    assert len(run_cli("todo", "list", db=db_path).stdout.splitlines()) == 2  # a newline in a name forges no row
    shown = json.loads(run_cli("todo", "show", "1", "--json", db=db_path).stdout)
    assert shown["title"] == HOSTILE_TITLE and shown["payload"] == {"k": "\x9b\u202e\x7f\x1b"}  # JSON keeps the text
    assert "\\x1b]0;owned\\x07" in run_cli("todo", "show", "1", db=db_path).stdout


def test_todo_output_escapes_line_and_paragraph_separators(cli, db_path: Path) -> None:
    todo = as_json(cli, "todo", "create", "--queue", "q", "--title", "t")
    with sqlite3.connect(db_path) as conn:  # as an older version (or a hand edit) could have stored it
        conn.execute("UPDATE todos SET queue = ?, title = ? WHERE id = ?", ("q\u2028forged row", "a\u2029b", todo["id"]))
    for args in (["todo", "list"], ["todo", "show", "1"], ["todo", "list", "--json"], ["todo", "show", "1", "--json"]):
        result = run_cli(*args, db=db_path)
        assert result.returncode == 0, result.stderr
        assert "\u2028" not in result.stdout and "\u2029" not in result.stdout, args
    assert len(run_cli("todo", "list", db=db_path).stdout.splitlines()) == 2  # splitlines() breaks at U+2028 too
    assert json.loads(run_cli("todo", "show", "1", "--json", db=db_path).stdout)["queue"] == "q\u2028forged row"


@pytest.mark.both_backends
def test_claim_with_wait_takes_a_todo_another_process_creates_while_it_waits(cli, db_path: Path) -> None:
    as_json(cli, "todo", "create", "--queue", "other", "--title", "not this one")  # the file exists, q is empty
    env = {**os.environ, "SWITCHBOARD_DB": str(db_path)}
    waiting = subprocess.Popen([sys.executable, "-m", "switchboard_local", "todo", "claim", "--queue", "q", "--wait", "20",
                                "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        # Started with nothing to claim: it must still be waiting, not answering "nothing".
        with pytest.raises(subprocess.TimeoutExpired):
            waiting.wait(timeout=1.5)
        created = run_cli("todo", "create", "--queue", "q", "--title", "late", "--json", db=db_path)
        assert created.returncode == 0, created.stderr
        out, err = waiting.communicate(timeout=30)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    claimed = json.loads(out)
    assert claimed["id"] == json.loads(created.stdout)["id"] and claimed["state"] == "claimed" and claimed["lease_token"]


def test_claim_with_wait_answers_nothing_when_nothing_arrives(cli) -> None:
    as_json(cli, "todo", "create", "--queue", "q", "--title", "t", "--delay", "3600")
    assert as_json(cli, "todo", "claim", "--queue", "q", "--wait", "0.3") is None


def test_claim_on_a_queue_without_any_todo_says_so(cli) -> None:
    as_json(cli, "todo", "create", "--queue", "review", "--title", "t", "--delay", "3600")
    code, out, err, _ = cli("todo", "claim", "--queue", "reveiw", "--queue", "review")
    assert code == 0 and out.strip() == "nothing to claim"
    assert "no todos at all on 'reveiw'" in err and "'review'" not in err  # review has a todo, only not yet visible


def test_claim_by_id_refuses_wait(cli) -> None:
    code, _, err, _ = cli("todo", "claim", "1", "--wait", "5")
    assert code == 2 and "--wait" in err


def test_todo_list_filters_by_when_a_todo_can_be_claimed_and_says_how_long_it_waits(cli) -> None:
    ids = {title: as_json(cli, "todo", "create", "--queue", "q", "--title", title, *extra)["id"]
           for title, extra in (("now", ()), ("later", ("--delay", "7200")), ("retry", ("--max-attempts", "3")),
                                ("dead", ("--max-attempts", "1")))}  # fmt: skip
    for title in ("retry", "dead"):
        claimed = as_json(cli, "todo", "claim", str(ids[title]))
        as_json(cli, "todo", "fail", str(ids[title]), "--token", claimed["lease_token"], "--error", "boom")

    def listed(*flags: str) -> list[str]:
        return [t["title"] for t in as_json(cli, "todo", "list", *flags)]

    assert listed("--ready") == ["now"]
    assert listed("--delayed") == ["retry", "later"]
    assert listed("--dead") == ["dead"]
    assert listed("--state", "pending") == ["retry", "later", "now"]  # a retry waits as pending
    assert listed("--state", "failed") == ["dead"]
    code, out, _, _ = cli("todo", "list")
    lines = {line.split()[-1]: line for line in out.splitlines()[1:]}
    assert "delayed 2h" in lines["later"] and "retry in " in lines["retry"]
    assert " - " in lines["now"] and " - " in lines["dead"]


def make_dead(cli, queue: str, title: str, *extra: str) -> int:
    todo = as_json(cli, "todo", "create", "--queue", queue, "--title", title, "--max-attempts", "1", *extra)
    claimed = as_json(cli, "todo", "claim", str(todo["id"]))
    as_json(cli, "todo", "fail", str(todo["id"]), "--token", claimed["lease_token"], "--error", "bad deploy")
    return todo["id"]


def test_bulk_redrive_sends_a_queues_dead_letters_back_and_nothing_else(cli, db_path: Path) -> None:
    dead = [make_dead(cli, "q", f"dead {i}") for i in range(3)]
    elsewhere = make_dead(cli, "other", "not this queue")
    retrying = as_json(cli, "todo", "create", "--queue", "q", "--title", "retrying", "--max-attempts", "3")["id"]
    claimed = as_json(cli, "todo", "claim", str(retrying))
    as_json(cli, "todo", "fail", str(retrying), "--token", claimed["lease_token"])
    answer = as_json(cli, "todo", "redrive", "--queue", "q", "--dead", "--yes")
    assert answer == {"matched": 3, "redriven": 3, "skipped": 0}
    states = {i: (state, attempt) for i, state, attempt in rows(db_path, "SELECT id, state, attempt FROM todos")}
    assert [states[i] for i in dead] == [("pending", 0)] * 3
    assert states[elsewhere] == ("failed", 1) and states[retrying] == ("pending", 1)  # a dead letter elsewhere; a retry
    assert [t["id"] for t in as_json(cli, "todo", "list", "--dead")] == [elsewhere]


def test_bulk_redrive_dry_run_only_counts(cli) -> None:
    make_dead(cli, "q", "dead")
    assert as_json(cli, "todo", "redrive", "--queue", "q", "--dead", "--dry-run") == {
        "matched": 1, "redriven": 0, "skipped": 0, "dry_run": True}  # fmt: skip
    assert len(as_json(cli, "todo", "list", "--dead")) == 1


def test_bulk_redrive_without_yes_off_a_terminal_is_refused_and_changes_nothing(db_path: Path, cli) -> None:
    make_dead(cli, "q", "dead")
    refused = run_cli("todo", "redrive", "--queue", "q", "--dead", db=db_path, stdin=subprocess.DEVNULL)
    assert refused.returncode == 2 and "1 dead letter on q match; add --yes" in refused.stderr
    assert len(as_json(cli, "todo", "list", "--dead")) == 1


def test_bulk_redrive_filters_by_kind_and_by_when_it_died(cli) -> None:
    make_dead(cli, "q", "build", "--kind", "build")
    make_dead(cli, "q", "deploy", "--kind", "deploy")
    assert as_json(cli, "todo", "redrive", "--queue", "q", "--dead", "--kind", "build", "--yes")["redriven"] == 1
    assert [t["title"] for t in as_json(cli, "todo", "list", "--dead")] == ["deploy"]
    assert as_json(cli, "todo", "redrive", "--queue", "q", "--dead", "--since", "2999-01-01T00:00:00Z",
                   "--dry-run")["matched"] == 0  # fmt: skip
    assert as_json(cli, "todo", "redrive", "--queue", "q", "--dead", "--since", "1h", "--yes")["redriven"] == 1


def test_bulk_redrive_needs_the_queue_and_dead_or_an_id_alone(cli) -> None:
    for args in (("--queue", "q"), ("--dead",), ("1", "--queue", "q", "--dead"), ("--queue", "q", "--dead", "--since", "7")):
        code, _, err, _ = cli("todo", "redrive", *args)
        assert code == 2, (args, err)


def test_purge_deletes_a_queues_finished_todos_of_one_state_and_never_a_live_one(cli, db_path: Path) -> None:
    done = as_json(cli, "todo", "create", "--queue", "q", "--title", "done")
    claimed = as_json(cli, "todo", "claim", str(done["id"]))
    as_json(cli, "todo", "complete", str(done["id"]), "--token", claimed["lease_token"])
    dead = make_dead(cli, "q", "dead")
    live = as_json(cli, "todo", "create", "--queue", "q", "--title", "live")["id"]
    other = as_json(cli, "todo", "create", "--queue", "other", "--title", "elsewhere")["id"]
    assert as_json(cli, "todo", "purge", "--queue", "q", "--state", "done", "--dry-run")["matched"] == 1
    assert as_json(cli, "todo", "purge", "--queue", "q", "--state", "done", "--yes") == {"matched": 1, "purged": 1}
    assert sorted(i for (i,) in rows(db_path, "SELECT id FROM todos")) == sorted([dead, live, other])
    assert rows(db_path, "SELECT count(*) FROM attempts WHERE todo_id = ?", (done["id"],)) == [(0,)]
    assert as_json(cli, "todo", "purge", "--queue", "q", "--state", "failed", "--yes")["purged"] == 1
    assert sorted(i for (i,) in rows(db_path, "SELECT id FROM todos")) == sorted([live, other])
    audited = [json.loads(bytes(b)) for (b,) in rows(db_path, "SELECT body FROM events WHERE type = 'todo.purge'")]
    assert [(a["state"], a["count"]) for a in audited] == [("done", 1), ("failed", 1)]


def test_purge_respects_older_than_and_refuses_without_yes_off_a_terminal(cli, db_path: Path) -> None:
    make_dead(cli, "q", "dead")
    assert as_json(cli, "todo", "purge", "--queue", "q", "--state", "failed", "--older-than", "1", "--yes")["matched"] == 0
    refused = run_cli("todo", "purge", "--queue", "q", "--state", "failed", db=db_path, stdin=subprocess.DEVNULL)
    assert refused.returncode == 2 and "add --yes to delete them" in refused.stderr
    code, _, err, _ = cli("todo", "purge", "--queue", "q", "--state", "pending", "--yes")
    assert code == 2 and "--state" in err
    assert len(as_json(cli, "todo", "list", "--dead")) == 1


def test_cancel_finishes_a_pending_todo_with_the_reason_and_frees_its_key(cli) -> None:
    todo = as_json(cli, "todo", "create", "--queue", "q", "--title", "oops", "--key", "k")
    cancelled = as_json(cli, "todo", "cancel", str(todo["id"]), "--reason", "created by mistake")
    assert (cancelled["state"], cancelled["cancel_reason"], cancelled["visible_at"]) == (
        "cancelled", "created by mistake", None)  # fmt: skip
    assert cancelled["cancelled_by"] == operator()
    assert as_json(cli, "todo", "create", "--queue", "q", "--title", "again", "--key", "k")["created"] is True
    code, out, _, _ = cli("todo", "show", str(todo["id"]))
    assert "state        cancelled" in out and "reason       created by mistake" in out


def test_cancelling_a_done_todo_is_refused_saying_what_it_is(cli) -> None:
    todo = as_json(cli, "todo", "create", "--queue", "q", "--title", "t")
    claimed = as_json(cli, "todo", "claim", str(todo["id"]))
    as_json(cli, "todo", "complete", str(todo["id"]), "--token", claimed["lease_token"])
    code, _, err, _ = cli("todo", "cancel", str(todo["id"]))
    assert code == 1 and f"todo {todo['id']} is done; only pending or claimed todos can be cancelled" in err


def test_the_holder_of_a_cancelled_todo_is_refused_on_complete(cli) -> None:
    as_json(cli, "todo", "create", "--queue", "q", "--title", "t")
    claimed = as_json(cli, "todo", "claim", "--queue", "q", "--owner", "agent-1")
    as_json(cli, "todo", "cancel", str(claimed["id"]), "--reason", "bad deploy")
    code, _, err, _ = cli("todo", "complete", str(claimed["id"]), "--token", claimed["lease_token"])
    assert code == 1 and "was cancelled by " in err and "(bad deploy); stop working on it" in err


def test_bulk_cancel_takes_a_queues_pending_todos_and_nothing_else(cli, db_path: Path) -> None:
    bad = [as_json(cli, "todo", "create", "--queue", "q", "--title", f"bad {i}", "--kind", "deploy")["id"]
           for i in range(3)]  # fmt: skip
    other_kind = as_json(cli, "todo", "create", "--queue", "q", "--title", "build", "--kind", "build")["id"]
    elsewhere = as_json(cli, "todo", "create", "--queue", "other", "--title", "elsewhere", "--kind", "deploy")["id"]
    assert as_json(cli, "todo", "cancel", "--queue", "q", "--state", "pending", "--kind", "deploy", "--dry-run") == {
        "matched": 3, "cancelled": 0, "dry_run": True}  # fmt: skip
    answer = as_json(cli, "todo", "cancel", "--queue", "q", "--state", "pending", "--kind", "deploy", "--since", "1h",
                     "--reason", "bad deploy", "--yes")  # fmt: skip
    assert answer == {"matched": 3, "cancelled": 3}
    states = dict(rows(db_path, "SELECT id, state FROM todos"))
    assert [states[i] for i in bad] == ["cancelled"] * 3
    assert (states[other_kind], states[elsewhere]) == ("pending", "pending")
    audited = [json.loads(bytes(b)) for (b,) in rows(db_path, "SELECT body FROM events WHERE type = 'todo.cancel'")]
    assert [(a["subject"], a["ids"], a["reason"]) for a in audited] == [("q", bad, "bad deploy")]


def test_bulk_cancel_without_yes_off_a_terminal_is_refused_and_changes_nothing(db_path: Path, cli) -> None:
    as_json(cli, "todo", "create", "--queue", "q", "--title", "t")
    refused = run_cli("todo", "cancel", "--queue", "q", "--state", "pending", db=db_path, stdin=subprocess.DEVNULL)
    assert refused.returncode == 2 and "1 pending todo on q match; add --yes to cancel them" in refused.stderr
    assert [t["state"] for t in as_json(cli, "todo", "list")] == ["pending"]


def test_cancel_needs_an_id_or_the_queue_and_state(cli) -> None:
    for args in ((), ("--queue", "q"), ("--state", "pending"), ("1", "--queue", "q", "--state", "pending"),
                 ("--queue", "q", "--state", "claimed", "--yes")):  # fmt: skip
        code, _, err, _ = cli("todo", "cancel", *args)
        assert code == 2, (args, err)


def test_purge_deletes_cancelled_todos(cli, db_path: Path) -> None:
    todo = as_json(cli, "todo", "create", "--queue", "q", "--title", "t")
    as_json(cli, "todo", "cancel", str(todo["id"]))
    assert as_json(cli, "todo", "purge", "--queue", "q", "--state", "cancelled", "--yes") == {"matched": 1, "purged": 1}
    assert count(db_path, "todos") == 0


def test_release_force_takes_a_todo_back_from_a_holder_without_its_token(cli) -> None:
    as_json(cli, "todo", "create", "--queue", "q", "--title", "t")
    lost = as_json(cli, "todo", "claim", "--queue", "q", "--owner", "crashed-agent")
    released = as_json(cli, "todo", "release", str(lost["id"]), "--force")
    assert (released["state"], released["attempt"], released["owner"]) == ("pending", 0, None)
    code, _, err, _ = cli("todo", "heartbeat", str(lost["id"]), "--token", lost["lease_token"])
    assert code == 1 and "was released by an operator; the lease token is void" in err
    shown = as_json(cli, "todo", "show", str(lost["id"]))
    assert [(a["owner"], a["outcome"]) for a in shown["attempts"]] == [("crashed-agent", "released_by_operator")]


def test_release_needs_the_token_or_force_alone(cli) -> None:
    todo = as_json(cli, "todo", "create", "--queue", "q", "--title", "t")
    for args in ((), ("--force", "--token", "x"), ("--force", "--delay", "5")):
        code, _, err, _ = cli("todo", "release", str(todo["id"]), *args)
        assert code == 2, (args, err)


def test_a_todo_created_from_the_command_line_comes_from_an_operator_event(cli) -> None:
    todo = as_json(cli, "todo", "create", "--queue", "q", "--title", "by hand")
    event = as_json(cli, "events", "show", str(todo["event_id"]))
    assert (event["source"], event["type"]) == ("operator", "todo.create")
    assert [t["id"] for t in event["todos"]] == [todo["id"]]


def test_stats_shows_ready_delayed_dead_and_cancelled_per_queue(cli) -> None:
    as_json(cli, "todo", "create", "--queue", "q", "--title", "now")
    as_json(cli, "todo", "create", "--queue", "q", "--title", "later", "--delay", "600")
    as_json(cli, "todo", "cancel", str(as_json(cli, "todo", "create", "--queue", "q", "--title", "x")["id"]))
    make_dead(cli, "q", "dead")
    code, out, _, _ = cli("stats")
    header, row = out.splitlines()
    assert header.split() == ["QUEUE", "READY", "DELAYED", "BLOCKED", "CLAIMED", "DONE", "DEAD", "CANCELLED", "OLDEST",
                              "READY", "PAUSED", "LIMIT"]  # fmt: skip
    assert row.split()[:8] == ["q", "1", "1", "0", "0", "0", "1", "1"]
