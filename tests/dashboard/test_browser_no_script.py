"""The dashboard in a real browser with JavaScript turned off (issue 28 §4): every page shows
its data from its first paint, as a reader without the script (or before it loads, or a
headless screenshot) sees it. Debian's Chromium, driven by playwright, as in test_browser.py.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from switchboard_local.core import events, todos
from switchboard_local.core.events import NewEvent
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support.browser import chromium, tab
from support.dashboard import Board, serving_dashboard
from support.receiver import add_source
from support.signing import secret_for

pytestmark = pytest.mark.browser

T = TypeVar("T")


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    with chromium(javascript=False) as context:
        yield context


@pytest.fixture
def board(db_path: Path) -> Iterator[Board]:
    with serving_dashboard(db_path) as running:
        yield running


@pytest.fixture
def signed_in(browser: BrowserContext, board: Board) -> Iterator[Page]:
    """A tab without script, after opening the URL `dashboard` prints (the server sets the cookie and redirects)."""
    with tab(browser) as page:
        page.goto(board.login_url)
        expect(page).to_have_url(re.compile(rf"^{re.escape(board.origin)}/$"))
        yield page


def on_the_file(db_path: Path, work: Callable[[Store], Awaitable[T]]) -> T:
    """``work`` on the database, on a thread of its own (playwright's sync API keeps a loop on this one)."""

    async def run() -> T:
        store = await open_store(db_path)
        try:
            return await work(store)
        finally:
            await store.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


async def a_morning(store: Store) -> dict[str, Any]:
    """A claimed todo with an owner, one without payload, a dead letter, an event and its todo, a source."""
    await add_source(store, "ci", "github", secret=secret_for("github"), queue="builds")
    held, _ = await todos.create(store, NewTodo(queue="builds", title="Build the parser", payload={"ref": "main"}))
    await todos.claim(store, held.id, owner="builder-1")
    bare, _ = await todos.create(store, NewTodo(queue="builds", title="Tidy the cache"))
    doomed, _ = await todos.create(store, NewTodo(queue="deploy", title="Ship it", max_attempts=1))
    claimed = await todos.claim(store, doomed.id, owner="deployer")
    await todos.fail(store, Lease.of(claimed), error="deploy refused: no credentials")
    new = NewEvent(source="ci", family="webhook", type="push", external_id="delivery-9", trust_mode="github",
                   verified=True, verify_detail="sha256 signature", content_type="application/json",
                   headers={"x-github-event": "push"}, body=b'{"ref": "refs/heads/main"}')  # fmt: skip
    (ingested,) = await events.ingest_many(store, [(new, [NewTodo(queue="review", title="Review the push")])])
    return {"held": held.id, "bare": bare.id, "doomed": doomed.id, "event": ingested.event_id}


def test_without_javascript_every_page_shows_its_data(signed_in: Page, board: Board, db_path: Path) -> None:
    made = on_the_file(db_path, a_morning)
    o = board.origin

    signed_in.goto(f"{o}/")
    expect(signed_in.locator('#queues tr[data-queue="builds"] td[data-label="Claimed"]')).to_have_text("1")
    expect(signed_in.locator("#live")).to_be_hidden()  # the page's script would show it: none runs
    expect(signed_in.locator('#queues tr[data-queue="deploy"] td[data-label="Dead"]')).to_have_text("1")
    expect(signed_in.locator(f'#events tr[data-event="{made["event"]}"]')).to_contain_text("push")

    signed_in.goto(f"{o}/todos")
    row = signed_in.locator(f'#todos tr[data-todo="{made["held"]}"]')
    expect(row.locator('td[data-label="Title"]')).to_have_text("Build the parser")
    expect(row.locator('td[data-label="Owner"]')).to_have_text("builder-1")

    signed_in.goto(f"{o}/todos/{made['held']}")
    expect(signed_in.locator("#title")).to_contain_text("Build the parser")
    expect(signed_in.locator("#payload pre")).to_contain_text('"ref": "main"')

    signed_in.goto(f"{o}/todos/{made['bare']}")
    expect(signed_in.locator("#payload .absent")).to_have_text("no payload")
    expect(signed_in.locator("#payload")).not_to_contain_text("null")

    signed_in.goto(f"{o}/events/{made['event']}")
    expect(signed_in.locator("#title")).to_have_text("ci · push")
    expect(signed_in.locator("#produced")).to_contain_text("Review the push")
    expect(signed_in.locator("#body pre")).to_contain_text('"ref": "refs/heads/main"')

    signed_in.goto(f"{o}/dead")
    expect(signed_in.locator('#dead section[data-queue="deploy"] .error-line')).to_have_text(
        "deploy refused: no credentials"
    )

    signed_in.goto(f"{o}/sources")
    expect(signed_in.locator('#sources tr[data-source="ci"] td[data-label="Health"]')).to_have_text("healthy")
    expect(signed_in.locator("main")).not_to_contain_text("Loading")
    expect(signed_in.locator("#live")).to_be_hidden()


def test_without_javascript_the_filters_and_older_pages_work_as_links(
    signed_in: Page, board: Board, db_path: Path
) -> None:
    made = on_the_file(db_path, a_morning)
    o = board.origin

    signed_in.goto(f"{o}/todos?limit=1")
    expect(signed_in.locator("#todos tbody tr")).to_have_count(1)
    signed_in.locator("#more").click()
    expect(signed_in).to_have_url(re.compile(r"cursor="))
    expect(signed_in.locator("#todos tbody tr")).to_have_count(1)

    signed_in.goto(f"{o}/todos")
    signed_in.locator("select[name=state]").select_option("claimed")
    signed_in.get_by_role("button", name="Filter").click()
    expect(signed_in).to_have_url(re.compile(r"state=claimed"))
    expect(signed_in.locator("#todos tbody tr")).to_have_count(1)
    expect(signed_in.locator(f'#todos tr[data-todo="{made["held"]}"]')).to_be_visible()
