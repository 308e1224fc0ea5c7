"""Lines the MCP transport cannot read: each gets a JSON-RPC answer, or a line on stderr.

Real `switchboard-local mcp` children, spoken to in raw lines on pipes (and,
for the SDK-stream path, from a regular file). Waits are bounded and only run
out when an answer is missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.mcp import INITIALIZE, INITIALIZED, RawServer, child_env

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
OVER_16_MIB = (16 << 20) + 1024


def request(request_id: object, method: str, params: dict | None = None, *, id_last: bool = False) -> dict:
    """A JSON-RPC request with its id first (as the Python SDK writes it) or last (as the TypeScript SDK does)."""
    body: dict = {"method": method} if params is None else {"method": method, "params": params}
    return {**body, "jsonrpc": "2.0", "id": request_id} if id_last else {"jsonrpc": "2.0", "id": request_id, **body}


def tool_call(request_id: object, tool: str, *, id_last: bool = False, **arguments: object) -> dict:
    return request(request_id, "tools/call", {"name": tool, "arguments": arguments}, id_last=id_last)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def with_raw(message: dict, marker: str, raw: str) -> str:
    """``message`` as a JSON line with the string ``marker`` replaced by raw JSON text."""
    return json.dumps(message).replace(json.dumps(marker), raw)


@pytest.fixture
def server(db_path) -> Iterator[RawServer]:
    running = RawServer(db_path)
    try:
        running.initialize()
        yield running
    finally:
        running.kill()
    torn = [a for a in running.answers if "not a JSON line" in a]
    assert not torn, f"stdout carried lines that are not JSON: {torn}"


def error_of(answer: dict) -> tuple[int, str]:
    assert "result" not in answer, answer
    return answer["error"]["code"], answer["error"]["message"]


def the_null_answer(server: RawServer) -> dict:
    server.wait_for(lambda: server.answers_to(None))
    (answer,) = server.answers_to(None)
    return answer


def todos_in(server: RawServer, request_id: int) -> list:
    server.send(tool_call(request_id, "list_todos"))
    return server.answer(request_id)["result"]["structuredContent"]["todos"]


def test_a_line_that_is_not_json_is_answered_with_a_parse_error_and_id_null(server) -> None:
    server.send('{"jsonrpc": "2.0", "id": 2, "method": "ping"')  # cut short: no id can be trusted
    code, message = error_of(the_null_answer(server))
    assert code == PARSE_ERROR and message.startswith("Parse error: the line is not JSON")
    assert server.answers_to(2) == []


def test_a_lone_surrogate_in_tool_arguments_is_answered_invalid_params_with_the_request_id(server) -> None:
    server.send(tool_call(5, "create_for", queue="q", title="x\ud800"))  # json.dumps writes it as \ud800
    code, message = error_of(server.answer(5))
    assert code == INVALID_PARAMS
    assert message == "Invalid params: arguments.title holds a lone surrogate (\\ud800), which is not Unicode text"
    assert todos_in(server, 6) == []  # nothing was created


@pytest.mark.parametrize(
    ("depth", "id_last"),
    [(10_000, False), (10_000, True), (300, False)],
    ids=["10000-id-first", "10000-id-last", "300"],
)
def test_deep_nesting_is_answered_invalid_request_with_the_request_id(server, depth, id_last) -> None:
    server.send(with_raw(tool_call(7, "create_for", id_last=id_last, title="t", payload="DEEP"), "DEEP", nested(depth)))
    code, message = error_of(server.answer(7))
    assert code == INVALID_REQUEST and message.startswith("Invalid Request: the message nests deeper than 200 levels")
    assert todos_in(server, 8) == []


def test_an_integer_of_5000_digits_is_answered_invalid_params_with_the_request_id(server) -> None:
    server.send(json.dumps(tool_call(9, "get_todo", id=0)).replace('{"id": 0}', '{"id": ' + "7" * 5000 + "}"))
    code, message = error_of(server.answer(9))
    assert code == INVALID_PARAMS and message == "Invalid params: arguments.id is an integer of more than 4300 digits"


@pytest.mark.parametrize("line", ["[1, 2]", "42", "null"])
def test_json_that_is_not_an_object_is_answered_invalid_request_with_id_null(server, line) -> None:
    server.send(line)
    code, message = error_of(the_null_answer(server))
    assert code == INVALID_REQUEST and message.startswith("Invalid Request: the message is ")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ({"jsonrpc": "2.0", "id": 10, "method": 5}, '"method" must be a string'),
        ({"jsonrpc": "1.0", "id": 10, "method": "ping"}, '"jsonrpc" must be "2.0"'),
        ({"jsonrpc": "2.0", "id": 10}, '"method" must be a string'),
    ],
)
def test_an_invalid_request_object_is_answered_invalid_request_with_its_id(server, line, says) -> None:
    server.send(line)
    assert error_of(server.answer(10)) == (INVALID_REQUEST, f"Invalid Request: {says}")


def test_invalid_params_that_are_not_an_object_are_answered_invalid_params_with_its_id(server) -> None:
    server.send(request(11, "tools/call", None) | {"params": [1, 2]})
    assert error_of(server.answer(11)) == (INVALID_PARAMS, 'Invalid params: "params" must be an object')


@pytest.mark.parametrize("bad_id", [1.5, None, {"n": 1}])
def test_a_request_whose_id_is_not_a_string_or_integer_is_answered_with_id_null_and_not_run(server, bad_id) -> None:
    # The transport reads these as notifications (ignoring the id): the call would vanish unanswered.
    server.send(tool_call(bad_id, "create_for", queue="q", title="must not be created"))
    code, message = error_of(the_null_answer(server))
    assert (code, message) == (INVALID_REQUEST, "Invalid Request: the id must be a string or an integer")
    assert todos_in(server, 12) == []


def test_a_malformed_notification_gets_one_escaped_line_on_stderr_and_no_answer(server) -> None:
    method = "notifications/message\x1b[2J\u202e"
    server.send({"jsonrpc": "2.0", "method": method, "params": {"data": "A" * 100_000 + "\ud800"}})
    server.send(request(13, "ping"))
    server.answer(13)
    assert server.close() == 0
    assert [a["id"] for a in server.answers] == [1, 13]  # initialize, ping: nothing for the notification
    (logged,) = [line for line in server.stderr if "malformed notification" in line]
    assert "'notifications/message\\x1b[2J\\u202e'" in logged and "data holds a lone surrogate (\\ud800)" in logged
    assert "AAAA" not in logged and len(logged) < 300


def test_a_request_after_a_bad_line_is_still_answered(server) -> None:
    server.send(b"\xff\xfe not even UTF-8 {{{")
    server.send(tool_call(14, "queue_stats"))
    assert server.answer(14)["result"]["structuredContent"] == {"queues": []}
    assert error_of(the_null_answer(server))[0] == PARSE_ERROR


@pytest.mark.parametrize("id_last", [False, True], ids=["id-first", "id-last"])
def test_a_line_over_16_mib_is_answered_with_its_id_and_skipped(server, id_last) -> None:
    line = tool_call(15, "create_for", id_last=id_last, queue="q", title="t", payload="A" * OVER_16_MIB)
    server.send(line)
    code, message = error_of(server.answer(15))
    assert code == INVALID_REQUEST and message.endswith("bytes, over the limit of 16 MiB")
    assert todos_in(server, 16) == []  # skipped whole: nothing created, and the next line read as a line


def test_every_kind_of_bad_line_gets_its_answer_or_log_line_and_the_server_exits_cleanly(server) -> None:
    for line in ANSWERED_WITH_ID_NULL + IGNORED + [DEEP_WITH_ID_18]:
        server.send(line)
    server.send(request(19, "ping"))
    server.answer(19)
    assert error_of(server.answer(18))[0] == INVALID_REQUEST
    server.wait_for(lambda: len(server.answers_to(None)) == len(ANSWERED_WITH_ID_NULL))
    assert server.proc.poll() is None
    assert server.close() == 0
    assert len(server.answers) == 1 + len(ANSWERED_WITH_ID_NULL) + 2  # initialize, the nulls, 18 and 19
    assert len([line for line in server.stderr if "ignored a malformed" in line]) == len(IGNORED)
    assert "Traceback" not in "\n".join(server.stderr)


ANSWERED_WITH_ID_NULL: list[str | bytes | dict] = [
    "not json",
    b"\xc3\x28\xa0\xa1",
    "",
    "{}",
    "[]",
    "[" * 100_000,
    nested(10_000),
    "1e999999",
    "9" * 10_000,
    {"jsonrpc": "2.0", "id": "\ud800", "method": "ping"},
    {"jsonrpc": "2.0", "id": 3.25, "method": "ping"},
]
IGNORED: list[str | bytes | dict] = [
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "\udfff"}},
    {"jsonrpc": "2.0", "result": "\ud800", "id": 99},
]
DEEP_WITH_ID_18 = with_raw(request(18, "ping", {"x": "DEEP"}), "DEEP", nested(5_000))


def test_a_burst_of_good_and_bad_lines_gets_one_whole_answer_line_for_each_request(server) -> None:
    """Answers to bad lines share stdout with the SDK's: no line torn, none lost, none twice."""
    rounds = 60

    def write() -> None:
        for n in range(rounds):
            server.send("oops")
            server.send(tool_call(f"bad-{n}", "list_todos", queue="\ud800"))
            server.send(tool_call(f"good-{n}", "list_todos"))

    writer = threading.Thread(target=write)
    writer.start()
    writer.join(timeout=120)
    for n in range(rounds):
        server.answer(f"good-{n}")
        server.answer(f"bad-{n}")
    server.wait_for(lambda: len(server.answers_to(None)) >= rounds)
    assert server.close() == 0
    ids = [a["id"] for a in server.answers]
    assert sorted(i for i in ids if isinstance(i, str)) == sorted(
        [f"good-{n}" for n in range(rounds)] + [f"bad-{n}" for n in range(rounds)]
    )
    assert ids.count(None) == rounds


def test_a_server_reading_a_file_answers_its_bad_lines_too(db_path, tmp_path: Path) -> None:
    """stdin a regular file: the SDK's own streams, the same answers."""
    lines = [
        json.dumps(INITIALIZE),
        json.dumps(INITIALIZED),
        "not json",
        json.dumps(tool_call(5, "create_for", queue="q", title="x\ud800")),
        with_raw(tool_call(6, "create_for", title="t", payload="DEEP"), "DEEP", nested(10_000)),
        json.dumps(tool_call(7, "create_for", id_last=True, title="t", payload="A" * OVER_16_MIB)),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/x", "params": 5}),
        json.dumps(tool_call(8, "list_todos")),
    ]
    requests = tmp_path / "requests.jsonl"
    requests.write_text("\n".join(lines) + "\n")
    with requests.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "switchboard_local", "mcp"], stdin=stdin,
            capture_output=True, timeout=120, env=child_env(db_path), check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answers = {a["id"]: a for a in map(json.loads, done.stdout.splitlines())}
    assert sorted(answers, key=str) == [1, 5, 6, 7, 8, None]
    assert error_of(answers[None])[0] == PARSE_ERROR
    assert error_of(answers[5])[0] == INVALID_PARAMS
    assert error_of(answers[6])[0] == INVALID_REQUEST and error_of(answers[7])[0] == INVALID_REQUEST
    assert answers[8]["result"]["structuredContent"]["todos"] == []
    assert b"malformed notification 'notifications/x'" in done.stderr and b"Traceback" not in done.stderr
