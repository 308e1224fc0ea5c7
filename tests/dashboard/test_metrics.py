"""/metrics (issue 14 §3): Prometheus' text format, with the names docs/guide/dashboard.md lists."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from switchboard_local.core import queues, todos
from switchboard_local.core.todo_model import NewTodo

from support.receiver import add_source
from support.signing import github, secret_for

pytestmark = pytest.mark.anyio

NAMES = {
    "switchboard_todos": "gauge",
    "switchboard_queue_oldest_ready_age_seconds": "gauge",
    "switchboard_queue_paused": "gauge",
    "switchboard_queue_max_claimed": "gauge",
    "switchboard_queue_max_per_minute": "gauge",
    "switchboard_queue_claims_last_minute": "gauge",
    "switchboard_dead_letters": "gauge",
    "switchboard_deliveries": "counter",
    "switchboard_source_events": "gauge",
    "switchboard_adapter_consecutive_failures": "gauge",
    "switchboard_adapter_lag_messages": "gauge",
    "switchboard_adapter_unacked_messages": "gauge",
    "switchboard_claim_latency_seconds": "histogram",
    "switchboard_commit_latency_seconds": "histogram",
    "switchboard_group_commit_size": "histogram",
}


def scrape(board) -> dict:
    answer = board.get("/metrics")
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(answer.body.decode())}


def value(family, **labels) -> float:
    (found,) = [s.value for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())
                and s.name == family.name + ("_total" if family.type == "counter" else "")]  # fmt: skip
    return found


async def test_metrics_serve_every_documented_name_with_its_type(board):
    found = scrape(board)
    for name, kind in NAMES.items():
        assert name in found and found[name].type == kind, name


async def test_a_limited_queue_has_its_limits_and_its_last_minute(store, board):
    await queues.set_limit(store, "deploy", max_claimed=2, max_per_minute=30, by="op")
    await todos.create(store, NewTodo(queue="deploy", title="a"))
    await todos.claim_next(store, owner="w", queues=["deploy"])
    await todos.create(store, NewTodo(queue="plain", title="b"))
    found = scrape(board)
    assert value(found["switchboard_queue_max_claimed"], queue="deploy") == 2
    assert value(found["switchboard_queue_max_per_minute"], queue="deploy") == 30
    assert value(found["switchboard_queue_claims_last_minute"], queue="deploy") == 1
    assert value(found["switchboard_todos"], queue="deploy", state="claimed") == 1
    assert [s for s in found["switchboard_queue_max_claimed"].samples if s.labels["queue"] == "plain"] == []


async def test_todos_are_counted_by_queue_and_state(store, board):
    await todos.create(store, NewTodo(queue="triage", title="a"))
    await todos.create(store, NewTodo(queue="triage", title="b", delay=600))
    found = scrape(board)
    assert value(found["switchboard_todos"], queue="triage", state="ready") == 1
    assert value(found["switchboard_todos"], queue="triage", state="delayed") == 1
    assert value(found["switchboard_dead_letters"], queue="triage") == 0


async def test_deliveries_are_counted_by_source_and_outcome(store, board):
    await add_source(store, "gh", "github", secret=secret_for("github"), queue="triage")
    body = json.dumps({"action": "opened"}).encode()
    signed = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "d-1", "Content-Type": "application/json"}
    assert board.receiver.post("gh", body, signed | github(body, secret_for("github"))).status == 202
    assert board.receiver.post("gh", body, signed | github(body, secret_for("github"))).status == 202
    assert board.receiver.post("gh", body, signed | {"X-Hub-Signature-256": "sha256=" + "0" * 64}).status == 401
    deliveries = scrape(board)["switchboard_deliveries"]
    assert value(deliveries, source="gh", outcome="stored") == 1
    assert value(deliveries, source="gh", outcome="duplicate") == 1
    assert value(deliveries, source="gh", outcome="unverified") == 1


async def test_the_commit_histogram_counts_the_server_s_own_commits(store, board):
    await add_source(store, "gh", "github", secret=secret_for("github"), queue="triage")
    body = b"{}"
    signed = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "d-9", "Content-Type": "application/json"}
    assert board.receiver.post("gh", body, signed | github(body, secret_for("github"))).status == 202
    commits = scrape(board)["switchboard_commit_latency_seconds"]
    count = [s.value for s in commits.samples if s.name.endswith("_count")]
    assert count and count[0] >= 1
