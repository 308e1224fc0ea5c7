"""The adapter supervisor against fakeredis and a real redis-server: it follows the registry and tells the operator.

It runs each enabled queue adapter once (a webhook source is not its to run),
restarts one whose row changed, stops one that was disabled, and says so in
the log; a failure of an adapter's task or of a read of the registry is logged
with its traceback and supervising goes on. Polls are fast here (0.05 s).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3

import pytest

from switchboard_local.brokers import loop
from switchboard_local.brokers import redis as redis_broker
from switchboard_local.brokers.loop import Consumer, Supervisor
from switchboard_local.core import leadership, sources, webhook_config

from support.brokers import Running, add_adapter
from support.sql import run, value

pytestmark = pytest.mark.anyio

POLL = 0.05


class Registry:
    """sources.list_sources as the supervisor calls it: its reads counted, and failing when a test asks
    (reading the registry cannot be made to fail for real while the store keeps working)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        self.failures = 0
        list_sources = sources.list_sources

        async def reading(store, *, family=None):  # noqa: ANN001, ANN202
            self.reads += 1
            if self.failures:
                self.failures -= 1
                raise RuntimeError("the registry cannot be read (fault hook)")
            return await list_sources(store, family=family)

        monkeypatch.setattr(sources, "list_sources", reading)


@pytest.fixture
def registry(monkeypatch) -> Registry:
    return Registry(monkeypatch)


@pytest.fixture
def log(caplog) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="switchboard_local.brokers")
    return caplog


def about(log: pytest.LogCaptureFixture, name: str) -> list[str]:
    """What the log said about adapter ``name``, in order."""
    return [m for m in log.messages if m.startswith(f"adapter {name}:")]


async def test_each_enabled_queue_adapter_is_started_once_and_nothing_else(real_store, broker, db_path, registry,
                                                                         log) -> None:  # fmt: skip
    r = broker.client()
    await sources.add(real_store, "gh", family="webhook", kind="github", trust_mode="github",
                       config=webhook_config.source_config("github", {}), secrets=[{"value": "s"}])  # fmt: skip
    await add_adapter(real_store, broker.url, "stream", "orders")
    await add_adapter(real_store, broker.url, "list", "paused", name="paused")
    await sources.set_enabled(real_store, "paused", False)
    supervisor = Supervisor(real_store, poll=POLL, connect=broker.connect)
    running = Running(real_store, supervisor=supervisor)
    r.xadd("orders", {"n": "1"})
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)
    polls = registry.reads
    await running.until(lambda: registry.reads >= polls + 10, True)  # many polls, nothing changed

    assert sorted(supervisor.running) == ["orders"]
    assert about(log, "orders") == ["adapter orders: started (redis stream 'orders' group switchboard)"]  # once: never restarted
    assert about(log, "gh") == [] and about(log, "paused") == []
    assert [r.getMessage() for r in log.records if r.levelno >= logging.WARNING] == []
    await running.finish()
    assert about(log, "orders")[-1] == "adapter orders: stopped"


async def test_an_adapter_whose_row_changed_is_restarted_with_its_new_config(real_store, broker, db_path,
                                                                             log) -> None:  # fmt: skip
    r = broker.client()
    await add_adapter(real_store, broker.url, "stream", "orders")
    running = Running(real_store, supervisor=Supervisor(real_store, poll=POLL, connect=broker.connect))
    r.xadd("orders", {"n": "1"})
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)

    with contextlib.closing(sqlite3.connect(db_path)) as conn, conn:  # the row edited by hand: another key
        conn.execute("UPDATE sources SET config = json_set(config, '$.key', 'orders-v2'), updated_at = updated_at + 1 "
                     "WHERE name = 'orders'")  # fmt: skip
    r.xadd("orders-v2", {"n": "2"})
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 2)
    await running.finish()
    assert about(log, "orders")[:3] == [
        "adapter orders: started (redis stream 'orders' group switchboard)",
        "adapter orders: stopped",
        "adapter orders: started (redis stream 'orders-v2' group switchboard)",
    ]


async def test_a_disabled_adapter_is_stopped_and_the_log_says_so(real_store, broker, db_path, log) -> None:
    await add_adapter(real_store, broker.url, "list", "jobs", name="jobs")
    supervisor = Supervisor(real_store, poll=POLL, connect=broker.connect)
    running = Running(real_store, supervisor=supervisor)
    await running.until(lambda: sorted(supervisor.running), ["jobs"])
    await sources.set_enabled(real_store, "jobs", False)
    await running.until(lambda: sorted(supervisor.running), [])
    assert about(log, "jobs") == ["adapter jobs: started (redis list 'jobs')", "adapter jobs: stopped"]
    await running.finish()


async def test_an_adapter_task_that_failed_is_logged_with_its_traceback_and_started_again(real_store, broker,
                                                                                          monkeypatch, log) -> None:  # fmt: skip
    runs: list[Consumer] = []

    async def run(self: Consumer) -> None:  # a bug escaping an adapter's loop: no real fault does that
        runs.append(self)
        if len(runs) == 1:
            raise RuntimeError("an adapter's bug (fault hook)")
        await self.stop.wait()

    monkeypatch.setattr(loop.Consumer, "run", run)
    await add_adapter(real_store, broker.url, "stream", "orders")
    running = Running(real_store, supervisor=Supervisor(real_store, poll=POLL, connect=broker.connect))
    await running.until(lambda: len(runs), 2)
    await running.finish()

    assert about(log, "orders")[:4] == [
        "adapter orders: started (redis stream 'orders' group switchboard)",
        "adapter orders: ended with an error",
        "adapter orders: stopped",
        "adapter orders: started (redis stream 'orders' group switchboard)",
    ]
    (failed,) = [r for r in log.records if "ended with an error" in r.getMessage()]
    assert failed.levelno == logging.ERROR and failed.exc_info is not None
    assert "RuntimeError: an adapter's bug (fault hook)" in log.text  # the traceback


async def test_a_failed_read_of_the_registry_is_logged_and_supervising_goes_on(real_store, broker, db_path,
                                                                               registry, log) -> None:  # fmt: skip
    r = broker.client()
    await add_adapter(real_store, broker.url, "stream", "orders")
    registry.failures = 1
    running = Running(real_store, supervisor=Supervisor(real_store, poll=POLL, connect=broker.connect))
    r.xadd("orders", {"n": "1"})
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)
    await running.finish()

    (failed,) = [r for r in log.records if r.levelno >= logging.WARNING]
    assert failed.getMessage() == "adapter supervisor: cannot follow the registry this time"
    assert failed.levelno == logging.ERROR and failed.exc_info is not None
    assert "RuntimeError: the registry cannot be read (fault hook)" in log.text  # the traceback
    assert about(log, "orders")[0] == "adapter orders: started (redis stream 'orders' group switchboard)"


async def test_stopping_the_supervisor_stops_every_adapter_it_runs(real_store, broker, log) -> None:
    await add_adapter(real_store, broker.url, "stream", "orders")
    await add_adapter(real_store, broker.url, "list", "jobs", name="jobs")
    supervisor = Supervisor(real_store, poll=POLL, connect=broker.connect)
    running = Running(real_store, supervisor=supervisor)
    await running.until(lambda: sorted(supervisor.running), ["jobs", "orders"])
    await running.finish()
    assert not supervisor.running
    assert {about(log, name)[-1] for name in ("jobs", "orders")} == {"adapter jobs: stopped", "adapter orders: stopped"}


async def test_the_log_says_what_each_adapter_reads_or_why_it_cannot_say(real_store, broker, db_path, log,
                                                                        monkeypatch) -> None:  # fmt: skip
    await add_adapter(real_store, broker.url, "stream", "orders")
    await add_adapter(real_store, broker.url, "list", "jobs", name="jobs")
    # A row from a later version (or edited by hand): a broker this one does not have.
    run(db_path, "UPDATE sources SET config = json_set(config, '$.broker', 'kafka') WHERE name = 'jobs'")

    def undescribable(config: dict) -> str:
        raise KeyError("key")  # a config its broker cannot describe

    monkeypatch.setattr(redis_broker, "where", undescribable)
    supervisor = Supervisor(real_store, poll=POLL, connect=broker.connect)
    running = Running(real_store, supervisor=supervisor)
    await running.until(lambda: sorted(supervisor.running), ["jobs", "orders"])
    await running.finish()
    assert about(log, "orders")[0] == "adapter orders: started (cannot say (KeyError))"
    assert about(log, "jobs")[0] == "adapter jobs: started (no such broker in this version)"


async def test_the_adapters_store_under_the_supervisors_ingest_lease(real_store, broker, db_path, log) -> None:
    log.set_level(logging.DEBUG, logger="switchboard_local.brokers")
    lease = await leadership.try_lead(real_store, leadership.Candidate("holder-1", 1001, "box", "serve"))
    await add_adapter(real_store, broker.url, "stream", "orders")
    broker.client().xadd("orders", {"n": "1"})
    running = Running(real_store, supervisor=Supervisor(real_store, poll=POLL, connect=broker.connect, lease=lease))
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)
    await running.finish()
    assert f"adapter orders: batch stored under fence {lease.fence}: events [1]" in log.messages
