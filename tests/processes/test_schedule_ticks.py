"""Schedules' ticks with real processes (issue 31 §3), on both backends: a tick fired by two processes at
once is stored once; a per-second schedule fires each tick exactly once while the `serve` that leads ingest
is killed with SIGKILL and replaced, round after round."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from support.cli import run_cli
from support.receiver import ServeProcess
from support.sql import rows, value
from support.waits import until

# Two processes fire a per-second schedule's due ticks, pass after pass, each on a clock of its own that
# starts 100 s after the schedule was added (100 ticks due, catch-up all) and moves a second a pass: each
# process fires every tick it finds due, and whichever of them comes second finds it fired (the schedule's
# newest tick) or collapses into the first's event.
FIRE = """
import asyncio, json, sys
from switchboard_local.core import schedules
from switchboard_local.core.clock import ManualClock
from switchboard_local.core.store.opener import open_store

async def main():
    clock = ManualClock(int(sys.argv[2]))
    async with await open_store(sys.argv[1], clock=clock) as store:
        sys.stdin.readline()  # both processes open their store first; then they fire together
        fired = new = 0
        for _ in range(int(sys.argv[3])):
            done = await schedules.fire_due(store)
            fired += sum(len(f.ticks) for f in done.fired)
            new += sum(f.new for f in done.fired)
            clock.advance(1)
        print(json.dumps({"fired": fired, "new": new}), flush=True)

asyncio.run(main())
"""
PASSES = 50


def test_two_processes_firing_the_same_ticks_store_each_once(db_path: Path) -> None:
    added = run_cli("source", "add", "s", "--kind", "schedule", "--cron", "* * * * * *", "--catch-up", "all",
                    db=db_path)  # fmt: skip
    assert added.returncode == 0, added.stderr
    since = json.loads(run_cli("source", "show", "s", "--json", db=db_path).stdout)["updated_at"]
    added_ms = round(datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp() * 1000)
    at = added_ms // 1000 * 1000 + 100_000  # the ticks after it, up to this whole second: exactly 100
    firing = [subprocess.Popen([sys.executable, "-c", FIRE, str(db_path), str(at), str(PASSES)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]  # fmt: skip
    for proc in firing:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    said = []
    for proc in firing:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        said.append(json.loads(out))
    due = 100 + PASSES - 1
    print("two processes firing:", said)
    assert sum(s["new"] for s in said) == due, said  # each tick new to one process only
    assert value(db_path, "SELECT count(*) FROM events WHERE source = 's'") == due
    assert value(db_path, "SELECT count(DISTINCT external_id) FROM events WHERE source = 's'") == due
    assert value(db_path, "SELECT count(*) FROM todos") == due


ROUNDS = 4
FENCE = re.compile(r"fence (\d+)")


def leader(db: Path) -> tuple[int, int] | None:
    """(fence, pid) of the leader's row, whatever its expiry."""
    found = rows(db, "SELECT fence, pid FROM ingest_leader")
    return (int(found[0][0]), int(found[0][1])) if found else None


def newest_due(db: Path) -> float:
    """The due instant of the newest tick stored (its external id), as a Unix time; 0 when none is."""
    newest = value(db, "SELECT max(external_id) FROM events WHERE source = 'every'")
    return 0.0 if newest is None else datetime.fromisoformat(newest.replace("Z", "+00:00")).timestamp()


def new_leader(db: Path, after_fence: int, logs, timeout: float = 30) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while (found := leader(db)) is None or found[0] <= after_fence:
        if time.monotonic() > deadline:
            raise AssertionError(f"no leader after fence {after_fence} within {timeout} s\n{logs()[-3000:]}")
        time.sleep(0.02)
    return found


def test_a_per_second_schedule_fires_each_tick_once_while_its_leader_is_killed_and_replaced(db_path: Path) -> None:
    added = run_cli("source", "add", "every", "--kind", "schedule", "--cron", "* * * * * *", "--catch-up", "all",
                    db=db_path)  # fmt: skip
    assert added.returncode == 0, added.stderr
    running = [ServeProcess(db_path), ServeProcess(db_path)]
    gone: list[ServeProcess] = []

    def logs() -> str:
        return "".join(line for p in running + gone for line in p.lines)

    rng = random.Random(int(os.environ.get("SWITCHBOARD_FUZZ_SEED", "31")))
    ticks = "SELECT count(*) FROM events WHERE source = 'every'"
    fence, kills = 0, []
    try:
        for n in range(ROUNDS):
            fence, pid = new_leader(db_path, fence, logs)
            if n == 0:  # a tick before the first kill
                until(lambda: value(db_path, ticks) >= 1, True, context=logs)
            time.sleep(rng.uniform(0.5, 2.0))  # a random point of its work: mid-pass, asleep, committing
            (victim,) = [p for p in running if p.proc.pid == pid]
            kills.append(time.time())
            victim.proc.kill()
            victim.proc.wait(timeout=30)
            running.remove(victim)
            gone.append(victim)
            running.append(ServeProcess(db_path))
        fence, _ = new_leader(db_path, fence, logs)
        # The last leader fires a few more ticks, one due after the last kill: what was missed across
        # the last kill is caught up by then.
        stored = value(db_path, ticks)
        until(lambda: value(db_path, ticks) >= stored + 3 and newest_due(db_path) > kills[-1], True, context=logs)
    finally:
        for p in running:
            p.stop()

    fired = rows(db_path, "SELECT id, external_id, verify_detail FROM events WHERE source = 'every' ORDER BY id")
    due = sorted(datetime.fromisoformat(external_id.replace("Z", "+00:00")).timestamp() for _, external_id, _ in fired)
    assert len(due) == len(set(due)), "a tick fired twice"
    seconds = round(due[-1] - due[0]) + 1
    assert len(due) == seconds, f"ticks missing between the first and the last: {seconds - len(due)}"
    assert due[0] < kills[0] and due[-1] > kills[-1]  # the ticks span every kill
    # One todo per tick, each from its own event; no tick's todo made twice.
    assert value(db_path, "SELECT count(*) FROM todos") == len(due)
    assert value(db_path, "SELECT count(DISTINCT event_id) FROM todos") == len(due)
    # Stored in the order of the leaders' fences: a deposed leader never stored after its successor.
    fences = [int(FENCE.search(detail).group(1)) for _, _, detail in fired]
    assert fences == sorted(fences)
    assert len(set(fences)) >= ROUNDS  # ticks fired on both sides of each hand-over
    received = rows(db_path, "SELECT external_id, received_at FROM events WHERE source = 'every'")
    delays = sorted((r if isinstance(r, int) else r.timestamp() * 1000) / 1000
                    - datetime.fromisoformat(e.replace("Z", "+00:00")).timestamp() for e, r in received)  # fmt: skip
    print(f"{len(delays)} ticks over {ROUNDS} kills: stored after their due instant by median {delays[len(delays) // 2]:.3f} s, "
          f"max {delays[-1]:.2f} s")  # fmt: skip
