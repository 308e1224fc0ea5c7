"""The broker tests' fixtures: a real redis-server, the `broker` each semantics
test runs on (fakeredis, then a real server), a real nats-server with JetStream,
a real RabbitMQ node, moto's SQS server, a store on the real clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store

from support.nats_server import started_nats_server
from support.rabbitmq_server import started_rabbitmq_server
from support.redis_server import FakeBroker, started_redis_server
from support.sqs_server import started_sqs_server


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked both_backends runs on PostgreSQL against the real redis-server only (fakeredis
    shows nothing more there: the broker's side is the same on either backend)."""
    left_out = [item for item in items if _on_postgres_with_fakeredis(item)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not _on_postgres_with_fakeredis(item)]


def _on_postgres_with_fakeredis(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("backend") == "postgres" and params.get("broker") == "fakeredis"


@pytest.fixture
def redis_server(tmp_path: Path):
    """A real redis-server: for what only a real server shows (INFO, restarts, a killed process)."""
    server = started_redis_server(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def nats_server(tmp_path: Path):
    """A real `nats-server -js` on a free loopback port, its JetStream store in the test's folder."""
    server = started_nats_server(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def sqs_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """moto's SQS server on a free loopback port, with dummy AWS credentials and region in the environment."""
    server = started_sqs_server(tmp_path, monkeypatch)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory):
    """A real RabbitMQ node, one per session: it takes seconds to start. Each test uses queues of its own."""
    server = started_rabbitmq_server(tmp_path_factory.mktemp("rabbitmq"))
    yield server
    server.close()


@pytest.fixture
def rabbitmq_alone(tmp_path: Path):
    """A RabbitMQ node of the test's own: for a test that stops and starts it."""
    server = started_rabbitmq_server(tmp_path / "rabbitmq")
    yield server
    server.close()


@pytest.fixture(params=["fakeredis", "redis-server"])
def broker(request: pytest.FixtureRequest, tmp_path: Path):
    """The Redis semantics tests run twice: on fakeredis (no redis-server needed) and on a real server.

    Hand ``broker.connect`` to what runs the consumers (None for the real
    server: redis-py's own client on ``broker.url``). Where fakeredis differs
    from Redis for a test, that test takes ``redis_server`` and says why.
    One difference every list test meets: fakeredis' BLMOVE does not wait out
    its timeout on an empty list (2.41), so an idle list reader polls without
    pause there; what is stored and acked is the same.
    """
    server = FakeBroker() if request.param == "fakeredis" else started_redis_server(tmp_path)
    yield server
    server.stop()


@pytest.fixture
async def real_store(db_path: Path) -> AsyncIterator[Store]:
    """A store on the real clock: the adapter runs in real time against a real broker."""
    async with await open_store(db_path) as store:
        yield store
