"""The dashboard's guard (issue 14 §4): each refusal, and what it leaves alone."""

from __future__ import annotations

import http.client
import json
import stat

import pytest

from switchboard_local.core import access_token, todos
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease
from switchboard_local.dashboard.guard import Policy

from support.dashboard import serving_dashboard
from support.receiver import add_source
from support.signing import github, secret_for
from support.sql import rows

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
        answer = board.get(path)
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


# ---------------------------------------------------------------- actions: token, CSRF, same origin


async def dead_letter(store) -> int:
    made, _ = await todos.create(store, NewTodo(queue="triage", title="doomed", max_attempts=1))
    claimed = await todos.claim(store, made.id, owner="w")
    await todos.fail(store, Lease.of(claimed), error="boom")
    return made.id


def still_dead(db_path, todo_id: int) -> bool:
    return rows(db_path, "SELECT state FROM todos WHERE id = ?", (todo_id,)) == [("failed",)]


async def test_an_action_without_the_token_is_refused_and_changes_nothing(store, board, db_path):
    todo_id = await dead_letter(store)
    answer = board.act(f"/api/todos/{todo_id}/redrive", token=None)
    assert answer.status == 401 and answer.json()["error"]["code"] == "unauthorized"
    assert still_dead(db_path, todo_id)


async def test_an_action_with_a_wrong_token_is_refused(store, board, db_path):
    todo_id = await dead_letter(store)
    assert board.act(f"/api/todos/{todo_id}/redrive", token="x" * 43).status == 401
    assert still_dead(db_path, todo_id)


@pytest.mark.parametrize("csrf", [None, "0" * 64])
async def test_an_action_without_the_right_csrf_token_is_refused(store, board, db_path, csrf):
    todo_id = await dead_letter(store)
    answer = board.act(f"/api/todos/{todo_id}/redrive", csrf=csrf)
    assert answer.status == 403 and "CSRF" in answer.json()["error"]["message"]
    assert still_dead(db_path, todo_id)


async def test_a_cross_origin_post_is_refused(store, board, db_path):
    todo_id = await dead_letter(store)
    answer = board.act(f"/api/todos/{todo_id}/redrive", origin="https://attacker.example")
    assert answer.status == 403 and "origin" in answer.json()["error"]["message"]
    assert still_dead(db_path, todo_id)


async def test_a_cross_site_fetch_is_refused_even_with_a_matching_origin(store, board, db_path):
    todo_id = await dead_letter(store)
    answer = board.act(f"/api/todos/{todo_id}/redrive", headers={"sec-fetch-site": "cross-site"})
    assert answer.status == 403
    assert still_dead(db_path, todo_id)


async def test_a_post_under_a_forged_host_is_refused_before_anything_else(store, board, db_path):
    todo_id = await dead_letter(store)
    forged = {"host": "rebound.example", "origin": "http://rebound.example"}
    assert board.act(f"/api/todos/{todo_id}/redrive", headers=forged).status == 403
    assert still_dead(db_path, todo_id)


# ---------------------------------------------------------------- the browser's way in: ?token=, the cookie


def login(board, query: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", board.port, timeout=10)
    conn.request("GET", f"/todos?{query}")
    answer = conn.getresponse()
    answer.read()
    conn.close()
    return answer.status, {k.lower(): v for k, v in answer.getheaders()}


async def test_the_token_in_the_url_becomes_a_cookie_and_leaves_the_address_bar(board):
    status, headers = login(board, f"queue=triage&token={board.token}")
    assert status == 303 and headers["location"] == "/todos?queue=triage"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"switchboard_token_{board.port}={board.token};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie


async def test_a_wrong_token_in_the_url_is_refused(board):
    status, headers = login(board, "token=wrong")
    assert status == 401 and "set-cookie" not in headers


async def test_the_page_acts_with_its_cookie_and_the_csrf_token_from_the_session(store, board, db_path):
    todo_id = await dead_letter(store)
    cookie = {"cookie": f"switchboard_token_{board.port}={board.token}"}
    assert board.get("/api/session", token=None).status == 401  # no token: no CSRF token either
    session = board.get_json("/api/session", headers=cookie, token=None)
    answer = board.act(f"/api/todos/{todo_id}/redrive", token=None, csrf=session["csrf_token"], headers=cookie)
    assert answer.status == 200
    assert not still_dead(db_path, todo_id)


@pytest.mark.parametrize(
    "others",
    [
        "theme=dark mode; {ours}",  # a space in a value: SimpleCookie gave up here
        "{ours}; theme=dark mode",
        'a="unterminated; {ours}',
        "flag; ;=; {ours}; b=\\x01",
        "{ours}; switchboard_token_{port}=a-stale-one",  # the same name, set by another page: ours still counts
    ],
)
async def test_a_malformed_foreign_cookie_cannot_hide_the_dashboard_token(board, others):
    # A browser sends a host's cookies to every port of it: any local page can set one beside ours.
    cookie = others.format(ours=f"switchboard_token_{board.port}={board.token}", port=board.port)
    assert board.get("/api/session", headers={"cookie": cookie}, token=None).status == 200


# ---------------------------------------------------------------- reads need the token, on loopback too

READS = ["/", "/todos", "/todos/1", "/events", "/dead", "/sources", "/static/dashboard.js", "/api/queues",
         "/api/todos", "/api/todos/1", "/api/events", "/api/sources", "/api/adapters", "/api/dead",
         "/api/stream", "/metrics", "/nowhere"]  # fmt: skip


async def test_every_dashboard_read_needs_the_token_on_loopback_too(store, board):
    # On loopback every local account can connect: what the pages show is the owner-only database's.
    made, _ = await todos.create(store, NewTodo(queue="triage", title="secret plans", payload={"card": "4111-1111"}))
    for path in READS:
        for refused in ({}, {"authorization": "Bearer " + "x" * 43}, {"cookie": f"switchboard_token_{board.port}=x"}):
            answer = board.get(path.replace("/1", f"/{made.id}"), headers=refused, token=None)
            assert answer.status == 401, (path, refused, answer.status)
            assert answer.headers["www-authenticate"] == "Bearer" and answer.headers["connection"] == "close"
            assert b"4111" not in answer.body and b"secret plans" not in answer.body
    assert board.get_json(f"/api/todos/{made.id}")["payload"] == {"card": "4111-1111"}
    cookie = {"cookie": f"switchboard_token_{board.port}={board.token}"}
    assert board.get_json(f"/api/todos/{made.id}", headers=cookie, token=None)["title"] == "secret plans"


async def test_metrics_take_the_token_as_prometheus_sends_it_from_a_credentials_file(board, db_path):
    # Prometheus' `authorization: {type: Bearer, credentials_file: …}` sends the file's text, trimmed.
    credentials = access_token.token_path(db_path).read_text().strip()
    assert board.get("/metrics", token=None).status == 401
    answer = board.get("/metrics", headers={"authorization": f"Bearer {credentials}"}, token=None)
    assert answer.status == 200 and b"switchboard_todos" in answer.body


# ---------------------------------------------------------------- bound beyond loopback


async def test_beyond_loopback_every_dashboard_request_needs_the_token(store, db_path):
    with serving_dashboard(db_path, host="0.0.0.0") as board:
        assert board.get("/api/queues", token=None).status == 401
        assert board.get("/metrics", token=None).status == 401
        assert board.get("/api/queues", headers={"authorization": f"Bearer {board.token}"}).status == 200
        # a wildcard bind cannot know the machine's names: any Host passes, the token guards
        reached_as = {"authorization": f"Bearer {board.token}", "host": "my-laptop.lan:8787"}
        assert board.get("/api/queues", headers=reached_as).status == 200
        assert board.get("/healthz").status == 200  # the receiver's paths stay the receiver's


def test_the_host_check_knows_the_bound_address_and_the_loopback_names():
    policy = Policy(host="192.168.1.5", port=8787, token="t" * 43)
    assert policy.host_allowed("192.168.1.5:8787") and policy.host_allowed("LOCALHOST:8787")
    assert not policy.host_allowed("192.168.1.5:80") and not policy.host_allowed(None)
    assert Policy(host="::1", port=80, token="t" * 43).host_allowed("[::1]")
