"""A NATS adapter through the real command line and a real nats-server: added by `adapter add --broker
nats`, shown by `status`, `doctor` and the dashboard's sources page with its backlog and guarantee and
no Redis wording, and a token URL (`nats://TOKEN@host`) taken and never shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import as_json
from support.crashes import log, watching
from support.dashboard import serving_dashboard
from support.nats_server import Nats, add_stream, consumer_counts, nats_adapter_args, publish, started_nats_server
from support.receiver import serve_process
from support.sql import rows, value
from support.waits import until

READS = "stream ORDERS subject orders.> durable switchboard"
TOKEN, WRONG = "s3cr3t-t0ken-4242", "wr0ng-t0ken-1717"


@pytest.fixture
def nats(nats_server):
    client = Nats(nats_server.url)
    client.run(add_stream(client.client, "ORDERS", ["orders.>"]))
    yield client
    client.close()


def as_json_any(cli, *args: str):
    """A command's --json output, whatever its exit status (doctor exits 1 while nobody leads ingest)."""
    return json.loads(cli(*args, "--json").out)


def test_status_doctor_and_the_sources_page_show_a_nats_adapter_with_its_backlog_and_guarantee(
    nats_server, nats, cli, db_path: Path
) -> None:
    nats.run(publish(nats.client, "orders.new", [b'{"n": 1}'] * 5))
    added = as_json(cli, *nats_adapter_args("orders", nats_server.url, "ORDERS", subject="orders.>"))
    guarantee = added["guarantee"]
    assert (added["broker"], added["reads"]) == ("nats", READS) and "redelivered after AckWait (30 s)" in guarantee

    (consumer,) = as_json(cli, "status")["consumers"]
    assert (consumer["broker"], consumer["reads"], consumer["guarantee"]) == ("nats", READS, guarantee)
    assert (consumer["waiting"], consumer["unacked"], consumer["lag_error"]) == (5, 0, None)
    status = cli("status").out
    assert f"orders: nats {READS}; {guarantee}" in status and "redis" not in status.lower()
    check = {c["name"]: c for c in as_json_any(cli, "doctor")["checks"]}["adapter orders"]
    assert check["detail"] == (f"{nats_server.url} nats {READS}: reachable; 5 waiting, 0 read but not acked "
                               "(no consumer 'switchboard' yet; serve creates it)")  # fmt: skip
    assert "redis" not in json.dumps(check).lower()

    with serving_dashboard(db_path) as board:  # serve: its consumers, and the dashboard beside them
        until(lambda: value(db_path, "SELECT count(*) FROM events WHERE source = 'orders'"), 5)
        until(lambda: nats.run(consumer_counts(nats.client, "ORDERS")), (0, 0))
        (row,) = board.get_json("/api/adapters")["items"]
        assert (row["broker"], row["reads"], row["guarantee"], row["waiting"], row["unacked"]) == (
            "nats", READS, guarantee, 0, 0)  # fmt: skip
        page = board.get("/sources").body.decode()
        (served,) = as_json(cli, "status")["consumers"]
    assert guarantee in page and READS.replace(">", "&gt;") in page and "redis" not in page.lower()
    assert (served["waiting"], served["unacked"], served["lag_error"]) == (0, 0, None)


def test_a_token_url_is_taken_and_its_token_is_never_shown_or_logged(tmp_path: Path, cli, db_path: Path) -> None:
    server = started_nats_server(tmp_path / "nats", token=TOKEN)
    url, wrong = (f"nats://{t}@127.0.0.1:{server.port}" for t in (TOKEN, WRONG))
    nats = Nats(url)
    try:
        nats.run(add_stream(nats.client, "ORDERS", ["orders.>"]))
        nats.run(publish(nats.client, "orders.new", [b'{"n": 1}', b'{"n": 2}', b'{"n": 3}']))
        said = [cli(*nats_adapter_args("orders", url, "ORDERS")),
                cli(*nats_adapter_args("denied", wrong, "ORDERS", durable="other"))]  # fmt: skip
        assert [r.code for r in said] == [0, 0], [r.err for r in said]
        with serve_process(db_path, env={"SWITCHBOARD_LOG_LEVEL": "DEBUG"}) as serve:
            until(
                lambda: value(db_path, "SELECT count(*) FROM events WHERE source = 'orders'"), 3, **watching(serve)
            )  # the token works
            failures = "SELECT consecutive_failures FROM sources WHERE name = 'denied'"
            until(lambda: value(db_path, failures), lambda n: n >= 1, **watching(serve))
            for args in (("adapter", "show", "orders"), ("adapter", "show", "denied", "--json"),
                         ("adapter", "list", "--json"), ("adapter", "status"), ("adapter", "status", "--json"),
                         ("status",), ("status", "--json"), ("doctor",), ("doctor", "--json")):  # fmt: skip
                said.append(cli(*args))
            assert serve.stop() == 0, log(serve)
        with serving_dashboard(db_path) as board:
            pages = [board.get("/sources").body.decode(), json.dumps(board.get_json("/api/adapters"))]
    finally:
        nats.close()
        server.stop()

    shown = [r.out + r.err for r in said] + pages + serve.lines  # the database keeps the URL (owner-only)
    assert f"nats://****@127.0.0.1:{server.port}" in said[2].out  # adapter show: the URL, its token masked
    (last_error,) = rows(db_path, "SELECT last_error FROM sources WHERE name = 'denied'")[0]
    assert "authorization" in last_error.lower()
    for text in [*shown, last_error]:
        assert TOKEN not in text and WRONG not in text
