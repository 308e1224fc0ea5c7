"""Schedules on the command line (issue 31 §3): `source add --kind schedule`, its refusals (nothing
written), `source show` and `schedule next` in the schedule's zone, `status`'s last and next tick."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from support.sql import count, ms, run


def test_source_add_kind_schedule_keeps_it_and_shows_its_next_ticks_in_its_zone(cli) -> None:
    added = cli("source", "add", "nightly", "--kind", "schedule", "--cron", "30 2 * * *", "--tz", "Europe/Berlin",
                "--queue", "triage", "--title", "Nightly triage", "--payload", '{"scope": "open"}',
                "--catch-up", "all")  # fmt: skip
    assert added.code == 0, added.err
    assert "schedule nightly: 30 2 * * * in Europe/Berlin (enabled)" in added.out
    shown = json.loads(cli("source", "show", "nightly", "--json").out)
    assert (shown["family"], shown["kind"]) == ("schedule", "schedule")
    assert shown["config"] == {"cron": "30 2 * * *", "tz": "Europe/Berlin", "catch_up": "all", "queue": "triage",
                               "title": "Nightly triage", "payload": {"scope": "open"}}  # fmt: skip
    nexts = shown["schedule"]["next"]
    assert len(nexts) == 3 and all(re.endswith(("+01:00", "+02:00")) for re in (n["local"] for n in nexts))
    assert all(datetime.fromisoformat(n["local"]).strftime("%H:%M") == "02:30" for n in nexts)
    assert shown["schedule"]["last_tick"] is None
    listed = cli("source", "list").out
    assert "nightly  schedule  enabled  triage" in listed


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--cron", "61 * * * *"], "--cron '61 * * * *' is not a cron expression: Bad minute"),
        (["--cron", "0 * * * *", "--tz", "Mars/Olympus"], "--tz 'Mars/Olympus' is not a time zone"),
        (["--cron", "0 * * * *", "--payload", "{oops"], "--payload: not valid JSON"),
        (["--cron", "0 * * * *", "--catch-up", "some"], "'some' is not one of 'none', 'last', 'all'"),
        (["--cron", "0 * * * *", "--secret", "s"], "--secret does not apply to a schedule"),
        (["--cron", "0 * * * *", "--tolerance", "5"], "--tolerance does not apply to a schedule"),
        ([], "--kind schedule needs --cron EXPR"),
    ],
)
def test_a_bad_schedule_is_refused_clearly_and_nothing_is_written(cli, db_path, args, says) -> None:
    refused = cli("source", "add", "bad", "--kind", "schedule", *args)
    assert refused.code == 2
    assert says in refused.err
    assert count(db_path, "sources") == 0


def test_schedule_options_are_refused_for_a_webhook_source(cli, db_path) -> None:
    refused = cli("source", "add", "gh", "--kind", "github", "--secret", "s", "--cron", "0 * * * *")
    assert (refused.code, "--cron does not apply to a webhook source" in refused.err) == (2, True)
    assert count(db_path, "sources") == 0


def test_schedule_next_lists_the_next_due_instants_in_the_zone_and_in_utc(cli) -> None:
    cli("source", "add", "s", "--kind", "schedule", "--cron", "0 9 * * MON-FRI", "--tz", "America/New_York")
    shown = cli("schedule", "next", "s", "--count", "7", "--json")
    assert shown.code == 0, shown.err
    due = json.loads(shown.out)["next"]
    assert len(due) == 7
    for tick in due:
        local = datetime.fromisoformat(tick["local"])
        assert (local.hour, local.minute, local.weekday() < 5) == (9, 0, True)
        assert datetime.fromisoformat(tick["due"].replace("Z", "+00:00")) == local
    text = cli("schedule", "next", "s", "--count", "2").out
    assert text.splitlines()[:2] == ["schedule s: 0 9 * * MON-FRI in America/New_York",
                                     "DUE (America/New_York)     DUE (UTC)"]  # fmt: skip
    assert cli("schedule", "next", "s", "--count", "0").code == 2
    missing = cli("schedule", "next", "gh")
    assert (missing.code, "no schedule named 'gh'" in missing.err) == (1, True)


@pytest.mark.both_backends
def test_status_shows_each_schedule_s_last_and_next_tick(cli, db_path) -> None:
    cli("source", "add", "m", "--kind", "schedule", "--cron", "0 0 1 1 *", "--tz", "Asia/Tokyo")
    run(db_path, f"UPDATE sources SET last_tick_at = {ms(db_path, 1_767_193_200_000)}")  # its tick of 2026
    view = json.loads(cli("status", "--json").out)
    (schedule,) = view["schedules"]
    assert (schedule["name"], schedule["firing"], schedule["cron"], schedule["tz"]) == ("m", False, "0 0 1 1 *",
                                                                                        "Asia/Tokyo")  # fmt: skip
    assert schedule["last_tick_local"] == "2026-01-01T00:00:00+09:00"
    assert datetime.fromisoformat(schedule["next_tick_local"]).strftime("%m-%d %H:%M") == "01-01 00:00"
    text = cli("status").out
    assert "SCHEDULE" in text and "2026-01-01T00:00:00+09:00" in text
