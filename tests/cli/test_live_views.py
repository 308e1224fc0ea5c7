"""The live views (`todo watch`, `events tail`) and the event commands around them (issue 12 §3).

A view runs as a real process while other processes (and this test) write
to the file; its lines are read as they come, then it is stopped as a
person stops it (Ctrl-C) or as `head` does (by going away).
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import queue
import re
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from switchboard_local.core import routing, rules, sources, webhook_config
from switchboard_local.core.events import NewEvent
from switchboard_local.core.store.opener import open_store

from support import sql
from support.cli import REPO_ROOT, as_json, ctrl_c_reaches_it, run_cli

LINE_TIMEOUT = 60  # seconds for a line that should come; a bound, never a measured time
RAW_CONTROLS = re.compile("[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # ESC checked apart
HOSTILE_TITLE = "a\x1b]0;owned\x07b\u202ec"


class View:
    """`python -m switchboard_local ARGS` running, its stdout lines read by a thread as they arrive."""

    def __init__(self, db: Path, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SWITCHBOARD_DB": str(db)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "switchboard_local", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            preexec_fn=ctrl_c_reaches_it,  # noqa: PLW1509 (a signal disposition, before exec)
        )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next_line(self) -> str:
        try:
            line = self.lines.get(timeout=LINE_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"no line from {self.proc.args[3:]} within {LINE_TIMEOUT} s") from None
        assert line is not None, f"the view ended: {self.proc.wait()} {self.proc.stderr.read()}"  # type: ignore[union-attr]
        assert line.endswith("\n")
        return line.removesuffix("\n")

    def next_json(self) -> dict[str, Any]:
        return json.loads(self.next_line())

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C: the exit status and what it wrote on stderr."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=LINE_TIMEOUT), self.proc.stderr.read()  # type: ignore[union-attr]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def views():
    started: list[View] = []
    yield lambda db, *args: started.append(View(db, *args)) or started[-1]
    for view in started:
        view.kill()


def create(db: Path, queue: str, title: str) -> int:
    """A todo created by another process (the CLI)."""
    result = run_cli("todo", "create", "--queue", queue, "--title", title, "--json", db=db)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["id"]


def raw_todo(db: Path, title: str, queue: str = "q") -> None:
    """A row as another program (or a routed delivery before its title was cleaned) could leave it."""

    async def made() -> None:  # the file and its schema, as any command leaves them
        async with await open_store(db):
            pass

    asyncio.run(made())
    sql.run(db, "INSERT INTO todos (queue, title, state, visible_at, created_at, updated_at) "
                "VALUES (?, ?, 'pending', 0, 0, 0)", (queue, title))  # fmt: skip


def deliver(db: Path, delivery: str, *, source: str = "gh", body: dict | None = None) -> int:
    async def go() -> int:
        async with await open_store(db) as store:
            result = await routing.deliver(store, NewEvent(
                source=source, family="webhook", type="pull_request", external_id=delivery, trust_mode="github",
                verified=True, body=json.dumps(body or {"number": 42}).encode(), content_type="application/json",
            ))  # fmt: skip
        return result.event_id

    return asyncio.run(go())


def assert_quiet_130(status: int, err: str) -> None:
    assert status == 130
    assert "Traceback" not in err and err.strip() == "", err


# ---------------------------------------------------------------- todo watch


def test_todo_watch_json_follows_todos_other_processes_create_until_ctrl_c(db_path: Path, views) -> None:
    first = create(db_path, "q", "before the view")
    view = views(db_path, "todo", "watch", "--json", "--queue", "q", "--since-id", str(first))
    assert view.next_json()["id"] == first  # --since-id includes it
    create(db_path, "other", "not on q")
    second = create(db_path, "q", "second")
    shown = view.next_json()
    assert (shown["id"], shown["queue"], shown["title"], shown["state"]) == (second, "q", "second", "pending")
    assert_quiet_130(*view.interrupt())


def test_todo_watch_starts_from_now_by_default(db_path: Path, views) -> None:
    before = create(db_path, "q", "before the view")
    view = views(db_path, "todo", "watch", "--json")
    # The view takes "now" when it starts, which this test cannot see: it
    # creates todos until one is shown; the first shown is one of those.
    created: list[int] = []
    while True:
        created.append(create(db_path, "q", f"after {len(created)}"))
        try:
            line = view.lines.get(timeout=1)
        except queue.Empty:
            assert len(created) < 120, "the view never showed a todo"
            continue
        break
    assert line is not None
    shown = json.loads(line)["id"]
    assert shown > before and shown in created
    for later in created[created.index(shown) + 1 :]:
        assert view.next_json()["id"] == later  # each once, in order
    assert_quiet_130(*view.interrupt())


def test_todo_watch_text_is_tab_separated_and_escapes_control_characters(db_path: Path, views) -> None:
    raw_todo(db_path, HOSTILE_TITLE)
    view = views(db_path, "todo", "watch", "--since-id", "1")
    fields = view.next_line().split("\t")
    assert fields[1:4] == ["1", "pending", "q"]
    assert "\x1b" not in fields[4] and not RAW_CONTROLS.search(fields[4])
    assert fields[4] == "a\\x1b]0;owned\\x07b\\u202ec"
    assert_quiet_130(*view.interrupt())


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_todo_watch_on_a_terminal_colours_the_state_in_aligned_columns(db_path: Path) -> None:
    raw_todo(db_path, HOSTILE_TITLE)
    create(db_path, "queue-two", "plain")
    controller, terminal = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SWITCHBOARD_DB": str(db_path)}
    proc = subprocess.Popen([sys.executable, "-m", "switchboard_local", "todo", "watch", "--since-id", "1"],
                            stdin=subprocess.DEVNULL, stdout=terminal, stderr=subprocess.PIPE, env=env,
                            preexec_fn=ctrl_c_reaches_it)  # fmt: skip  # noqa: PLW1509
    os.close(terminal)
    try:
        seen = b""
        while seen.count(b"\n") < 2:
            ready, _, _ = select.select([controller], [], [], LINE_TIMEOUT)
            assert ready, f"no line on the terminal within {LINE_TIMEOUT} s: {seen!r}"
            seen += os.read(controller, 4096)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=LINE_TIMEOUT) == 130
    finally:
        proc.kill()
        os.close(controller)
    lines = seen.decode().replace("\r\n", "\n").splitlines()
    yellow = "\x1b[33mpending\x1b[0m"
    assert all(yellow in line for line in lines)
    plain = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in lines]
    assert not any(RAW_CONTROLS.search(line) or "\x1b" in line for line in plain)  # only the colour is an escape
    assert [line.index("pending") for line in plain] == [plain[0].index("pending")] * 2  # aligned
    assert plain[0].endswith("a\\x1b]0;owned\\x07b\\u202ec") and plain[1].endswith("plain")
    assert plain[1].index("plain") == plain[0].index("a\\x1b")


def test_a_view_ends_quietly_with_0_when_its_reader_goes_away(db_path: Path) -> None:
    create(db_path, "q", "one")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SWITCHBOARD_DB": str(db_path)}
    proc = subprocess.Popen([sys.executable, "-m", "switchboard_local", "todo", "watch", "--since-id", "1"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        ready, _, _ = select.select([proc.stdout], [], [], LINE_TIMEOUT)
        assert ready and proc.stdout.readline().endswith(b"one\n")
        proc.stdout.close()  # as `head -1` exits
        create(db_path, "q", "two")  # whether it notices at a quiet spell or at its next line
        assert proc.wait(timeout=LINE_TIMEOUT) == 0
        assert proc.stderr.read() == b""
    finally:
        proc.kill()


# ---------------------------------------------------------------- events tail


def test_events_tail_json_follows_stored_events_of_its_source_until_ctrl_c(db_path: Path, views) -> None:
    first = deliver(db_path, "d-1")
    view = views(db_path, "events", "tail", "--json", "--source", "gh", "--since-id", str(first))
    assert view.next_json()["external_id"] == "d-1"
    deliver(db_path, "r-1", source="orders")
    second = deliver(db_path, "d-2")
    shown = view.next_json()
    assert (shown["id"], shown["source"], shown["type"], shown["external_id"]) == (second, "gh", "pull_request", "d-2")
    assert "body" not in shown and shown["verified"] is True  # the fields of `events list --json`
    assert_quiet_130(*view.interrupt())


def test_events_tail_text_shows_one_escaped_line_per_event(db_path: Path, views) -> None:
    view = views(db_path, "events", "tail")
    # Delivered until the view shows one (it takes "now" when it starts).
    for n in range(120):
        deliver(db_path, f"d\x1b[2J-{n}")
        try:
            line = view.lines.get(timeout=1)
        except queue.Empty:
            continue
        break
    else:
        raise AssertionError("the view never showed an event")
    assert line is not None
    fields = line.removesuffix("\n").split("\t")
    assert fields[2:5] == ["gh", "pull_request", "yes"] and fields[6].startswith("d\\x1b[2J-")
    assert_quiet_130(*view.interrupt())


# ---------------------------------------------------------------- events show, events list --since


def add_rules(db: Path) -> None:
    async def go() -> None:
        async with await open_store(db) as store:
            await sources.add(store, "gh", family="webhook", kind="github", trust_mode="github",
                              config=webhook_config.source_config("github", {}),
                              secrets=[sources.secret_ref(value="s")])  # fmt: skip
            await rules.add(store, source="gh", type="pull_request", queue="review", title="Review #{number}")
            await rules.add(store, source="gh", type="pull_request", queue="triage", title="Triage #{number}")
            await rules.add(store, source="gh", type="push", drop=True)

    asyncio.run(go())


def test_events_show_lists_the_todos_the_event_produced(cli, db_path: Path) -> None:
    add_rules(db_path)
    event_id = deliver(db_path, "d-1")
    claimed = as_json(cli, "todo", "claim", "--queue", "review")
    cli("todo", "complete", str(claimed["id"]), "--token", claimed["lease_token"])
    replayed = as_json(cli, "events", "replay", str(event_id))["todos"]
    shown = as_json(cli, "events", "show", str(event_id))
    assert [(t["queue"], t["state"], t["title"]) for t in shown["todos"]] == [
        ("review", "done", "Review #42"), ("triage", "pending", "Triage #42"),
        ("review", "pending", "Review #42"), ("triage", "pending", "Triage #42"),
    ]  # fmt: skip
    assert [t["id"] for t in shown["todos"]][2:] == replayed
    assert set(shown["todos"][0]) == {"id", "queue", "state", "dead_letter", "title"}
    code, out, err, _ = cli("events", "show", str(event_id))
    assert code == 0, err
    todo_lines = [line.split() for line in out.splitlines() if "Review #42" in line or "Triage #42" in line]
    assert [line[:3] for line in todo_lines] == [
        [str(claimed["id"]), "done", "review"], [str(claimed["id"] + 1), "pending", "triage"],
        [str(replayed[0]), "pending", "review"], [str(replayed[1]), "pending", "triage"],
    ]  # fmt: skip


def test_events_show_says_when_an_event_produced_no_todo(cli, db_path: Path) -> None:
    add_rules(db_path)
    event_id = asyncio.run(_deliver_push(db_path))
    assert as_json(cli, "events", "show", str(event_id))["todos"] == []
    assert re.search(r"^  todos +none$", cli("events", "show", str(event_id)).out, re.M)


async def _deliver_push(db: Path) -> int:
    async with await open_store(db) as store:
        result = await routing.deliver(store, NewEvent(
            source="gh", family="webhook", type="push", external_id="p-1", trust_mode="github", verified=True,
            body=b"{}", content_type="application/json",
        ))  # fmt: skip
    return result.event_id


def test_events_list_since_takes_an_age_as_well_as_an_id_or_a_time(cli, db_path: Path) -> None:
    old, recent = deliver(db_path, "old"), deliver(db_path, "recent")
    sql.run(db_path, "UPDATE events SET received_at = received_at - 3 * 3600 * 1000 WHERE id = ?", (old,))
    ids = lambda *since: [e["id"] for e in as_json(cli, "events", "list", "--since", *since)]  # noqa: E731
    assert ids("2h") == [recent]
    assert ids("90m") == [recent]
    assert ids("1d") == [old, recent]
    assert ids("3600s") == [recent]
    assert ids(str(old)) == [recent]  # a bare number is still an event id
    code, _, err, _ = cli("events", "list", "--since", "10x")
    assert code == 2 and "an age like 10m, 2h or 1d" in err
