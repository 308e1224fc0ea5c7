"""A broker is a plug-in: one module and one line in ``registry.MODULES`` (issue 30, §1).

Every registered broker keeps the registry's contract; a broker written to
that contract alone (support/fake_broker.py, one line added to MODULES) is
added, shown, consumed, probed, checked and installed for like Redis, with
nothing else changed; `adapter add` takes each broker's options from its
entry and refuses another broker's; a row stored before there were several
brokers is Redis.
"""

from __future__ import annotations

import inspect
import json

import pytest

from switchboard_local.brokers.registry import BROKERS, SHARED
from switchboard_local.core import adapters, sources
from switchboard_local.core.adapters import Backlog, Option

from support import fake_broker
from support.brokers import Running
from support.cli import as_json
from support.dashboard import serving_dashboard
from support.sql import rows, run, value
from support.waits import until

pytestmark = pytest.mark.anyio


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    """The fake broker, registered by the one line a broker adds."""
    fake_broker.register(monkeypatch)  # registry.MODULES["fake"] = "support.fake_broker"
    yield fake_broker
    fake_broker.reset()


@pytest.mark.parametrize("name", BROKERS.names())
def test_every_registered_broker_keeps_the_whole_contract(name: str) -> None:
    entry = BROKERS.get(name)
    module = entry.module
    assert module.NAME == name and entry.name == name
    assert isinstance(module.DESCRIPTION, str) and module.DESCRIPTION and "\n" not in module.DESCRIPTION
    assert all(isinstance(o, Option) for o in module.OPTIONS)
    assert not {o.name for o in module.OPTIONS} & set(SHARED), "a broker's own options never shadow the shared ones"
    for function in ("configure", "guarantee", "where", "env"):
        assert callable(getattr(module, function)), function
    assert inspect.iscoroutinefunction(module.probe)
    assert module.Reader.faults and all(issubclass(f, BaseException) for f in module.Reader.faults)
    assert callable(module.Reader)


def test_the_default_broker_is_redis_and_comes_first() -> None:
    assert BROKERS.default == "redis" and BROKERS.names()[0] == "redis"


def test_an_unknown_broker_is_refused_naming_the_known_ones(cli) -> None:
    code, _, err, _ = cli("adapter", "add", "orders", "--broker", "carrier-pigeon", "--url", "redis://h")
    assert code == 2 and "carrier-pigeon" in err and "redis" in err
    assert json.loads(cli("adapter", "list", "--json").out) == []


def test_a_broker_is_one_module_and_one_registry_line(fake, cli, db_path) -> None:
    """The fake broker is registered by MODULES' one line, and every part of the program serves it."""
    added = as_json(cli, "adapter", "add", "feed", "--broker", "fake", "--url", "fake://local", "--topic", "news")
    assert (added["broker"], added["kind"], added["config"]["broker"]) == ("fake", "fake", "fake")
    assert (added["config"]["topic"], added["config"]["window"], added["config"]["batch"]) == ("news", 10, 8)
    assert (added["guarantee"], added["reads"]) == (fake.GUARANTEE, "topic 'news'")
    shown = cli("adapter", "show", "feed").out
    assert shown.startswith("adapter feed: fake topic 'news' (enabled)") and fake.GUARANTEE in shown
    assert "Redis" not in shown and "redis" not in shown
    for i in range(3):
        fake.publish("news", f"m{i}", json.dumps({"n": i}).encode())

    (consumer,) = as_json(cli, "status")["consumers"]
    assert (consumer["broker"], consumer["waiting"], consumer["unacked"], consumer["lag_error"]) == ("fake", 3, 0, None)
    assert consumer["guarantee"] == fake.GUARANTEE
    checks = {c["name"]: c for c in as_json_any(cli, "doctor")["checks"]}  # exits 1: nobody leads ingest yet
    assert checks["adapter feed"]["detail"] == "fake://local fake topic 'news': reachable; 3 waiting, 0 read but not acked"

    with serving_dashboard(db_path) as board:  # serve: its consumers, and the dashboard beside them
        until(lambda: fake.counts("news"), (0, 0, 3))
        (row,) = board.get_json("/api/adapters")["items"]
        assert (row["broker"], row["reads"], row["guarantee"], row["waiting"], row["unacked"]) == (
            "fake", "topic 'news'", fake.GUARANTEE, 0, 0)  # fmt: skip
        page = board.get("/sources").body.decode()
        assert fake.GUARANTEE in page and "topic &#39;news&#39;" in page and "Redis" not in page
    keys = [r[0] for r in rows(db_path, "SELECT idempotency_key FROM todos ORDER BY id")]
    assert keys == [f"event:feed:m{i}:default" for i in range(3)]  # the one form of derived key
    assert value(db_path, "SELECT count(*) FROM events WHERE source = 'feed'") == 3


def test_an_unreachable_broker_fails_doctor_with_its_entry_s_fix(fake, cli) -> None:
    as_json(cli, "adapter", "add", "feed", "--broker", "fake", "--url", "fake://down", "--topic", "news")
    check = {c["name"]: c for c in as_json_any(cli, "doctor")["checks"]}["adapter feed"]
    assert check["status"] == "fail" and check["detail"].endswith("unreachable (connection refused)")
    assert check["fix"] == "start the fake broker, or re-add feed with the right --url"
    (consumer,) = as_json(cli, "status")["consumers"]
    assert consumer["lag_error"] == "unreachable (connection refused)"


def as_json_any(cli, *args: str):
    """A command's --json output, whatever its exit status (doctor exits 1 on a failed check)."""
    return json.loads(cli(*args, "--json").out)


def test_an_option_of_another_broker_is_refused_naming_its_broker(fake, cli) -> None:
    code, _, err, _ = cli("adapter", "add", "orders", "--url", "redis://h", "--mode", "list", "--key", "k",
                          "--topic", "news")  # fmt: skip
    assert code == 2 and "--topic is an option of --broker fake, not of redis" in err
    code, _, err, _ = cli("adapter", "add", "feed", "--broker", "fake", "--url", "fake://local", "--topic", "news",
                          "--mode", "list")  # fmt: skip
    assert code == 2 and "--mode is an option of --broker redis, not of fake" in err
    code, _, err, _ = cli("adapter", "add", "feed", "--broker", "fake", "--redis-url", "redis://h", "--topic", "news")
    assert code == 2 and "--redis-url is an option of --broker redis, not of fake" in err
    assert json.loads(cli("adapter", "list", "--json").out) == []


def test_a_required_option_of_the_chosen_broker_is_named_when_missing(fake, cli) -> None:
    code, _, err, _ = cli("adapter", "add", "feed", "--broker", "fake", "--url", "fake://local")
    assert code == 2 and err.startswith("switchboard-local: invalid_argument: missing option '--topic'")


def test_each_broker_s_options_are_in_adapter_add_s_help_under_its_name(fake, cli) -> None:
    shown = " ".join(cli("adapter", "add", "--help").out.split())
    assert "--topic TEXT fake: the topic to read." in shown
    assert "--key TEXT redis: the stream, list or channel. [required]" in shown
    assert "fake" in BROKERS.names() and f"--broker [{'|'.join(BROKERS.names())}]" in shown  # the fake too


def test_the_url_is_kept_masked_or_read_from_the_variable_named(cli) -> None:
    code, out, err, _ = cli("adapter", "add", "orders", "--url", "redis://:hunter2@127.0.0.1:6399/0", "--mode", "list",
                            "--key", "k", "--json")  # fmt: skip
    assert code == 0 and "hunter2" not in out + err
    assert json.loads(out)["config"]["url"] == "redis://:****@127.0.0.1:6399/0"
    code, out, err, _ = cli("adapter", "add", "jobs", "--url-env", "JOBS_URL", "--mode", "list", "--key", "k",
                            env={"JOBS_URL": None})  # fmt: skip
    assert code == 0 and "$JOBS_URL is not set here" in err
    assert "url          from $JOBS_URL" in cli("adapter", "show", "jobs").out
    code, _, err, _ = cli("adapter", "add", "both", "--url", "redis://h", "--redis-url", "redis://h", "--mode", "list",
                          "--key", "k")  # fmt: skip
    assert code == 2 and "they are the same option" in err
    code, _, err, _ = cli("adapter", "add", "none", "--mode", "list", "--key", "k")
    assert code == 2 and "give exactly one of --url and --url-env" in err


async def test_an_adapter_stored_without_a_broker_is_redis(real_store, broker, db_path) -> None:
    """A row as versions before the registry stored it (no "broker"): Redis, and consumed as such."""
    config = {"url": broker.url, "mode": "list", "key": "jobs", "batch": 8}
    adapter = await sources.add(real_store, "jobs", family="queue", kind="redis", trust_mode="queue", config=config)
    assert BROKERS.of(adapter).name == "redis"
    assert adapters.describe(adapter, BROKERS)["reads"] == "list 'jobs'"
    broker.client().rpush("jobs", b'{"n": 1}')
    running = Running(real_store, adapter, connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)
    await running.finish()


async def test_a_backlog_is_never_asked_where_the_url_is_missing(fake) -> None:
    source = sources.Source(
        name="feed", family="queue", kind="fake", trust_mode="queue", enabled=True,
        config={"broker": "fake", "url_env": "FEED_URL", "topic": "news", "batch": 8}, secrets=[],
        created_at=0, updated_at=0, last_poll_at=None, last_error=None, consecutive_failures=0, messages_stored=0,
    )  # fmt: skip
    said = await adapters.backlog(source, BROKERS, env={})
    assert said == {"waiting": None, "unacked": None, "lag_error": "$FEED_URL is not set here", "lag_note": None}
    assert await BROKERS.get("fake").probe(source.config, {"FEED_URL": "fake://local"}, 1.0) == Backlog(
        reachable=True, waiting=0, unacked=0)  # fmt: skip


def test_an_adapter_of_a_broker_this_version_lacks_is_still_shown_and_doctor_names_it(cli, db_path) -> None:
    as_json(cli, "adapter", "add", "orders", "--url", "redis://127.0.0.1:6399/0", "--mode", "list", "--key", "k")
    run(db_path, "UPDATE sources SET config = json_set(config, '$.broker', 'carrier')")  # a later version's broker
    (listed,) = as_json(cli, "adapter", "list")
    assert (listed["broker"], listed["guarantee"]) == ("carrier", "unknown: no broker 'carrier' in this version")
    assert cli("adapter", "show", "orders").out.startswith("adapter orders: carrier (enabled)")
    check = {c["name"]: c for c in as_json_any(cli, "doctor")["checks"]}["adapter orders"]
    assert check["status"] == "fail" and "its broker 'carrier' is not one this switchboard-local runs" in check["detail"]
