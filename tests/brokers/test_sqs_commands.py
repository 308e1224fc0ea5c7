"""An SQS adapter as the commands and the dashboard show it, against moto's server: added by
`adapter add --broker sqs`, then its backlog (approximate, and said to be), what it reads and its
guarantee in `adapter show`, `status`, `doctor` and the sources page, in no other broker's words.

A message received by the test's own client, and kept hidden, is the one in flight: SQS counts it
not visible, which every view shows as read but not acked.
"""

from __future__ import annotations

import json

from switchboard_local.brokers import sqs

from support.cli import as_json
from support.dashboard import serving_dashboard
from support.sqs_server import add_sqs_adapter

NOTE = "approximate: SQS's counts are eventually consistent"


def test_status_doctor_and_the_sources_page_show_an_sqs_adapter_s_approximate_backlog_and_its_guarantee(
    sqs_server, cli, db_path
) -> None:
    url = sqs_server.create_queue("orders")
    added = add_sqs_adapter(db_path, sqs_server, url)
    reads = f"queue orders at {url}, endpoint {sqs_server.endpoint}"
    guarantee = sqs.guarantee(added["config"])
    assert (added["broker"], added["kind"], added["reads"], added["guarantee"]) == ("sqs", "sqs", reads, guarantee)
    client = sqs_server.client()
    for n in range(3):
        client.send_message(QueueUrl=url, MessageBody=json.dumps({"n": n}))
    taken = client.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=600)["Messages"]
    assert len(taken) == 1 and sqs_server.counts(url) == (2, 1)

    shown = cli("adapter", "show", "orders").out
    assert shown.startswith(f"adapter orders: sqs {reads} (enabled)\n") and guarantee in shown
    assert "  url " not in shown  # it takes no --url: no empty line for one
    assert f"  {'queue url':<18} {url}\n" in shown and f"  {'visibility timeout':<18} 60\n" in shown  # aligned

    (consumer,) = as_json(cli, "status")["consumers"]
    assert (consumer["broker"], consumer["reads"], consumer["guarantee"]) == ("sqs", reads, guarantee)
    assert (consumer["waiting"], consumer["unacked"], consumer["lag_error"], consumer["lag_note"]) == (2, 1, None, NOTE)
    status = cli("status").out
    assert "2 (+1 unacked)" in status and f"  orders: sqs {reads}; {guarantee}; backlog ({NOTE})" in status

    doctor = cli("doctor", "--json")  # exits 1: nobody leads ingest yet
    check = {c["name"]: c for c in json.loads(doctor.out)["checks"]}["adapter orders"]
    assert (check["status"], check["fix"]) == ("ok", None)
    assert check["detail"] == f"sqs {reads}: reachable; 2 waiting, 1 read but not acked ({NOTE})"

    assert cli("adapter", "disable", "orders").code == 0  # serve leaves it be: its backlog stays as it is
    with serving_dashboard(db_path) as board:
        (row,) = board.get_json("/api/adapters")["items"]
        page = board.get("/sources").body.decode()
    assert (row["broker"], row["reads"], row["guarantee"]) == ("sqs", reads, guarantee)
    assert (row["waiting"], row["unacked"], row["lag_error"], row["lag_note"]) == (2, 1, None, NOTE)
    assert guarantee in page and reads in page and NOTE.replace("'", "&#39;") in page

    for said in (shown, status, cli("doctor").out, page):
        assert "redis" not in said.lower()  # no other broker's words
