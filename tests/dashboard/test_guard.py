"""The dashboard's guard (issue 14 §4): each refusal, and what it leaves alone."""

from __future__ import annotations

import json
import stat

import pytest

from switchboard_local.core import access_token

from support.receiver import add_source
from support.signing import github, secret_for

pytestmark = pytest.mark.anyio


async def test_a_forged_host_is_refused(board):
    answer = board.get("/api/queues", headers={"Host": "attacker.example:8787"})
    assert answer.status == 403
    assert "Host" in answer.json()["error"]["message"]


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "[::1]"])
async def test_the_loopback_names_with_the_bound_port_are_accepted(board, name):
    assert board.get("/api/queues", headers={"Host": f"{name}:{board.port}"}).status == 200


async def test_a_loopback_name_on_another_port_is_refused(board):
    assert board.get("/api/queues", headers={"Host": f"localhost:{board.port + 1}"}).status == 403


async def test_webhook_deliveries_keep_arriving_under_any_host(store, board):
    # Providers reach the receiver through tunnels under their own names: the guard leaves /hooks/ alone.
    await add_source(store, "gh", "github", secret=secret_for("github"), queue="triage")
    body = json.dumps({"action": "opened"}).encode()
    headers = {"Host": "abc.tunnel.example", "X-GitHub-Event": "issues", "X-GitHub-Delivery": "d-1",
               "Content-Type": "application/json"} | github(body, secret_for("github"))  # fmt: skip
    assert board.receiver.post("gh", body, headers).status == 202
    assert board.get("/healthz", headers={"Host": "abc.tunnel.example"}).status == 200


async def test_every_dashboard_answer_carries_a_strict_content_security_policy(board):
    for path in ("/", "/api/queues", "/api/todos/999", "/nowhere"):
        answer = board.receiver.request("GET", path)
        csp = answer.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert answer.headers["x-content-type-options"] == "nosniff", path


async def test_json_is_served_as_json_never_as_html(store, board):
    answer = board.get("/api/queues")
    assert answer.headers["content-type"].startswith("application/json")


async def test_the_token_file_is_made_owner_only_beside_the_database(board, db_path):
    path = access_token.token_path(db_path)
    assert path.parent == db_path.parent
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == board.token
