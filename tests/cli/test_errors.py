"""Every CLI error in one format: `switchboard-local: CODE: sentence` on stderr, JSON on stdout with --json.

Here: the format itself, whatever the command; what one command refuses and
why is tested with that command (test_todo_commands.py, test_source_commands.py).

Usage errors found by click (a bad value, a missing option, an unknown
command) are no exception: one line, exit 2, never click's `Usage: … Error:`
block; and no error line carries a raw control character from the input.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.cli import ctrl_c_reaches_it, run_cli
from support.sql import count

ERROR_LINE = re.compile(r"^switchboard-local: [a-z_]+: \S.*$")
RAW_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


USAGE_ERRORS = {
    "bad JSON": (["todo", "create", "--queue", "q", "--title", "t", "--payload", "{bad"], "--payload: not valid JSON"),
    "missing --token": (["todo", "complete", "1"], "missing option '--token'"),
    "--state bogus": (["todo", "list", "--state", "bogus"], "--state: 'bogus' is not one of"),
    "negative --lease": (["todo", "claim", "--lease", "-5"], "--lease: -5.0 is not in the range"),
    "missing argument": (["todo", "show"], "missing argument 'ID'"),
    "unknown command": (["todo", "bogus"], "no such command 'bogus'"),
    "unknown option": (["--bogus", "stats"], "no such option '--bogus'"),
    # int() and float() read other scripts' digits ('٣' is 3), nan and inf: a number is ASCII digits.
    "--limit in other digits": (["todo", "list", "--limit", "٣"],
                                "--limit: '٣' is not a whole number in ASCII digits"),
    "--priority in other digits": (["todo", "create", "--queue", "q", "--title", "t", "--priority", "١"],
                                   "--priority: '١' is not a whole number in ASCII digits"),
    "--lease nan": (["todo", "claim", "--lease", "nan"], "--lease: 'nan' is not a number in ASCII digits"),
}


@pytest.mark.parametrize("case", USAGE_ERRORS)
def test_a_usage_error_is_one_invalid_argument_line_and_exit_2(db_path: Path, case: str) -> None:
    args, sentence = USAGE_ERRORS[case]
    result = run_cli(*args, db=db_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"switchboard-local: invalid_argument: {sentence}")
    assert len(result.stderr.splitlines()) == 1 and ERROR_LINE.match(result.stderr.strip())
    assert "Usage:" not in result.stderr + result.stdout and result.stdout == ""


@pytest.mark.parametrize("seconds", ["١", "٠.٥", "nan"])  # float() reads the first two as 1 and 0.5
def test_a_busy_timeout_not_in_ascii_digits_is_refused_naming_its_variable(db_path: Path, seconds: str) -> None:
    result = run_cli("todo", "list", db=db_path, env={"SWITCHBOARD_BUSY_TIMEOUT": seconds})
    assert result.returncode == 2
    assert result.stderr.startswith("switchboard-local: invalid_argument: $SWITCHBOARD_BUSY_TIMEOUT must be a number")


@pytest.mark.parametrize("case", USAGE_ERRORS)
def test_a_usage_error_with_json_also_puts_the_error_object_on_stdout(db_path: Path, case: str) -> None:
    args, sentence = USAGE_ERRORS[case]
    result = run_cli(*args, "--json", db=db_path)
    assert result.returncode == 2
    error = json.loads(result.stdout)["error"]
    assert set(error) == {"code", "message"} and error["code"] == "invalid_argument"
    assert error["message"].startswith(sentence)
    assert ERROR_LINE.match(result.stderr.strip()) and len(result.stderr.splitlines()) == 1


def test_a_usage_error_points_to_the_commands_help(db_path: Path) -> None:
    result = run_cli("todo", "complete", "1", db=db_path)
    assert "see 'switchboard-local todo complete --help'" in result.stderr


def test_a_refusal_raised_by_a_command_has_the_same_format(db_path: Path) -> None:
    result = run_cli("todo", "claim", "1", "--queue", "q", db=db_path)
    assert result.returncode == 2
    assert result.stderr.startswith("switchboard-local: invalid_argument: give an ID or --queue, not both")


@pytest.mark.parametrize(
    ("args", "shown"),
    [(["--help"], "Usage: switchboard-local"), (["todo", "claim", "--help"], "Claim a todo by ID"),
     (["--version"], "switchboard-local, version")],
)  # fmt: skip
def test_help_and_version_still_exit_0_on_stdout(db_path: Path, args: list[str], shown: str) -> None:
    result = run_cli(*args, db=db_path)
    assert result.returncode == 0 and shown in result.stdout and result.stderr == ""


def test_a_group_without_its_command_shows_its_help_and_exits_2(db_path: Path) -> None:
    result = run_cli("todo", db=db_path)
    assert result.returncode == 2
    assert "Commands:" in result.stdout and "claim" in result.stdout
    assert result.stderr.startswith("switchboard-local: invalid_argument: missing command")


def test_an_error_quoting_the_input_escapes_its_control_characters(db_path: Path) -> None:
    hostile = "@/nowhere/\x1b]0;owned\x07\x9b31m\u202e"
    for extra in ([], ["--json"]):
        result = run_cli("todo", "create", "--queue", "q", "--title", "t", "--payload", hostile, *extra, db=db_path)
        assert result.returncode == 2
        assert not RAW_CONTROLS.search(result.stderr + result.stdout)
        assert "\\x1b]0;owned\\x07\\x9b31m\\u202e" in result.stderr
        if extra:
            assert json.loads(result.stdout)["error"]["message"].endswith("No such file or directory")


@pytest.mark.parametrize(
    ("args", "sentence"),
    [(["source", "add", "gh"], ("missing option '--kind'. Choose from: github, gitea, stripe, slack, standard, gitlab, "
                                "hmac, token, open, schedule")),
     (["adapter", "add", "orders"], "missing option '--mode'. Choose from: stream, list, pubsub")],
)  # fmt: skip
def test_a_missing_choice_lists_its_choices_readably_on_one_line(db_path: Path, args: list[str], sentence: str) -> None:
    for extra in ([], ["--json"]):
        result = run_cli(*args, *extra, db=db_path)
        assert result.returncode == 2
        assert result.stderr.startswith(f"switchboard-local: invalid_argument: {sentence} (see ")
        assert "\\x0a" not in result.stderr and "\\x09" not in result.stderr
        assert len(result.stderr.splitlines()) == 1
        if extra:
            assert json.loads(result.stdout)["error"]["message"] == sentence


def test_a_usage_error_quoting_a_typed_argument_still_escapes_its_control_characters(db_path: Path) -> None:
    result = run_cli("source", "add", "gh", "--kind", "github", "--secret", "s", "extra\x1b[31m\nforged", db=db_path)
    assert result.returncode == 2
    assert not RAW_CONTROLS.search(result.stderr) and len(result.stderr.splitlines()) == 1
    assert "got unexpected extra argument (extra\\x1b[31m\\x0aforged)" in result.stderr


def _wait_until_reading_a_pipe(pid: int) -> None:
    """Until the process sleeps in a pipe read (its stdin): then Ctrl-C lands in the command, not in startup."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if "pipe" in Path(f"/proc/{pid}/wchan").read_text():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("the command never read its stdin")


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux /proc to see the process wait")
def test_ctrl_c_exits_130_without_a_traceback(db_path: Path) -> None:
    env = {**os.environ, "SWITCHBOARD_DB": str(db_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "switchboard_local", "todo", "create", "--queue", "q", "--title", "t", "--payload", "@-"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=ctrl_c_reaches_it,  # noqa: PLW1509 (a signal disposition, before exec)
    )  # fmt: skip
    try:
        _wait_until_reading_a_pipe(proc.pid)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert out == "" and err.strip() == ""


def test_usage_errors_answer_in_json_when_json_was_asked_for(cli, db_path: Path) -> None:
    code, out, err, _ = cli("todo", "create", "--queue", "q", "--title", "t", "--priority", "high", "--json")
    assert code == 2 and "--priority" in err
    error = json.loads(out)["error"]
    assert error["code"] == "invalid_argument" and "--priority" in error["message"]
    assert count(db_path, "todos") == 0


@pytest.mark.parametrize(
    "args",
    [
        ("source", "add", "gh\n", "--kind", "github", "--secret", "s"),
        ("agent", "add", "reviewer\n", "--queue", "review"),
        ("adapter", "add", "orders", "--redis-url-env", "REDIS_URL\n", "--mode", "stream", "--key", "k"),
    ],
    ids=["source", "agent", "adapter-env"],
)
def test_a_name_ending_in_a_newline_is_refused_and_nothing_is_written(cli, db_path, args) -> None:
    # A pattern's `$` matches before a final newline: the whole text must match.
    result = cli(*args)
    assert result.code == 2, result.out + result.err
    assert "invalid_argument" in result.err
    assert count(db_path, "sources") + count(db_path, "agents") + count(db_path, "rules") == 0
