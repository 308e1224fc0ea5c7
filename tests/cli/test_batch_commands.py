"""The batch verbs on the command line: `todo claim --max N`, and `todo complete`
/ `todo fail --batch @FILE|@-` with JSON lines; a report per item, exit 1 when
any item was refused, 2 (naming the line) when the input is malformed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import REPO_ROOT, as_json
from support.sql import rows


def make(cli, n: int, queue: str = "q") -> list[int]:
    return [as_json(cli, "todo", "create", "--queue", queue, "--title", f"t{i}")["id"] for i in range(n)]


def lines(*items: dict) -> str:
    return "".join(json.dumps(item) + "\n" for item in items)


def test_claim_with_max_answers_a_list_of_todos_each_with_its_own_token(cli) -> None:
    made = make(cli, 4)
    claimed = as_json(cli, "todo", "claim", "--max", "3", "--owner", "alice")
    assert isinstance(claimed, list) and [t["id"] for t in claimed] == made[:3]
    assert all(t["state"] == "claimed" and t["owner"] == "alice" for t in claimed)
    assert len({t["lease_token"] for t in claimed}) == 3
    assert [t["id"] for t in as_json(cli, "todo", "claim", "--max", "3")] == made[3:]
    assert as_json(cli, "todo", "claim", "--max", "3") == []  # nothing claimable: an empty list, exit 0


def test_claim_with_max_prints_each_todo_for_people(cli) -> None:
    make(cli, 2)
    result = cli("todo", "claim", "--max", "5")
    assert result.code == 0
    assert result.out.count("claimed todo") == 2 and result.out.count("lease token:") == 2
    result = cli("todo", "claim", "--max", "5", "--queue", "nosuch")
    assert (result.code, result.out.strip()) == (0, "nothing to claim")
    assert "no todos at all on 'nosuch'" in result.err


@pytest.mark.parametrize("args", [["--max", "0"], ["--max", "101"], ["--max", "many"], ["1", "--max", "2"]],
                         ids=["zero", "over 100", "not a number", "with an id"])  # fmt: skip
def test_claim_max_out_of_range_or_with_an_id_is_a_usage_error(cli, args) -> None:
    make(cli, 1)
    result = cli("todo", "claim", *args)
    assert result.code == 2
    assert "--max" in result.err
    assert as_json(cli, "todo", "show", "1")["state"] == "pending"


def test_complete_batch_from_stdin_reports_each_item(cli) -> None:
    make(cli, 3)
    claimed = as_json(cli, "todo", "claim", "--max", "3")
    feed = lines(*({"id": t["id"], "token": t["lease_token"], "result": {"n": t["id"]}} for t in claimed))
    report = as_json(cli, "todo", "complete", "--batch", "@-", input=feed)
    assert [(r["id"], r["ok"], r["todo"]["state"], r["todo"]["result"]) for r in report] == [
        (t["id"], True, "done", {"n": t["id"]}) for t in claimed
    ]


def test_a_refused_item_is_reported_and_the_batch_exits_1_with_the_rest_done(cli, tmp_path: Path) -> None:
    make(cli, 3)
    claimed = as_json(cli, "todo", "claim", "--max", "3")
    items = [{"id": t["id"], "token": t["lease_token"]} for t in claimed]
    items[1]["token"] = "stale"
    items.append({"id": 999, "token": "x"})
    batch = tmp_path / "batch.jsonl"
    batch.write_text(lines(*items))
    result = cli("todo", "complete", "--batch", f"@{batch}", "--json")
    assert result.code == 1
    report = json.loads(result.out)
    assert [r["ok"] for r in report] == [True, False, True, False]
    assert report[1]["error"]["code"] == "conflict" and "does not match" in report[1]["error"]["message"]
    assert report[3] == {"id": 999, "ok": False, "error": {"code": "not_found", "message": "todo 999 does not exist"}}
    assert result.err.count("switchboard-local: todo") == 2  # one line per refusal on stderr
    states = [as_json(cli, "todo", "show", str(t["id"]))["state"] for t in claimed]
    assert states == ["done", "claimed", "done"]


def test_a_batch_report_for_people_says_each_item_and_the_count(cli) -> None:
    make(cli, 2)
    claimed = as_json(cli, "todo", "claim", "--max", "2")
    feed = lines({"id": claimed[0]["id"], "token": claimed[0]["lease_token"]}, {"id": claimed[1]["id"], "token": "no"})
    result = cli("todo", "complete", "--batch", "@-", input=feed)
    assert result.code == 1
    assert f"todo {claimed[0]['id']} done" in result.out
    assert f"todo {claimed[1]['id']} refused: conflict:" in result.out
    assert "1 of 2 done, 1 refused" in result.out


def test_fail_batch_fails_each_item_with_its_error(cli, db_path: Path) -> None:
    make(cli, 2)
    claimed = as_json(cli, "todo", "claim", "--max", "2")
    feed = lines(*({"id": t["id"], "token": t["lease_token"], "error": f"broke {t['id']}"} for t in claimed))
    report = as_json(cli, "todo", "fail", "--batch", "@-", input=feed)
    assert [(r["todo"]["state"], r["todo"]["last_error"]) for r in report] == [
        ("pending", f"broke {t['id']}") for t in claimed
    ]
    assert [r[0] for r in rows(db_path, "SELECT outcome FROM attempts ORDER BY todo_id")] == ["failed", "failed"]


@pytest.mark.both_backends
def test_complete_batch_with_claim_next_claims_the_next_batch_in_the_same_transaction(cli) -> None:
    make(cli, 5)
    claimed = as_json(cli, "todo", "claim", "--max", "2")
    feed = lines(*({"id": t["id"], "token": t["lease_token"]} for t in claimed))
    answer = as_json(cli, "todo", "complete", "--batch", "@-", "--claim-next", "--max", "10", "--owner", "bob",
                     input=feed)  # fmt: skip
    assert [r["ok"] for r in answer["items"]] == [True, True]
    assert len(answer["next"]) == 3 and all(t["owner"] == "bob" and t["lease_token"] for t in answer["next"])
    answer = as_json(cli, "todo", "complete", "--batch", "@-", "--claim-next",
                     input=lines(*({"id": t["id"], "token": t["lease_token"]} for t in answer["next"])))  # fmt: skip
    assert answer["next"] == []


@pytest.mark.parametrize(
    ("feed", "message"),
    [
        ('{"id": 1, "token": "t"}\n{"id": 2, "token": \n', "stdin line 2: not valid JSON"),
        ('\n\n[1, 2]\n', "stdin line 3: each line must be a JSON object"),
        ('{"id": "1", "token": "t"}\n', "stdin line 1: id must be a todo id"),
        ('{"id": 0, "token": "t"}\n', "stdin line 1: id must be a todo id"),
        ('{"id": true, "token": "t"}\n', "stdin line 1: id must be a todo id"),
        ('{"id": 1}\n', "stdin line 1: token must be the lease token"),
        ('{"id": 1, "token": ""}\n', "stdin line 1: token must be the lease token"),
        ('{"id": 1, "token": "t", "error": "x"}\n', "stdin line 1: unknown field 'error'"),
        ('{"id": 1, "token": "t", "result": NaN}\n', "stdin line 1: result"),
        ("\n \n", "stdin holds no items"),
        ('{"id": 1, "token": "t"}\n' * 101, "more than 100 items"),
    ],
    ids=["bad json", "not an object", "id a string", "id zero", "id a bool", "no token", "empty token",
         "the other verb's field", "NaN result", "no items", "over 100"],  # fmt: skip
)
def test_malformed_batch_input_exits_2_naming_the_line_and_changes_nothing(cli, db_path, feed, message) -> None:
    make(cli, 1)
    claimed = as_json(cli, "todo", "claim")
    before = rows(db_path, "SELECT * FROM todos")
    result = cli("todo", "complete", "--batch", "@-", input=feed.replace('"t"', json.dumps(claimed["lease_token"])))
    assert result.code == 2, result.err
    assert result.err.startswith("switchboard-local: invalid_argument: ")
    assert message in result.err
    assert rows(db_path, "SELECT * FROM todos") == before


def test_fail_batch_refuses_an_error_that_is_not_text_naming_the_line(cli) -> None:
    result = cli("todo", "fail", "--batch", "@-", input='{"id": 1, "token": "t", "error": 5}\n')
    assert result.code == 2 and "stdin line 1: error must be a string" in result.err


@pytest.mark.parametrize(
    "args",
    [
        ["complete", "1", "--batch", "@-"],
        ["complete", "--token", "x", "--batch", "@-"],
        ["complete", "--result", "1", "--batch", "@-"],
        ["fail", "--error", "e", "--batch", "@-"],
        ["complete", "--batch", "items.jsonl"],
        ["complete", "--batch", "@-", "--max", "3"],
        ["complete", "1", "--token", "x", "--max", "3"],
        ["complete"],
    ],
    ids=["an id", "a token", "a result", "an error", "no @", "max without claim-next", "max without batch",
         "nothing"],  # fmt: skip
)
def test_batch_options_that_do_not_go_together_are_usage_errors(cli, args) -> None:
    result = cli("todo", *args, input='{"id": 1, "token": "t"}\n')
    assert result.code == 2
    assert result.err.startswith("switchboard-local: invalid_argument: ")


def test_a_batch_from_a_file_that_is_not_there_is_refused(cli, tmp_path) -> None:
    result = cli("todo", "complete", "--batch", f"@{tmp_path / 'missing.jsonl'}")
    assert result.code == 2 and "cannot read" in result.err


@pytest.mark.both_backends
def test_a_real_process_completes_a_batch_piped_on_stdin(db_path: Path, cli) -> None:
    make(cli, 2)
    claimed = as_json(cli, "todo", "claim", "--max", "2")
    feed = lines(*({"id": t["id"], "token": t["lease_token"]} for t in claimed))
    done = subprocess.run([sys.executable, "-m", "switchboard_local", "todo", "complete", "--batch", "@-", "--json"],
                          input=feed, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "SWITCHBOARD_DB": str(db_path)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [r["ok"] for r in json.loads(done.stdout)] == [True, True]
