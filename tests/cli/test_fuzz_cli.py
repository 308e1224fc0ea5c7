"""Fuzzing the command line: argument vectors from the real command tree, run as real processes.

Whatever the arguments, the CLI exits with a documented status (0-4), never
prints a traceback, writes every error as `switchboard-local: CODE: …`, writes
no raw control character to a terminal, ends, and leaves the database intact
and every row in it showable. Budget: tests/support/fuzz.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from switchboard_local.cli.common import JsonValue
from switchboard_local.cli.main import main
from switchboard_local.core import routing
from switchboard_local.core.events import NewEvent
from switchboard_local.core.store.opener import open_store

from support.cli import REPO_ROOT, invoke
from support.fuzz import fuzz_settings

pytestmark = pytest.mark.fuzz

EXIT_STATUSES = {0, 1, 2, 3, 4}
ERROR_LINE = re.compile(r"^switchboard-local: [a-z_]+: \S")
RAW_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
LONG_RUNNING = {"serve", "mcp", "watch", "tail"}  # servers and live views: they run until stopped
# `service` changes this user's real service manager (tests/cli/test_service.py runs it against fakes).
OUTSIDE_THE_DATABASE = {"service"}


def _leaves(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted(group.commands.items()):
        if name in LONG_RUNNING or name in OUTSIDE_THE_DATABASE:
            continue
        if isinstance(command, click.Group):
            yield from _leaves(command, (*path, name))
        else:
            yield (*path, name), command


COMMANDS = list(_leaves(main))


# ---------------------------------------------------------------- the world the commands see


@dataclass(frozen=True)
class World:
    db: Path
    files: tuple[str, ...]  # what @FILE and --secret-file may point at


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("fuzz-cli")
    db = root / "fuzz.db"
    (root / "ok.json").write_text('{"pr": 42, "note": "caf\\u00e9"}')
    (root / "latin1.json").write_bytes(b'{"a": "caf\xe9"}')
    (root / "empty").write_bytes(b"")
    (root / "deep.json").write_text("[" * 80 + "]" * 80)
    (root / "controls.json").write_text(json.dumps({"t": "\x1b]0;x\x07\x9b\u202e"}, ensure_ascii=False))
    (root / "dir").mkdir()
    os.mkfifo(root / "fifo")
    files = tuple(str(root / n) for n in ("ok.json", "latin1.json", "empty", "deep.json", "controls.json", "dir",
                                          "fifo", "missing.json")) + ("/dev/null",)  # fmt: skip
    _seed(db)
    return World(db, files)


def _seed(db: Path) -> None:
    for args in (
        ["source", "add", "gh", "--kind", "github", "--secret", "s"],
        ["adapter", "add", "orders", "--redis-url", "redis://:pw@127.0.0.1:6399/0", "--mode", "stream", "--key", "k"],
        ["agent", "add", "bot", "--queue", "q"],
        ["rule", "add", "--source", "gh", "--queue", "review", "--title", "PR {number}"],
        ["todo", "create", "--queue", "q", "--title", "one", "--payload", '{"a": 1}'],
        ["todo", "create", "--queue", "q", "--title", "two", "--key", "k2"],
    ):
        result = invoke(db, *args)
        assert result.code == 0, result.err
    asyncio.run(_deliver(db))


async def _deliver(db: Path) -> None:
    async with await open_store(db) as store:
        await routing.deliver(store, NewEvent(
            source="gh", family="webhook", type="pull_request", external_id="d-1", trust_mode="github", verified=True,
            body=b'{"number": 7, "note": "\x1b[2J"}', content_type="application/json", headers={"x-note": "\x1b[31m"},
        ))  # fmt: skip


# ---------------------------------------------------------------- values


NUMBERS = st.one_of(
    st.integers(-3, 5).map(str),
    st.sampled_from([2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30]).map(str),
    st.integers().map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e309", "-0", "0x10", "", " 1", "1.5", "1_000", "٣"]),
    st.floats().map(repr),
)
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
UNDECODABLE = st.binary(min_size=1, max_size=6).filter(lambda b: b"\x00" not in b)  # argv bytes, not UTF-8 text
NAMES = st.one_of(
    st.sampled_from(["q", "gh", "orders", "bot", "review", "1", "", " ", "-", "--json", "-h"]),
    st.sampled_from(["\x1b[31m", "\u202e", "\x9b", "a\nb", "é", "\x7f", "x" * 600]),
    TEXT,
    UNDECODABLE,
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def json_arguments(world: World) -> st.SearchStrategy[str | bytes]:
    return st.one_of(
        JSON_VALUES.map(json.dumps),
        st.sampled_from(["{bad", "[", "NaN", '"\\ud800"', "1" * 5000, "", "@", "@-"]),
        st.sampled_from(world.files).map(lambda p: "@" + p),
        TEXT,
    )


def values_for(param: click.Parameter, world: World) -> st.SearchStrategy[str | bytes]:
    kind = param.type
    if isinstance(kind, JsonValue):
        return json_arguments(world)
    if isinstance(kind, click.Choice):
        return st.sampled_from([str(c) for c in kind.choices]) | NAMES
    if isinstance(kind, (click.types.IntParamType, click.types.FloatParamType)):
        return NUMBERS
    if isinstance(kind, click.Path):
        return st.sampled_from(world.files) | NAMES
    if kind.name == "TIME|ID":  # events --since
        return NUMBERS | st.sampled_from(["2026-11-29T12:00:00Z", "9999-12-31T23:59:59", "0001-01-01", "10m", "999999999d"]) | NAMES
    return NAMES


@st.composite
def argument_vectors(draw: st.DrawFn, world: World, *, payloads_only: bool = False) -> list[str | bytes]:
    commands = [c for c in COMMANDS if any(isinstance(p.type, JsonValue) for p in c[1].params)] if payloads_only else COMMANDS
    path, command = draw(st.sampled_from(commands))
    args: list[str | bytes] = list(path)
    for param in command.params:
        if param.name == "db":
            continue  # always the fuzzed database (SWITCHBOARD_DB)
        if isinstance(param, click.Argument):
            if draw(st.integers(0, 9)):
                args.append(draw(values_for(param, world)))
        elif isinstance(param, click.Option) and param.is_flag:
            if draw(st.booleans()):
                args.append(param.opts[0])
        elif isinstance(param, click.Option):
            wanted = payloads_only and isinstance(param.type, JsonValue) or param.required
            times = draw(st.integers(1 if wanted and draw(st.integers(0, 9)) else 0, 2 if param.multiple else 1))
            for _ in range(times):
                args += [param.opts[0], draw(values_for(param, world))]
    if not draw(st.integers(0, 7)):  # now and then something no command expects
        args.insert(draw(st.integers(len(path), len(args))), draw(NAMES | st.sampled_from(["--bogus", "--", "-x"])))
    return args


# ---------------------------------------------------------------- the invariants


def run(world: World, args: list[str | bytes], stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "SWITCHBOARD_DB": str(world.db), "PYTHONPATH": str(REPO_ROOT)}
    try:
        return subprocess.run(
            [sys.executable, "-m", "switchboard_local", *args], input=stdin, capture_output=True, env=env, timeout=60,
            cwd=world.db.parent,  # a relative name drawn for a path (`db copy --to`) lands there, not in the checkout
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the CLI did not end: {args!r}") from None


def check(world: World, args: list[str | bytes], result: subprocess.CompletedProcess[bytes]) -> None:
    said = f"{args!r} -> {result.returncode}\n{result.stderr.decode(errors='replace')}"
    assert result.returncode in EXIT_STATUSES, said
    err = result.stderr.decode("utf-8")  # strictly: an undecodable byte is no UTF-8 text either
    assert "Traceback" not in err, said
    for line in err.splitlines():
        assert not line or ERROR_LINE.match(line), said
    assert not RAW_CONTROLS.search(err), said
    if not ("--raw" in args and result.returncode == 0):  # `events show --raw` writes the body as received
        out = result.stdout.decode("utf-8")
        assert not RAW_CONTROLS.search(out), said
    with sqlite3.connect(world.db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def every_row_is_still_shown(world: World) -> None:
    for args in (["todo", "list", "--state", "pending"], ["source", "list"], ["adapter", "status"], ["agent", "list"],
                 ["rule", "list"], ["events", "list"], ["stats"], ["todo", "list", "--json"]):  # fmt: skip
        result = run(world, args, b"")
        check(world, args, result)
        assert result.returncode == 0, (args, result.stderr)


@fuzz_settings
@given(data=st.data())
def test_any_argument_vector_gets_a_documented_exit_and_one_error_format(world: World, data: st.DataObject) -> None:
    args = data.draw(argument_vectors(world), label="argv")
    check(world, args, run(world, args, data.draw(st.binary(max_size=40), label="stdin")))


@fuzz_settings
@given(data=st.data())
def test_any_payload_argument_is_read_safely_or_refused(world: World, data: st.DataObject) -> None:
    args = data.draw(argument_vectors(world, payloads_only=True), label="argv")
    stdin = data.draw(JSON_VALUES.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=40), label="stdin")
    check(world, args, run(world, args, stdin))


def test_after_the_fuzzing_every_row_can_still_be_shown(world: World) -> None:
    every_row_is_still_shown(world)
