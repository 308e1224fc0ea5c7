"""The dashboard in a real browser (issue 14 §5): Debian's Chromium, driven by
playwright, against `serve`'s app on a free loopback port.

Waits are on what the page shows (playwright's `expect` polls the DOM), never
on time. "Without a reload" is checked with a mark the test leaves on the
page's window: a reload would drop it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from support import signing
from support.browser import REBOUND_NAME, chromium, tab
from support.cli import Result, as_json
from support.dashboard import Board, serving_dashboard

pytestmark = pytest.mark.browser

SECRET = "browser-test-secret"
SEEN = 15_000  # ms playwright waits for what the page must show: generous, never asserted as a time


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    with chromium() as context:
        yield context


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    with tab(browser) as opened:
        yield opened


@pytest.fixture
def board(db_path: Path) -> Iterator[Board]:
    with serving_dashboard(db_path) as running:
        yield running


@pytest.fixture
def signed_in(page: Page, board: Board) -> Page:
    """The tab, after opening the URL `dashboard` prints (it sets the token's cookie and lands on /)."""
    page.goto(board.login_url)
    expect(page).to_have_url(re.compile(rf"^{re.escape(board.origin)}/$"))
    return page


def github_source(cli: Callable[..., Result], name: str, queue: str, *rule: str) -> None:
    assert cli("source", "add", name, "--kind", "github", "--secret", SECRET).code == 0
    added = cli("rule", "add", "--source", name, "--queue", queue, "--title", "Build {head_commit.message}", *rule)
    assert added.code == 0, added.err


def push(board: Board, source: str, message: str, delivery: str) -> None:
    body = json.dumps({"ref": "refs/heads/main", "head_commit": {"id": delivery, "message": message}}).encode()
    headers = {"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery, "Content-Type": "application/json",
               **signing.github(body, SECRET)}  # fmt: skip
    answer = board.receiver.post(source, body, headers)
    assert answer.status == 202, answer.body


def todos_of(cli: Callable[..., Result], queue: str) -> list[dict[str, Any]]:
    return as_json(cli, "todo", "list", "--queue", queue)


def claim_and_fail(cli: Callable[..., Result], queue: str, error: str) -> int:
    claimed = as_json(cli, "todo", "claim", "--queue", queue, "--owner", "builder-1")
    failed = cli("todo", "fail", str(claimed["id"]), "--token", claimed["lease_token"], "--error", error)
    assert failed.code == 0, failed.err
    return claimed["id"]


def test_a_webhook_posted_while_the_queue_page_is_open_appears_without_a_reload(signed_in: Page, board: Board, cli) -> None:
    github_source(cli, "ci", "builds")
    expect(signed_in.locator("#live")).to_have_attribute("data-state", "live", timeout=SEEN)
    signed_in.evaluate("window.stillTheSamePage = true")

    push(board, "ci", "Fix the flaky test", "d-1")

    row = signed_in.locator('#queues tr[data-queue="builds"]')
    expect(row).to_be_visible(timeout=SEEN)
    expect(row.locator('td[data-label="Ready"]')).to_have_text("1", timeout=SEEN)
    assert signed_in.evaluate("window.stillTheSamePage") is True
    assert signed_in.console_errors == []  # type: ignore[attr-defined]


def test_a_todos_page_shows_its_payload_and_its_attempts(signed_in: Page, board: Board, cli) -> None:
    github_source(cli, "ci", "builds")
    push(board, "ci", "Bump the parser", "d-2")
    todo_id = claim_and_fail(cli, "builds", "exit status 2: 3 tests failed")

    signed_in.goto(f"{board.origin}/todos/{todo_id}")

    expect(signed_in.locator("#title")).to_contain_text("Build Bump the parser", timeout=SEEN)
    expect(signed_in.locator("#payload pre")).to_contain_text('"message": "Bump the parser"')
    attempt = signed_in.locator("#attempts tbody tr")
    expect(attempt).to_have_count(1)
    expect(attempt).to_contain_text("builder-1")
    expect(attempt).to_contain_text("exit status 2: 3 tests failed")
    expect(signed_in.locator('#todo a[href^="/events/"]')).to_contain_text("ci · push")


def test_a_payload_is_shown_as_text_never_as_html(signed_in: Page, board: Board, cli) -> None:
    github_source(cli, "ci", "builds")
    push(board, "ci", '<img src=x onerror="window.injected=1"><b>bold</b>', "d-3")
    (todo,) = todos_of(cli, "builds")

    signed_in.goto(f"{board.origin}/todos/{todo['id']}")

    expect(signed_in.locator("#payload pre")).to_contain_text('<img src=x onerror=', timeout=SEEN)
    expect(signed_in.locator("#title")).to_contain_text("<b>bold</b>")
    assert signed_in.locator("main img, main b").count() == 0
    assert signed_in.evaluate("window.injected") is None


def test_redriving_a_dead_letter_from_the_page_makes_it_ready(signed_in: Page, board: Board, cli) -> None:
    github_source(cli, "ci", "builds", "--max-attempts", "1")
    push(board, "ci", "Ship it", "d-4")
    todo_id = claim_and_fail(cli, "builds", "deploy refused: no credentials")
    assert as_json(cli, "todo", "show", str(todo_id))["state"] == "failed"

    signed_in.goto(f"{board.origin}/dead")
    row = signed_in.locator(f'tr[data-todo="{todo_id}"]')
    expect(row).to_be_visible(timeout=SEEN)
    row.get_by_role("button", name="Redrive").click()

    expect(signed_in.locator(".empty-state")).to_contain_text("No dead letters", timeout=SEEN)
    assert as_json(cli, "todo", "show", str(todo_id))["state"] == "pending"
    signed_in.goto(board.origin + "/")
    expect(signed_in.locator('#queues tr[data-queue="builds"] td[data-label="Ready"]')).to_have_text("1", timeout=SEEN)


def test_a_page_reached_under_another_host_name_is_refused(browser: BrowserContext, board: Board) -> None:
    # DNS rebinding: a name the attacker controls, resolved to 127.0.0.1 (the
    # browser maps REBOUND_NAME there), keeps its own Host header.
    tab = browser.new_page()
    try:
        answer = tab.goto(f"http://{REBOUND_NAME}:{board.port}/api/queues")
        assert answer is not None and answer.status == 403
        assert "Host" in tab.content()
    finally:
        tab.close()


def test_a_post_from_another_origin_is_refused(signed_in: Page, board: Board, cli) -> None:
    github_source(cli, "ci", "builds", "--max-attempts", "1")
    push(board, "ci", "Ship it", "d-5")
    todo_id = claim_and_fail(cli, "builds", "boom")
    # The user is signed in (the cookie is set); a page of another site posts to the dashboard.
    attacker = "http://attacker.test/"
    signed_in.route(attacker, lambda route: route.fulfill(status=200, content_type="text/html", body="<title>hi</title>"))
    signed_in.goto(attacker)
    answered: list[int] = []
    signed_in.on("response", lambda r: answered.append(r.status) if r.request.method == "POST" else None)
    statuses = signed_in.evaluate(
        """async (target) => {
            const form = await fetch(target, {method: "POST", mode: "no-cors", credentials: "include",
                                             body: "x=1", headers: {"Content-Type": "text/plain"}});
            let cors;
            try {
                cors = (await fetch(target, {method: "POST", credentials: "include", body: "{}",
                                            headers: {"Content-Type": "application/json", "X-CSRF-Token": "guess"}})).status;
            } catch (e) { cors = "blocked"; }
            return [form.type, cors];
        }""",
        f"{board.origin}/api/todos/{todo_id}/redrive",
    )
    assert statuses[0] == "opaque"  # sent, its answer hidden from the attacker
    assert answered and all(status in (401, 403) for status in answered), answered
    assert as_json(cli, "todo", "show", str(todo_id))["state"] == "failed"
    # And directly: the server refuses a POST whose Origin is another site's, even with the token and CSRF token.
    refused = board.act(f"/api/todos/{todo_id}/redrive", origin="http://attacker.test")
    assert refused.status == 403
