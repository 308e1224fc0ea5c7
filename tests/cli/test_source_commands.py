"""The commands around sources, events, pruning and adapters: what people and scripts see.

Here: what `source`, `adapter`, `events` and `prune` show and store, secrets
and passwords never printed, rows of any shape still shown. Todos are in
test_todo_commands.py; the error format shared by every command is in
test_errors.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path

import pytest

from switchboard_local.core import routing
from switchboard_local.core.events import NewEvent
from switchboard_local.core.sources import masked_url
from switchboard_local.core.store.opener import open_store

from support.cli import as_json

BODY = b'{"action": "opened",\n  "number": 42, "note": "\xc3\xa9t\xc3\xa9"}  '  # exact bytes, odd spacing


def deliver(db_path: Path, delivery: str = "d-1") -> int:
    return asyncio.run(_deliver(db_path, delivery))


async def _deliver(db_path: Path, delivery: str) -> int:
    async with await open_store(db_path) as store:
        result = await routing.deliver(store, NewEvent(
            source="gh", family="webhook", type="pull_request", external_id=delivery, trust_mode="github",
            verified=True, body=BODY, content_type="application/json",
            headers={"x-github-delivery": delivery, "x-hub-signature-256": "[redacted]"},
        ))  # fmt: skip
    return result.event_id


@pytest.mark.both_backends
def test_source_show_and_list_never_print_a_secret_value(cli) -> None:
    assert cli("source", "add", "gh", "--kind", "github", "--secret", "hunter2-topsecret").code == 0
    assert cli("source", "rotate", "gh", "--secret-env", "GH_NEW").code == 0
    outputs = [cli("source", "show", "gh"), cli("source", "show", "gh", "--json"), cli("source", "list", "--json")]
    for code, out, err, _ in outputs:
        assert code == 0 and "hunter2" not in out + err
    shown = json.loads(outputs[1].out)
    assert shown["secrets"] == ["value:********", "env:GH_NEW"]
    assert cli("source", "retire-secret", "gh").code == 0
    assert json.loads(cli("source", "show", "gh", "--json").out)["secrets"] == ["env:GH_NEW"]


def test_events_show_raw_writes_the_body_byte_for_byte(cli, db_path: Path) -> None:
    cli("source", "add", "gh", "--kind", "github", "--secret", "s")
    event_id = deliver(db_path)
    code, _, _, raw = cli("events", "show", str(event_id), "--raw")
    assert code == 0 and raw == BODY
    shown = json.loads(cli("events", "show", str(event_id), "--json").out)
    assert shown["body"] == BODY.decode() and shown["headers"]["x-hub-signature-256"] == "[redacted]"


@pytest.mark.both_backends
def test_events_list_pages_after_an_id_and_replay_adds_no_event(cli, db_path: Path) -> None:
    cli("source", "add", "gh", "--kind", "github", "--secret", "s")
    first, second = deliver(db_path, "d-1"), deliver(db_path, "d-2")
    assert [e["id"] for e in json.loads(cli("events", "list", "--source", "gh", "--json").out)] == [first, second]
    assert [e["id"] for e in json.loads(cli("events", "list", "--since", str(first), "--json").out)] == [second]
    assert json.loads(cli("events", "list", "--since", "2000-01-01T00:00:00Z", "--json").out)[0]["type"] == "source.add"
    code, _, err, _ = cli("events", "list", "--since", "yesterday")
    assert code == 2 and "--since" in err
    replayed = json.loads(cli("events", "replay", str(first), "--json").out)
    assert replayed["event_id"] == first and len(replayed["todos"]) == 1
    assert len(json.loads(cli("events", "list", "--source", "gh", "--json").out)) == 2
    assert cli("events", "replay", "999").code == 1


def test_prune_command_reports_what_it_removed(cli, db_path: Path) -> None:
    cli("source", "add", "gh", "--kind", "github", "--secret", "s")
    deliver(db_path, "d-1")
    deliver(db_path, "d-2")
    pruned = json.loads(cli("prune", "--max-events", "1", "--older-than", "30", "--json").out)
    # Both deliveries have live todos and stay; the audit event of `source add` has none.
    assert pruned == {"events": 1, "todos": 0, "delivery_keys": 0}
    code, out, _, _ = cli("prune")
    assert code == 0 and out.startswith("pruned 0 events")


def test_adapter_show_status_and_list_never_print_the_redis_password(cli) -> None:
    code, out, err, _ = cli("adapter", "add", "orders", "--redis-url", "redis://:hunter2@127.0.0.1:6399/0",
                            "--mode", "stream", "--key", "orders")  # fmt: skip
    assert code == 0 and "hunter2" not in out + err
    for args in (("adapter", "show", "orders"), ("adapter", "show", "orders", "--json"), ("adapter", "status"),
                 ("adapter", "list", "--json")):  # fmt: skip
        code, out, err, _ = cli(*args)
        assert code == 0 and "hunter2" not in out + err
    shown = json.loads(cli("adapter", "show", "orders", "--json").out)
    assert shown["config"]["url"] == "redis://:****@127.0.0.1:6399/0"  # --redis-url is --url
    assert shown["guarantee"].startswith("durable")
    code, _, err, _ = cli("adapter", "add", "bad", "--redis-url", "redis://x", "--mode", "list", "--key", "k",
                          "--group", "g")  # fmt: skip
    assert code == 2 and "--group" in err


def test_a_source_and_an_adapter_are_not_each_other(cli) -> None:
    cli("source", "add", "gh", "--kind", "github", "--secret", "s")
    cli("adapter", "add", "orders", "--redis-url", "redis://127.0.0.1:6399/0", "--mode", "list", "--key", "k")
    assert cli("adapter", "show", "gh").code == 1
    assert cli("source", "disable", "orders").code == 1
    assert cli("adapter", "disable", "orders").code == 0


# ---------------------------------------------------------------- rows that can always be shown

BAD_REDIS_URLS = {
    "port not a number": "redis://:pw-secret@localhost:notaport/0",
    "port out of range": "redis://:pw-secret@localhost:99999/0",
    "port 0": "redis://:pw-secret@localhost:0/0",
    "no host": "redis://:pw-secret@/0",
    "db not a number": "redis://:pw-secret@localhost:6379/zero",
    "db in the query not a number": "redis://:pw-secret@localhost:6379?db=x",
    "broken IPv6": "redis://:pw-secret@[::1:6379/0",
    "unix with a host": "unix://:pw-secret@localhost/run/redis.sock",
    "unix without a path": "unix://:pw-secret@",
    "upper-case scheme": "REDIS://:pw-secret@localhost",
    "a space": "redis://:pw secret@localhost",
    "an option redis does not take": "redis://:pw-secret@localhost:6379/0?no_such_option=1",
    "a TLS option on a plain connection": "redis://:pw-secret@localhost:6379/0?ssl_cert_reqs=required",
    "a protocol redis does not speak": "redis://:pw-secret@localhost:6379/0?protocol=9",
    "no connections allowed": "redis://:pw-secret@localhost:6379/0?max_connections=0",
    "reads of no bytes": "redis://:pw-secret@localhost:6379/0?socket_read_size=0",
    "a timeout in other digits": "redis://:pw-secret@localhost:6379/0?socket_timeout=%D9%A1",
    "a timeout of nan seconds": "redis://:pw-secret@localhost:6379/0?socket_connect_timeout=nan",
    "a database in other digits": "redis://:pw-secret@localhost:6379/0?db=%D9%A1",
    "a TLS flag that does not exist": "rediss://:pw-secret@localhost:6379/0?ssl_cert_reqs=pw-secret",
}


@pytest.mark.parametrize("case", BAD_REDIS_URLS)
def test_a_redis_url_redis_cannot_use_is_refused_and_nothing_is_stored(cli, case: str) -> None:
    code, out, err, _ = cli("adapter", "add", "orders", "--redis-url", BAD_REDIS_URLS[case], "--mode", "list", "--key", "k", "--json")
    assert code == 2 and "Traceback" not in err
    assert err.startswith("switchboard-local: invalid_argument: --redis-url")
    assert "pw-secret" not in out + err
    assert json.loads(cli("adapter", "list", "--json").out) == []


@pytest.mark.parametrize(
    "url", ["redis://:pw@[::1]:6379/2", "rediss://u:pw@h.example", "unix:///run/redis.sock?db=3&password=pw", "redis://h:/0"]
)
def test_a_redis_url_redis_can_use_is_accepted(cli, url: str) -> None:
    code, out, err, _ = cli("adapter", "add", "orders", "--redis-url", url, "--mode", "list", "--key", "k", "--json")
    assert code == 0, err
    assert "pw" not in json.loads(out)["config"]["url"].replace("password=****", "")


def test_a_default_queue_that_looks_like_a_url_is_shown_as_given(cli) -> None:
    code, _, err, _ = cli("source", "add", "gh", "--kind", "github", "--secret", "s", "--queue", "x://u:p@h:99999")
    assert code == 0 and "Traceback" not in err
    for args in (("source", "list"), ("source", "show", "gh")):
        code, out, err, _ = cli(*args)
        assert code == 0 and "x://u:p@h:99999" in out, err
    assert json.loads(cli("source", "show", "gh", "--json").out)["config"]["queue"] == "x://u:p@h:99999"


@pytest.mark.parametrize("queue", ["", "\x1b[31mred", "q" * 513])
def test_a_default_queue_that_is_no_queue_name_is_refused(cli, queue: str) -> None:
    assert cli("source", "add", "gh", "--kind", "github", "--secret", "s", "--queue", queue).code == 2
    assert cli("adapter", "add", "orders", "--redis-url", "redis://h", "--mode", "list", "--key", "k", "--queue", queue).code == 2
    assert cli("source", "list", "--json").out.strip() == "[]" and cli("adapter", "list", "--json").out.strip() == "[]"


def test_rows_in_a_bad_shape_are_still_listed_shown_and_removable(cli, db_path: Path) -> None:
    cli("todo", "list")  # creates the database
    rows = [
        ("old", "queue", "redis", '{"redis_url": "redis://:pw-secret@localhost:notaport/0"}', "[]"),  # no mode, no key
        ("odd", "queue", "redis", '{"mode": "carrier-pigeon", "key": 7, "redis_url": 12}', "not json"),
        ("broken", "queue", "redis", "{not json", "[]"),
        ("hook", "webhook", "github", "[1, 2]", '[{"env": "GH"}, "junk"]'),
    ]
    with sqlite3.connect(db_path) as conn:
        conn.executemany(
            "INSERT INTO sources (name, family, kind, trust_mode, config, secrets, created_at, updated_at)"
            " VALUES (?, ?, ?, 'queue', ?, ?, 0, 0)",
            rows,
        )
    for args in (("adapter", "list"), ("adapter", "status"), ("adapter", "list", "--json"), ("source", "list"),
                 ("source", "list", "--json"), ("adapter", "show", "old"), ("adapter", "show", "odd", "--json"),
                 ("adapter", "show", "broken"), ("source", "show", "hook")):  # fmt: skip
        code, out, err, _ = cli(*args)
        assert code == 0 and "Traceback" not in err, (args, err)
        assert "pw-secret" not in out
    for name, family, *_ in rows:
        assert cli("source" if family == "webhook" else "adapter", "remove", name).code == 0
    assert cli("adapter", "list", "--json").out.strip() == "[]"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@localhost:notaport/0", "redis://:****@localhost:notaport/0"),
        ("redis://user:p@ss@h:6379/0", "redis://user:****@h:6379/0"),
        ("redis://:p/ss@h/0", "redis://:****@h/0"),
        ("redis://:pw@[::1", "redis://:****@[::1"),
        ("unix:///run/r.sock?db=1&password=pw#x", "unix:///run/r.sock?db=1&password=****#x"),
        ("redis://user@h/0", "redis://****@h/0"),  # a user part alone may be a token: hidden whole
        ("nats://s3cr3t-t0ken@127.0.0.1:4222", "nats://****@127.0.0.1:4222"),
        ("tls://t%2Fok@h", "tls://****@h"),
        ("redis://h/0?client_name=me@x", "redis://h/0?client_name=me@x"),  # an '@' past the host is no token
        ("nats://@h", "nats://@h"),
        ("not a url", "not a url"),
    ],
)
def test_masking_a_url_never_fails_and_never_shows_the_password_or_token(url: str, shown: str) -> None:
    assert masked_url(url) == shown


# ---------------------------------------------------------------- the user's nouns


def test_sources_and_adapters_are_named_as_the_user_names_them(cli) -> None:
    cli("source", "add", "gh", "--kind", "github", "--secret", "s")
    cli("adapter", "add", "orders", "--redis-url", "redis://127.0.0.1:6399/0", "--mode", "list", "--key", "k")
    said = {
        "source again": cli("source", "add", "gh", "--kind", "github", "--secret", "s").err,
        "adapter again": cli("adapter", "add", "orders", "--redis-url", "redis://h", "--mode", "list", "--key", "k").err,
        "adapter on a source's name": cli("adapter", "add", "gh", "--redis-url", "redis://h", "--mode", "list", "--key", "k").err,
        "source on an adapter's name": cli("source", "add", "orders", "--kind", "github", "--secret", "s").err,
        "show an adapter as a source": cli("source", "show", "orders").err,
        "rotate an unknown source": cli("source", "rotate", "nope", "--secret", "s").err,
        "rotate an adapter": cli("source", "rotate", "orders", "--secret", "s").err,
    }
    assert said == {
        "source again": "switchboard-local: conflict: a webhook source named 'gh' exists already\n",
        "adapter again": "switchboard-local: conflict: an adapter named 'orders' exists already\n",
        "adapter on a source's name": "switchboard-local: conflict: the name 'gh' is taken by a webhook source\n",
        "source on an adapter's name": "switchboard-local: conflict: the name 'orders' is taken by an adapter\n",
        "show an adapter as a source": "switchboard-local: not_found: no webhook source or schedule named 'orders' ('orders' is an adapter)\n",
        "rotate an unknown source": "switchboard-local: not_found: no webhook source named 'nope'\n",
        "rotate an adapter": "switchboard-local: conflict: 'orders' is an adapter; only webhook sources have secrets\n",
    }


# ---------------------------------------------------------------- secrets serve may not find


def test_a_secret_env_unset_here_warns_and_the_source_is_still_added(cli) -> None:
    result = cli("source", "add", "gh", "--kind", "github", "--secret-env", "GH_UNSET_SECRET",
                 env={"GH_UNSET_SECRET": None})  # fmt: skip
    assert result.code == 0
    assert result.err == (
        "switchboard-local: warning: $GH_UNSET_SECRET is not set here: start serve with it set, "
        "or deliveries to 'gh' are answered 503\n"
    )
    result = cli("source", "rotate", "gh", "--secret-env", "GH_NEXT_SECRET", env={"GH_NEXT_SECRET": None})
    assert result.code == 0 and "$GH_NEXT_SECRET is not set here" in result.err
    shown = as_json(cli, "source", "show", "gh")
    assert shown["secrets"] == ["env:GH_UNSET_SECRET", "env:GH_NEXT_SECRET"]
    result = cli("source", "add", "gh2", "--kind", "github", "--secret-env", "GH_SET_SECRET",
                 env={"GH_SET_SECRET": "s3cret"})  # fmt: skip
    assert result.code == 0 and result.err == ""  # set here: nothing to say


@pytest.mark.parametrize("problem", ["missing", "empty"])
def test_a_secret_file_that_cannot_be_read_warns_and_the_source_is_still_added(cli, tmp_path: Path, problem: str) -> None:
    path = tmp_path / "secret"
    if problem == "empty":
        path.write_text("\n")  # serve strips it: no secret
    code, _, err, _ = cli("source", "add", "gh", "--kind", "github", "--secret-file", str(path))
    assert code == 0
    assert err.startswith(f"switchboard-local: warning: {path}: ") and "serve reads it at each delivery" in err
    assert len(err.splitlines()) == 1
    assert json.loads(cli("source", "show", "gh", "--json").out)["name"] == "gh"
    path.write_text("s3cret\n")
    code, _, err, _ = cli("source", "rotate", "gh", "--secret-file", str(path))
    assert code == 0 and err == ""  # readable: nothing to say


# ---------------------------------------------------------------- what reaches a terminal

RAW_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
HOSTILE_BODY = b'{"note": "\x1b]0;owned\x07 \xc2\x9b2J \xe2\x80\xae txt"}\x00\r'


def test_events_show_escapes_control_characters_and_raw_stays_byte_exact(cli, db_path: Path) -> None:
    cli("source", "add", "gh", "--kind", "github", "--secret", "s")
    event_id = asyncio.run(_deliver_hostile(db_path))
    for args in (("events", "show", str(event_id)), ("events", "show", str(event_id), "--json"), ("events", "list")):
        code, out, err, _ = cli(*args)
        assert code == 0, err
        assert not RAW_CONTROLS.search(out + err), args
    shown = json.loads(cli("events", "show", str(event_id), "--json").out)
    assert shown["headers"]["x-note"] == "\x1b[2J\u2066" and shown["body"] == HOSTILE_BODY.decode()
    assert cli("events", "show", str(event_id), "--raw").raw == HOSTILE_BODY


async def _deliver_hostile(db_path: Path) -> int:
    async with await open_store(db_path) as store:
        result = await routing.deliver(store, NewEvent(
            source="gh", family="webhook", type="push\x1b[8m", external_id="d-\x9b1", trust_mode="github",
            verified=True, body=HOSTILE_BODY, content_type="application/json", headers={"x-note": "\x1b[2J\u2066"},
        ))  # fmt: skip
    return result.event_id


def test_source_add_takes_a_replay_window_as_a_duration_and_shows_it(cli) -> None:
    code, out, err, _ = cli("source", "add", "gh", "--kind", "github", "--secret", "s", "--replay-window", "2h", "--json")
    assert code == 0, err
    assert json.loads(out)["config"]["replay_window"] == 7200
    assert "replay window 2h" in cli("source", "show", "gh").out
    assert "replay window 1d" in cli("source", "add", "gl", "--kind", "gitlab", "--secret", "s").out  # the default
    code, _, err, _ = cli("source", "add", "bad", "--kind", "github", "--secret", "s", "--replay-window", "soon")
    assert code == 2 and err.startswith("switchboard-local: invalid_argument: --replay-window")


def test_a_source_or_an_adapter_may_be_named_like_a_broker(cli) -> None:
    # Derived keys are event:{source}:… for every source, whatever its broker: no name is kept for a broker's keys.
    assert cli("source", "add", "redis", "--kind", "open").code == 0
    assert cli("adapter", "add", "nats", "--redis-url", "redis://h", "--mode", "list", "--key", "k").code == 0
    assert [s["name"] for s in json.loads(cli("source", "list", "--json").out)] == ["redis"]
    assert [a["name"] for a in json.loads(cli("adapter", "list", "--json").out)] == ["nats"]


def test_source_add_keeps_a_named_header_in_clear_and_show_says_so(cli) -> None:
    added = cli("source", "add", "gh", "--kind", "github", "--secret", "s", "--keep-header", "Idempotency-Key")
    assert added.code == 0, added.err
    shown = cli("source", "show", "gh").out
    assert "redacted     headers whose name says secret (kept in clear: idempotency-key)" in shown
    assert as_json(cli, "source", "show", "gh")["config"]["keep_headers"] == ["idempotency-key"]
    refused = cli("source", "add", "gh2", "--kind", "github", "--secret", "s", "--keep-header", "Authorization")
    assert refused.code == 2
    assert "--keep-header Authorization: it carries a credential or this source's signature" in refused.err
    assert [s["name"] for s in as_json(cli, "source", "list")] == ["gh"]
