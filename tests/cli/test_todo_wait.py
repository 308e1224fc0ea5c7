"""`todo wait`: returns when every todo named is finished, woken by another process's commit;
exit 0 when all are done, 1 when any is a dead letter or cancelled, 6 when --timeout runs out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from switchboard_local.cli.common import EXIT_TIMED_OUT

from support.cli import as_json, run_cli


def created(cli, title: str, *options: str) -> int:
    return as_json(cli, "todo", "create", "--queue", "q", "--title", title, *options)["id"]


def claimed(cli, todo_id: int) -> str:
    return as_json(cli, "todo", "claim", str(todo_id))["lease_token"]


@pytest.mark.both_backends
def test_wait_exits_0_with_every_todo_and_its_result_once_all_are_done(cli) -> None:
    first, second = created(cli, "first"), created(cli, "second")
    for todo_id, result in ((first, '{"n": 1}'), (second, '"two"')):
        assert cli("todo", "complete", str(todo_id), "--token", claimed(cli, todo_id), "--result", result).code == 0
    answer = as_json(cli, "todo", "wait", str(second), str(first))
    assert answer["finished"] is True
    ends = [(t["id"], t["state"], t["result"]) for t in answer["todos"]]
    assert ends == [(second, "done", "two"), (first, "done", {"n": 1})]
    text = cli("todo", "wait", str(first), str(second))
    lines = [f'todo {first} done: first -> {{"n": 1}}', f'todo {second} done: second -> "two"']
    assert (text.code, text.out.splitlines()) == (0, lines)


@pytest.mark.both_backends
def test_wait_returns_when_another_process_completes_the_last_todo(cli, db_path: Path) -> None:
    done, waited = created(cli, "done already"), created(cli, "waited on")
    assert cli("todo", "complete", str(done), "--token", claimed(cli, done)).code == 0
    token = claimed(cli, waited)
    env = {**os.environ, "SWITCHBOARD_DB": str(db_path)}
    command = [sys.executable, "-m", "switchboard_local", "todo", "wait", str(done), str(waited), "--json"]
    waiting = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # One of its todos is still claimed: it must still be waiting.
        with pytest.raises(subprocess.TimeoutExpired):
            waiting.wait(timeout=1.5)
        finished = run_cli("todo", "complete", str(waited), "--token", token, "--result", "42", db=db_path)
        assert finished.returncode == 0, finished.stderr
        out, err = waiting.communicate(timeout=30)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    ends = [(t["id"], t["state"], t["result"]) for t in json.loads(out)["todos"]]
    assert ends == [(done, "done", None), (waited, "done", 42)]


@pytest.mark.both_backends
def test_wait_exits_1_naming_each_dead_letter_and_cancelled_todo(cli) -> None:
    done, dead, cancelled = created(cli, "done"), created(cli, "dead", "--max-attempts", "1"), created(cli, "cancelled")
    assert cli("todo", "complete", str(done), "--token", claimed(cli, done)).code == 0
    assert cli("todo", "fail", str(dead), "--token", claimed(cli, dead), "--error", "boom").code == 0
    assert cli("todo", "cancel", str(cancelled), "--reason", "not needed").code == 0
    code, out, err, _ = cli("todo", "wait", str(done), str(dead), str(cancelled), "--json")
    assert code == 1
    assert [t["state"] for t in json.loads(out)["todos"]] == ["done", "failed", "cancelled"]
    assert f"todo {dead} is a dead letter (boom)" in err and f"todo {cancelled} was cancelled by " in err
    assert "(not needed)" in err and f"todo {done} " not in err


def test_wait_exits_6_when_the_timeout_runs_out_naming_what_is_not_finished(cli) -> None:
    done, pending, claimed_one = created(cli, "done"), created(cli, "pending"), created(cli, "claimed")
    assert cli("todo", "complete", str(done), "--token", claimed(cli, done)).code == 0
    claimed(cli, claimed_one)
    code, out, err, _ = cli("todo", "wait", str(done), str(pending), str(claimed_one), "--timeout", "0.2", "--json")
    assert (code, EXIT_TIMED_OUT) == (6, 6)
    assert json.loads(out)["finished"] is False
    assert f"timed out after 0.2 s: todo {pending} is pending, todo {claimed_one} is claimed" in err


def test_a_timeout_of_0_looks_once(cli) -> None:
    todo_id = created(cli, "pending")
    assert cli("todo", "wait", str(todo_id), "--timeout", "0").code == EXIT_TIMED_OUT


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["99"], 1, "not_found: todo 99 does not exist"),
        (["0"], 2, "ID..."),
        ([], 2, "missing argument 'ID...'"),
        (["1", "--timeout", "-1"], 2, "--timeout"),
        ([str(n) for n in range(1, 102)], 2, "at most 100 todos in one wait, got 101"),
    ],
)
def test_wait_refuses_what_it_cannot_wait_for_saying_why(cli, args, code, message) -> None:
    created(cli, "one")
    result = cli("todo", "wait", *args)
    assert (result.code, message in result.err) == (code, True), result.err
