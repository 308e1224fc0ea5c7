"""The dashboard in a real browser (issue 14 §5): Debian's Chromium, driven by
playwright, against `serve`'s app on a free loopback port.

Waits are on what the page shows (playwright's `expect` polls the DOM), never
on time. "Without a reload" is checked with a mark the test leaves on the
page's window: a reload would drop it.
"""

from __future__ import annotations

import html
import json
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from support import signing
from support.browser import REBOUND_NAME, chromium, tab
from support.cli import Result, as_json, invoke
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
def cli(db_path: Path) -> Callable[..., Result]:
    """The command line in this process, on a thread of its own: playwright's sync API keeps
    an event loop running on the test's thread, and a command runs its own (asyncio.run)."""

    def run(*args: str, **options: Any) -> Result:
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(invoke, db_path, *args, **options).result()

    return run


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


def test_a_blocked_todo_shows_what_it_waits_for_and_turns_ready_when_that_is_done(
    signed_in: Page, board: Board, cli
) -> None:
    build = as_json(cli, "todo", "create", "--queue", "builds", "--title", "build")["id"]
    review = as_json(cli, "todo", "create", "--queue", "reviews", "--title", "review", "--after", str(build))["id"]

    signed_in.goto(f"{board.origin}/todos/{review}")
    signed_in.evaluate("window.notReloaded = true")

    expect(signed_in.locator("#title .badge")).to_have_text("blocked", timeout=SEEN)
    waits = signed_in.locator("#dependencies tbody tr")
    expect(waits).to_have_count(1)
    expect(waits).to_contain_text(str(build))
    expect(waits).to_contain_text("pending")
    claimed = as_json(cli, "todo", "claim", str(build))
    done = cli("todo", "complete", str(build), "--token", claimed["lease_token"], "--result", '{"sha": "abc"}')
    assert done.code == 0, done.err
    expect(signed_in.locator("#title .badge")).to_have_text("pending", timeout=SEEN)
    expect(waits).to_contain_text('{"sha": "abc"}')
    assert signed_in.evaluate("window.notReloaded") is True


def test_a_queues_limit_and_how_close_it_is_show_on_its_row_without_a_reload(
    signed_in: Page, board: Board, cli
) -> None:
    for title in ("first", "second"):
        as_json(cli, "todo", "create", "--queue", "deploy", "--title", title)
    expect(signed_in.locator("#live")).to_have_attribute("data-state", "live", timeout=SEEN)
    signed_in.evaluate("window.stillTheSamePage = true")
    row = signed_in.locator('#queues tr[data-queue="deploy"]')

    assert cli("queue", "limit", "deploy", "--max-claimed", "1", "--max-per-minute", "10").code == 0
    expect(row.locator(".badge.limit")).to_have_text(["0/1 claimed", "0/10 a minute"], timeout=SEEN)
    as_json(cli, "todo", "claim", "--queue", "deploy")
    expect(row.locator(".badge.limit")).to_have_text(["1/1 claimed", "1/10 a minute"], timeout=SEEN)
    expect(row.locator('td[data-label="Ready"]')).to_have_text("1")  # the other waits, ready
    assert signed_in.evaluate("window.stillTheSamePage") is True
    assert signed_in.console_errors == []  # type: ignore[attr-defined]


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


def test_a_page_opened_without_the_token_is_refused_until_the_dashboard_s_url_is_opened(
    browser: BrowserContext, board: Board
) -> None:
    browser.clear_cookies()  # the tabs share one profile: no cookie of an earlier test
    tab = browser.new_page()
    try:
        answer = tab.goto(f"{board.origin}/todos")
        assert answer is not None and answer.status == 401
        assert "switchboard-local dashboard" in tab.content()
        tab.goto(board.login_url)
        answer = tab.goto(f"{board.origin}/todos")
        assert answer is not None and answer.status == 200
    finally:
        tab.close()


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


@pytest.fixture
def other_site() -> Iterator[str]:
    """Another origin on this machine (another loopback port): a page the user might have open,
    holding a form that posts to ``?target=``.

    Loopback, so that the browser's own guard for pages of the internet
    reaching local addresses (Private Network Access) does not stop the
    request first: this is about what the dashboard refuses. Another port is
    the same *site*, so the browser even sends the dashboard's SameSite cookie.
    """

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            target = parse_qs(urlsplit(self.path).query).get("target", [""])[0]
            body = (f'<!doctype html><title>another site</title><form method="post" action="{html.escape(target)}" '
                    'enctype="text/plain"><input name="x" value="1"><button>Win a prize</button></form>').encode()
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_post_from_another_origin_is_refused(signed_in: Page, board: Board, cli, other_site: str) -> None:
    github_source(cli, "ci", "builds", "--max-attempts", "1")
    push(board, "ci", "Ship it", "d-5")
    todo_id = claim_and_fail(cli, "builds", "boom")
    target = f"{board.origin}/api/todos/{todo_id}/redrive"
    # The user is signed in (the token's cookie is set) and opens another site, whose form posts to the dashboard.
    signed_in.goto(f"{other_site}/?target={quote(target)}")
    with signed_in.expect_navigation() as navigation:
        signed_in.get_by_role("button", name="Win a prize").click()
    answer = navigation.value
    assert answer is not None and answer.status in (401, 403), answer and answer.status
    # A script of that site cannot post either (CORS stops it at its preflight; nothing is sent).
    signed_in.goto(other_site)
    sent = signed_in.evaluate(
        """async (target) => {
            try {
                await fetch(target, {method: "POST", credentials: "include", body: "{}",
                                     headers: {"Content-Type": "application/json", "X-CSRF-Token": "guess"}});
                return "answered";
            } catch (e) { return "refused"; }
        }""",
        target,
    )
    assert sent == "refused"
    assert as_json(cli, "todo", "show", str(todo_id))["state"] == "failed"
    # The server refuses a POST from another origin even with the token and the CSRF token.
    refused = board.act(f"/api/todos/{todo_id}/redrive", origin=other_site)
    assert refused.status == 403


# ---------------------------------------------------------------- the first paint (issue 28 §4)

ALARMS = {"hot", "bad", "failed"}  # the classes the style sheet paints red


def fetches(page: Page) -> list[str]:
    """The URLs the page's script fetches from now on (its stream aside), as they go out."""
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.resource_type in ("fetch", "xhr") else None)
    return sent


def test_a_page_arrives_with_its_data_and_its_script_fetches_nothing_more_at_load(
    signed_in: Page, board: Board, cli
) -> None:
    github_source(cli, "ci", "builds")
    push(board, "ci", "Fix the flaky test", "d-6")
    # The landing page's own script refetches "/" for that push, at a time of the load's choosing: leave it first.
    signed_in.goto("about:blank")
    sent = fetches(signed_in)

    signed_in.goto(f"{board.origin}/todos")
    expect(signed_in.locator("#todos tbody tr")).to_contain_text("Build Fix the flaky test")
    expect(signed_in.locator("#live")).to_have_attribute("data-state", "live", timeout=SEEN)
    # Something moves: the page fetches itself once for it, and has fetched nothing before.
    assert cli("todo", "create", "--queue", "builds", "--title", "Made while watching").code == 0
    expect(signed_in.locator("#todos tbody")).to_contain_text("Made while watching", timeout=SEEN)
    assert sent == [f"{board.origin}/todos"]
    assert signed_in.console_errors == []  # type: ignore[attr-defined]


def test_the_todos_list_shows_a_todos_owner_as_soon_as_it_is_claimed(signed_in: Page, board: Board, cli) -> None:
    github_source(cli, "ci", "builds")
    push(board, "ci", "Bump the parser", "d-7")
    signed_in.goto(f"{board.origin}/todos")
    expect(signed_in.locator("#live")).to_have_attribute("data-state", "live", timeout=SEEN)
    signed_in.evaluate("window.stillTheSamePage = true")

    claimed = as_json(cli, "todo", "claim", "--queue", "builds", "--owner", "builder-1")

    row = signed_in.locator(f'#todos tr[data-todo="{claimed["id"]}"]')
    expect(row.locator('td[data-label="Owner"]')).to_have_text("builder-1", timeout=SEEN)
    expect(row.locator('td[data-label="State"]')).to_have_text("claimed")
    assert signed_in.evaluate("window.stillTheSamePage") is True


def test_older_todos_are_added_under_the_first_page_which_keeps_its_length_as_it_updates(
    signed_in: Page, board: Board, cli
) -> None:
    for title in ("one", "two", "three"):
        assert cli("todo", "create", "--queue", "chores", "--title", title).code == 0
    signed_in.goto(f"{board.origin}/todos?limit=2")
    expect(signed_in.locator("#live")).to_have_attribute("data-state", "live", timeout=SEEN)
    signed_in.evaluate("window.stillTheSamePage = true")
    titles = signed_in.locator('#todos td[data-label="Title"]')
    expect(titles).to_have_text(["three", "two"])

    signed_in.get_by_role("link", name="Older todos").click()

    expect(titles).to_have_text(["three", "two", "one"], timeout=SEEN)
    expect(signed_in.get_by_role("link", name="Older todos")).to_have_count(0)
    # A new todo comes in on top; the list keeps as many rows as it showed, and offers the one it let go.
    assert cli("todo", "create", "--queue", "chores", "--title", "four").code == 0
    expect(titles).to_have_text(["four", "three", "two"], timeout=SEEN)
    expect(signed_in.get_by_role("link", name="Older todos")).to_have_count(1)
    assert signed_in.evaluate("window.stillTheSamePage") is True
    assert signed_in.url == f"{board.origin}/todos?limit=2"


def test_a_filter_changes_the_address_and_the_rows_without_a_reload(signed_in: Page, board: Board, cli) -> None:
    github_source(cli, "ci", "builds")
    push(board, "ci", "Ship it", "d-8")
    assert cli("todo", "create", "--queue", "chores", "--title", "Water the plants").code == 0
    signed_in.goto(f"{board.origin}/todos")
    signed_in.evaluate("window.stillTheSamePage = true")

    signed_in.locator("select[name=queue]").select_option("chores")

    expect(signed_in).to_have_url(f"{board.origin}/todos?queue=chores", timeout=SEEN)
    expect(signed_in.locator('#todos td[data-label="Title"]')).to_have_text(["Water the plants"], timeout=SEEN)
    assert signed_in.evaluate("window.stillTheSamePage") is True


def test_an_events_body_views_switch_in_place(signed_in: Page, board: Board, cli) -> None:
    github_source(cli, "ci", "builds")
    push(board, "ci", "Bump", "d-9")
    (event,) = as_json(cli, "events", "list", "--source", "ci")
    signed_in.goto(f"{board.origin}/events/{event['id']}")
    expect(signed_in.locator("#body pre")).to_contain_text('"ref": "refs/heads/main"')
    signed_in.evaluate("window.stillTheSamePage = true")

    signed_in.get_by_role("link", name="Hex").click()

    expect(signed_in.locator("#body pre")).to_contain_text("00000000  7b 22 72 65", timeout=SEEN)
    expect(signed_in.get_by_role("link", name="Hex")).to_have_attribute("aria-current", "true")
    assert signed_in.url.endswith("?view=hex")
    assert signed_in.evaluate("window.stillTheSamePage") is True


def test_a_zero_count_stays_quiet_as_the_sources_page_updates(signed_in: Page, board: Board, cli) -> None:
    github_source(cli, "ci", "builds")
    signed_in.goto(f"{board.origin}/sources")
    expect(signed_in.locator("#live")).to_have_attribute("data-state", "live", timeout=SEEN)

    push(board, "ci", "Fix it", "d-10")

    deliveries = signed_in.locator('#sources tr[data-source="ci"] td[data-label="Deliveries"] .badge')
    expect(deliveries.filter(has_text="stored 1")).to_have_count(1, timeout=SEEN)
    for badge in deliveries.all():
        classes = set((badge.get_attribute("class") or "").split())
        if badge.inner_text().endswith(" 0"):
            assert not classes & ALARMS, (badge.inner_text(), classes)
    assert "ok" in (deliveries.filter(has_text="stored 1").get_attribute("class") or "")
