"""Schedules as a source (issue 31 §3): each due tick of a cron source is an event, routed like any
delivery, fired once however many passes, processes or leaders fire it; missed ticks as the
schedule's catch-up says; DST as the cron library handles it. Time is the store's ManualClock
(2026-01-01T00:00:00Z at the start)."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import pytest

from switchboard_local.core import leadership, routing, rules, schedules, sources, todos
from switchboard_local.core.errors import InvalidArgument
from switchboard_local.core.events import get_event, list_events, todos_of_event
from switchboard_local.core.leadership import NotLeader
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.shared import SCHEMA_VERSION

from support.sql import count, pg_connection, run, value

pytestmark = pytest.mark.anyio

MINUTE = 60.0


def ms(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)


def at(clock, text: str) -> None:
    """Move the clock to an instant (never back)."""
    target = ms(text)
    assert target >= clock.now_ms()
    clock.advance((target - clock.now_ms()) / 1000)


async def ticks_of(store, name: str) -> list[str]:
    return [e.external_id for e in await list_events(store, source=name, limit=1000)]


async def test_a_schedule_is_kept_with_its_cron_zone_catch_up_queue_title_and_payload(store):
    added = await schedules.add(store, "nightly", cron="30 2 * * *", tz="Europe/Berlin", queue="triage",
                                title="Nightly triage", payload={"scope": "open"}, catch_up="all", by="op")  # fmt: skip
    assert (added.family, added.kind, added.trust_mode) == ("schedule", "schedule", "schedule")
    assert added.config == {"cron": "30 2 * * *", "tz": "Europe/Berlin", "catch_up": "all", "queue": "triage",
                            "title": "Nightly triage", "payload": {"scope": "open"}}  # fmt: skip
    shown = schedules.describe(await sources.get(store, "nightly"), store.clock.now_ms(), count=2)
    assert shown["next"] == [{"due": "2026-01-01T01:30:00.000Z", "local": "2026-01-01T02:30:00+01:00"},
                             {"due": "2026-01-02T01:30:00.000Z", "local": "2026-01-02T02:30:00+01:00"}]  # fmt: skip
    assert shown["last_tick"] is None


async def test_a_schedule_defaults_to_utc_catch_up_last_and_its_name_as_queue(store):
    added = await schedules.add(store, "hourly", cron="0 * * * *")
    assert added.config == {"cron": "0 * * * *", "tz": "UTC", "catch_up": "last"}
    assert routing.default_queue_of(added) == "hourly"


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"cron": "61 * * * *"}, "--cron '61 * * * *' is not a cron expression: Bad minute"),
        ({"cron": "* * *"}, "is not a cron expression: Wrong number of fields"),
        ({"cron": "* * */20 * 1L"}, "never fires"),
        ({"cron": "0 * * * *", "tz": "Mars/Olympus_Mons"}, "--tz 'Mars/Olympus_Mons' is not a time zone"),
        ({"cron": "0 * * * *", "tz": "../../etc/passwd"}, "is not a time zone"),
        ({"cron": "0 * * * *", "catch_up": "some"}, "--catch-up must be one of none, last, all"),
        ({"cron": "0 * * * *", "payload": float("nan")}, "--payload"),
        ({"cron": "0 * * * *", "title": "a\x07b"}, "--title holds a control character"),
        ({"cron": "0 * * * *", "queue": ""}, "--queue"),
    ],
)
async def test_a_bad_cron_zone_catch_up_or_payload_is_refused_and_nothing_is_written(store, db_path, options, says):
    with pytest.raises(InvalidArgument, match=None) as refused:
        await schedules.add(store, "bad", **options)
    assert says in str(refused.value)
    assert count(db_path, "sources") == 0


async def test_a_due_tick_is_an_event_whose_todo_goes_to_the_default_queue(store, clock):
    await schedules.add(store, "nightly", cron="0 3 * * *", tz="Europe/Berlin", queue="triage",
                        payload={"scope": "open"})  # fmt: skip
    assert (await schedules.fire_due(store)).fired == ()  # nothing due yet
    at(clock, "2026-01-01T02:00:00.300+00:00")  # 03:00 in Berlin, 0.3 s ago
    done = await schedules.fire_due(store)
    assert [(f.schedule, f.new, f.missed) for f in done.fired] == [("nightly", 1, 0)]
    (event,) = await list_events(store, source="nightly")
    assert (event.family, event.type, event.external_id, event.verified) == ("schedule", "tick",
                                                                            "2026-01-01T02:00:00.000Z", True)  # fmt: skip
    assert json.loads(event.body) == {"schedule": "nightly", "due": "2026-01-01T02:00:00.000Z",
                                      "due_local": "2026-01-01T03:00:00+01:00", "tz": "Europe/Berlin",
                                      "late": False, "payload": {"scope": "open"}}  # fmt: skip
    listed = await todos.list_todos(store, queue="triage")
    assert [(t.title, t.kind, t.event_id) for t in listed] == [("nightly: tick 2026-01-01T03:00:00+01:00", "tick", event.id)]
    full = await todos.get(store, listed[0].id)
    assert full.payload["body"]["payload"] == {"scope": "open"}
    assert (await sources.get(store, "nightly")).last_tick_at == ms("2026-01-01T02:00:00+00:00")
    assert done.next_due == ms("2026-01-02T02:00:00+00:00")


async def test_a_tick_is_routed_by_the_schedule_s_rules_on_its_payload(store, clock):
    await schedules.add(store, "weekly", cron="0 9 * * MON", payload={"team": "infra"})
    await rules.add(store, source="weekly", type="tick", where=["payload.team=infra"], queue="infra",
                    title="Weekly review ({due_local})")  # fmt: skip
    at(clock, "2026-01-05T09:00:01+00:00")  # the first Monday
    await schedules.fire_due(store)
    (todo,) = await todos.list_todos(store, queue="infra")
    assert todo.title == "Weekly review (2026-01-05T09:00:00+00:00)"
    assert await todos.list_todos(store, queue="weekly") == []


async def test_a_tick_fires_once_however_many_passes_and_restarts_fire_it(store, clock, db_path):
    await schedules.add(store, "every-minute", cron="* * * * *")
    at(clock, "2026-01-01T00:01:02+00:00")
    first = await schedules.fire_due(store)
    again = await schedules.fire_due(store)  # a second pass at the same instant
    assert [f.new for f in first.fired] == [1] and again.fired == ()
    # Another process (or this one restarted) that has not seen the tick remembered fires it again: it collapses.
    async with await open_store(db_path, clock=clock) as other:
        run(db_path, "UPDATE sources SET last_tick_at = NULL")
        replayed = await schedules.fire_due(other)
    assert [(f.ticks, f.new) for f in replayed.fired] == [((ms("2026-01-01T00:01:00+00:00"),), 0)]
    assert await ticks_of(store, "every-minute") == ["2026-01-01T00:01:00.000Z"]
    assert count(db_path, "todos") == 1


async def test_catch_up_none_skips_the_ticks_missed_while_nobody_led(store, clock):
    await schedules.add(store, "m", cron="* * * * *", catch_up="none")
    at(clock, "2026-01-01T00:10:03+00:00")  # ten ticks due; only the one at 00:10 is on time
    done = await schedules.fire_due(store)
    assert [(f.new, f.missed) for f in done.fired] == [(1, 9)]
    assert await ticks_of(store, "m") == ["2026-01-01T00:10:00.000Z"]
    at(clock, "2026-01-01T00:15:30+00:00")  # only missed ones: none fires, and they stay skipped
    assert [(f.new, f.missed) for f in (await schedules.fire_due(store)).fired] == [(0, 5)]
    assert (await schedules.fire_due(store)).fired == ()
    assert await ticks_of(store, "m") == ["2026-01-01T00:10:00.000Z"]


async def test_catch_up_last_fires_the_newest_missed_tick(store, clock):
    await schedules.add(store, "m", cron="* * * * *", catch_up="last")
    at(clock, "2026-01-01T00:10:30+00:00")
    done = await schedules.fire_due(store)
    assert [(f.new, f.missed) for f in done.fired] == [(1, 9)]
    (event,) = await list_events(store, source="m")
    assert event.external_id == "2026-01-01T00:10:00.000Z"
    body = json.loads(event.body)
    assert (body["late"], body["missed_before"]) == (True, 9)


async def test_catch_up_all_fires_each_missed_tick(store, clock):
    await schedules.add(store, "m", cron="* * * * *", catch_up="all")
    at(clock, "2026-01-01T00:10:30+00:00")
    done = await schedules.fire_due(store)
    assert [(f.new, f.missed) for f in done.fired] == [(10, 0)]
    assert await ticks_of(store, "m") == [f"2026-01-01T00:{m:02d}:00.000Z" for m in range(1, 11)]
    assert len(await todos.list_todos(store, queue="m", limit=100)) == 10


async def test_catch_up_all_fires_at_most_100_and_says_how_many_it_dropped(store, clock, caplog):
    await schedules.add(store, "m", cron="* * * * *", catch_up="all")
    at(clock, "2026-01-01T03:00:00+00:00")  # 180 ticks due
    done = await schedules.fire_due(store)
    assert [(f.new, f.missed) for f in done.fired] == [(100, 80)]
    fired = await ticks_of(store, "m")
    assert (len(fired), fired[0], fired[-1]) == (100, "2026-01-01T01:21:00.000Z", "2026-01-01T03:00:00.000Z")
    first = (await list_events(store, source="m", limit=1))[0]
    assert json.loads(first.body)["missed_before"] == 80
    assert "dropped 80 missed tick(s) (catch-up all)" in caplog.text


async def test_a_daily_tick_follows_the_zone_s_dst_transitions(store, clock):
    # Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST (02:30 never happens); 2026-10-25 03:00 CEST -> 02:00 CET
    # (02:30 happens twice). Debian cron's rule, cronsim's: the skipped job runs at once, the repeated one once.
    await schedules.add(store, "daily", cron="30 2 * * *", tz="Europe/Berlin", catch_up="none")
    source = await sources.get(store, "daily")
    spring = schedules.Spec.of(source).next(ms("2026-03-27T12:00:00+00:00"), 3)
    assert [schedules.Spec.of(source).local(t) for t in spring] == [
        "2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]  # fmt: skip
    autumn = schedules.Spec.of(source).next(ms("2026-10-24T12:00:00+00:00"), 3)
    assert [schedules.Spec.of(source).local(t) for t in autumn] == [
        "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00", "2026-10-27T02:30:00+01:00"]  # fmt: skip
    # Fired pass by pass across the spring night, a pass each quarter of an hour: once, at 03:00 CEST.
    at(clock, "2026-03-28T22:00:00+00:00")
    await sources.set_enabled(store, "daily", True)  # start from here (the months before are not missed ticks)
    for _ in range(4 * 6):
        clock.advance(15 * MINUTE)
        await schedules.fire_due(store)
    assert await ticks_of(store, "daily") == ["2026-03-29T01:00:00.000Z"]


async def test_an_hourly_tick_fires_for_each_real_hour_of_the_night_the_clocks_go_back(store, clock):
    await schedules.add(store, "hourly", cron="0 * * * *", tz="Europe/Berlin", catch_up="none")
    at(clock, "2026-10-24T22:30:00+00:00")  # 00:30 CEST
    await sources.set_enabled(store, "hourly", True)
    for _ in range(5 * 4):
        clock.advance(15 * MINUTE)
        await schedules.fire_due(store)
    # Five real hours, each fired once: 02:00 twice on the wall clock, once in summer time and once in winter time.
    fired = [json.loads(e.body)["due_local"] for e in await list_events(store, source="hourly")]
    assert fired == ["2026-10-25T01:00:00+02:00", "2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00",
                     "2026-10-25T03:00:00+01:00", "2026-10-25T04:00:00+01:00"]  # fmt: skip


async def test_a_deposed_leader_fires_nothing(store, clock):
    await schedules.add(store, "m", cron="* * * * *")
    at(clock, "2026-01-01T00:01:01+00:00")
    first = await leadership.try_lead(store, leadership.Candidate("a" * 16, 1, "elsewhere", "serve"))
    await leadership.release(store, first)
    second = await leadership.try_lead(store, leadership.Candidate("b" * 16, 2, "elsewhere", "serve"))
    with pytest.raises(NotLeader):
        await schedules.fire_due(store, lease=first)
    assert await ticks_of(store, "m") == []
    assert (await sources.get(store, "m")).last_tick_at is None
    await schedules.fire_due(store, lease=second)
    (event,) = await list_events(store, source="m")
    assert f"fence {second.fence}" in event.verify_detail


async def test_a_disabled_schedule_fires_nothing_and_its_ticks_then_are_not_missed(store, clock):
    await schedules.add(store, "m", cron="* * * * *", catch_up="all")
    await sources.set_enabled(store, "m", False)
    at(clock, "2026-01-01T00:10:30+00:00")
    assert (await schedules.fire_due(store)).fired == ()
    await sources.set_enabled(store, "m", True)
    at(clock, "2026-01-01T00:11:01+00:00")
    await schedules.fire_due(store)
    assert await ticks_of(store, "m") == ["2026-01-01T00:11:00.000Z"]


async def test_a_tick_replays_and_dry_runs_like_any_event(store, clock):
    await schedules.add(store, "m", cron="* * * * *", title="Check the builds")
    at(clock, "2026-01-01T00:01:01+00:00")
    await schedules.fire_due(store)
    (event,) = await list_events(store, source="m")
    (planned,) = await routing.dry_run(store, event_id=event.id)
    assert (planned.queue, planned.title) == ("m", "Check the builds")
    (again,) = await routing.replay(store, event.id, by="op")
    assert (await todos.get(store, again)).payload["replay"] is True
    assert (await get_event(store, event.id)).external_id == "2026-01-01T00:01:00.000Z"


async def test_next_due_instants_are_shown_in_the_schedule_s_zone_and_bounded(store, clock):
    await schedules.add(store, "s", cron="*/20 * * * * *", tz="Asia/Kolkata")  # every 20 seconds, seconds first
    source = await sources.get(store, "s")
    due = schedules.next_due(source, clock.now_ms(), 3)
    assert [datetime.fromtimestamp(t / 1000, tz=timezone.utc).second for t in due] == [20, 40, 0]
    assert schedules.describe(source, clock.now_ms(), 1)["next"] == [
        {"due": "2026-01-01T00:00:20.000Z", "local": "2026-01-01T05:30:20+05:30"}]  # fmt: skip
    with pytest.raises(InvalidArgument, match="--count must be between 1 and 1000"):
        schedules.next_due(source, clock.now_ms(), 0)


async def test_a_schedule_edited_by_hand_into_a_bad_cron_is_shown_and_skipped_saying_why(store, clock, db_path):
    await schedules.add(store, "m", cron="* * * * *")
    run(db_path, """UPDATE sources SET config = '{"cron": "nope"}'""")
    at(clock, "2026-01-01T00:01:01+00:00")
    assert (await schedules.fire_due(store)).fired == ()
    source = await sources.get(store, "m")
    assert "is not a cron expression" in source.last_error
    assert "is not a cron expression" in schedules.describe(source, clock.now_ms())["problem"]
    assert value(db_path, "SELECT count(*) FROM events") == 0


def _v10_rows(now: str) -> list[str]:
    body, verified = ("'x'::bytea", "true") if now == "now()" else ("X'78'", "1")  # the body b"x"
    return [
        "INSERT INTO sources (name, family, kind, trust_mode, config, created_at, updated_at) VALUES "
        f"""('gh', 'webhook', 'open', 'open', '{{"queue": "builds"}}', {now}, {now})""",
        "INSERT INTO events (id, source, family, type, external_id, trust_mode, verified, body, size, received_at) "
        f"VALUES (41, 'gh', 'webhook', 'push', 'd-41', 'open', {verified}, {body}, 1, {now})",
        "INSERT INTO todos (queue, title, event_id, state, visible_at, created_at, updated_at) "
        f"VALUES ('builds', 'push', 41, 'pending', {now}, {now}, {now})",
        "INSERT INTO event_todos (event_id, position, todo_id) VALUES (41, 0, 1)",
    ]


@pytest.fixture
def v10_database(backend: str, tmp_path, request: pytest.FixtureRequest):
    """A database as version 10 left it (tests/data/schema-v10*.sql): a webhook source, an event (id 41,
    the highest ever given: 42 and on were pruned) and its todo."""
    data = Path(__file__).resolve().parents[1] / "data"
    if backend == "sqlite":
        path = tmp_path / "switchboard.db"
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.executescript((data / "schema-v10.sql").read_text("utf-8"))
            conn.executescript("PRAGMA user_version = 10;\n" + ";\n".join(_v10_rows("0")) + ";\n"
                               "UPDATE sqlite_sequence SET seq = 50 WHERE name = 'events';")  # fmt: skip
        finally:
            conn.close()
        return path
    server = request.getfixturevalue("postgres_server")
    request.getfixturevalue("monkeypatch").setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    url = server.empty_database()
    request.addfinalizer(lambda: server.drop(url))
    with pg_connection(url) as conn:
        conn.execute((data / "schema-v10.postgres.sql").read_text("utf-8"))
        conn.execute("INSERT INTO schema_migrations (version) VALUES (10)")
        for statement in _v10_rows("now()"):
            conn.execute(statement)
        conn.execute("SELECT sb_given_id('events', 50)")
    return url


async def test_migrations_11_and_12_keep_sources_events_and_their_ids_and_takes_schedules(v10_database, clock):
    async with await open_store(v10_database, clock=clock) as store:
        assert [(s.name, s.family) for s in await sources.list_sources(store)] == [("gh", "webhook")]
        event = await get_event(store, 41)
        assert (event.source, event.external_id) == ("gh", "d-41")
        assert [t.queue for t in await todos_of_event(store, 41)] == ["builds"]
        await schedules.add(store, "m", cron="* * * * *")
        at(clock, "2026-01-01T00:01:01+00:00")
        await schedules.fire_due(store)
        (tick,) = await list_events(store, source="m")
        assert tick.id > 50  # ids pruned before the migration are never given again
        assert (await sources.get(store, "m")).last_tick_at == ms("2026-01-01T00:01:00+00:00")
    version = (value(v10_database, "SELECT max(version) FROM schema_migrations") if isinstance(v10_database, str)
               else value(v10_database, "PRAGMA user_version"))  # fmt: skip
    assert version == SCHEMA_VERSION
    assert value(v10_database, "SELECT count(*) FROM event_todos WHERE event_id = 41") == 1
