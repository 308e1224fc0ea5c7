"""Screenshots of the dashboard for the docs (docs/guide/dashboard.md): docs/screenshots/*.png.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]

Seeds a database in a temporary folder with an hour of realistic work, every
todo made from an event, through the paths the product itself takes:

- webhook sources `github` and `stripe` and a Redis stream adapter `signups`
  (a real redis-server on a free port), with routing rules, added by the CLI;
- the past hour, replayed on a clock that moves minute by minute: GitHub
  pushes and pull requests, Stripe payments and disputes, each signed as the
  provider signs it, verified by the receiver's own verifiers and routed by
  the back half every producer calls (`routing.accept`); agents claim,
  complete and fail the todos they made, and some run out of attempts;
- then `serve`'s app (receiver and dashboard) on a free loopback port, with
  the real clock: signed webhooks posted over HTTP, entries XADDed to the
  stream and consumed by the adapter, a few more claims.

Then Debian's Chromium (as the browser tests drive it) opens each page, light
and dark, wide and narrow, and saves it. Needs redis-server and chromium
(scripts/test.sh installs both).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the test helpers: the browser, signing, redis-server, the served app

from playwright.sync_api import Page, sync_playwright  # noqa: E402

from switchboard_local.core import browse, routing, sources, todos  # noqa: E402
from switchboard_local.core.clock import ManualClock  # noqa: E402
from switchboard_local.core.events import NewEvent  # noqa: E402
from switchboard_local.core.store.interface import Store  # noqa: E402
from switchboard_local.core.store.opener import open_store  # noqa: E402
from switchboard_local.core.todos import Lease  # noqa: E402
from switchboard_local.http import verifiers  # noqa: E402

from support import signing  # noqa: E402
from support.browser import launch  # noqa: E402
from support.cli import invoke  # noqa: E402
from support.dashboard import Board, serving_dashboard  # noqa: E402
from support.redis_server import RedisServer  # noqa: E402

GITHUB_SECRET = "gh-demo-secret-7f3a"
STRIPE_SECRET = "whsec_demo_4eC39HqLyjWDarjtT1zdp7dc"
HISTORY_MINUTES = 62
rng = random.Random(14)

REPOS = ["acme/api", "acme/web", "acme/billing"]
AUTHORS = ["maya", "jonas", "priya", "sam"]
COMMITS = [
    "Fix race in the session cache", "Bump pydantic to 2.9", "Add retry to the webhook sender",
    "Refactor invoice rendering", "Speed up the search index build", "Handle empty carts at checkout",
    "Log slow queries over 200 ms", "Drop Python 3.10 support", "Paginate the audit export",
    "Tighten CSP on the admin pages", "Cache exchange rates for an hour", "Migrate cron jobs to the scheduler",
]
PRS = [
    "Add dark mode to the settings page", "Stream large CSV exports", "Rate-limit the login endpoint",
    "Replace moment.js with date-fns", "Make refunds idempotent", "Split the monolith's billing module",
]
BUILD_ERRORS = [
    "exit status 1: 2 tests failed in tests/test_checkout.py",
    "exit status 137: the runner ran out of memory",
]
SHIP_ERROR = "carrier API answered 503 Service Unavailable (retry after 120 s)"
SIGNUPS = ["lea.martin@example.org", "tom@brightly.io", "ana.silva@example.com", "kofi@mensah.dev", "mei.chen@example.org",
           "raj.patel@example.net", "ines@atelier-ines.fr", "ola.nordmann@example.no", "sam.okafor@example.com"]
PRODUCTS = [("Espresso grinder", 24900), ("Pour-over kettle", 7900), ("Beans, 1 kg", 3200), ("Milk frother", 5400)]


def cli(db: Path, *args: str) -> Any:
    result = invoke(db, *args, "--json")
    if result.code != 0:
        raise SystemExit(f"switchboard-local {' '.join(args)}: {result.err}")
    return json.loads(result.out) if result.out.strip() else None


def configure(db: Path, redis_url: str) -> None:
    cli(db, "source", "add", "github", "--kind", "github", "--secret", GITHUB_SECRET)
    cli(db, "source", "add", "stripe", "--kind", "stripe", "--secret", STRIPE_SECRET)
    cli(db, "adapter", "add", "signups", "--redis-url", redis_url, "--mode", "stream", "--key", "app:signups")
    rule = ("rule", "add")
    cli(db, *rule, "--source", "github", "--type", "push", "--where", "ref=refs/heads/main", "--queue", "builds",
        "--title", "Build {repository.name}: {head_commit.message}", "--max-attempts", "2")
    cli(db, *rule, "--source", "github", "--type", "pull_request", "--where", "action=opened|reopened", "--queue", "review",
        "--title", "Review PR #{number}: {pull_request.title}", "--assignee", "reviewer")
    cli(db, *rule, "--source", "github", "--drop")
    cli(db, *rule, "--source", "stripe", "--type", "payment_intent.succeeded", "--queue", "fulfilment",
        "--title", "Ship order {data.object.metadata.order_id} to {data.object.shipping.name}", "--max-attempts", "3")
    cli(db, *rule, "--source", "stripe", "--type", "charge.dispute.created", "--queue", "billing",
        "--title", "Answer dispute {data.object.id} ({data.object.reason})", "--priority", "5")
    cli(db, *rule, "--source", "stripe", "--drop")
    cli(db, *rule, "--source", "signups", "--queue", "onboarding", "--title", "Welcome {email} ({plan} plan)")


# ---------------------------------------------------------------- deliveries, as the providers send them


def github_push(n: int, now_s: float) -> tuple[str, bytes, dict[str, str]]:
    repo = rng.choice(REPOS)
    sha = hashlib.sha1(f"{n}".encode()).hexdigest()
    author = rng.choice(AUTHORS)
    body = {
        "ref": "refs/heads/main",
        "before": hashlib.sha1(f"{n - 1}".encode()).hexdigest(),
        "after": sha,
        "repository": {"id": 48151623 + REPOS.index(repo), "name": repo.split("/")[1], "full_name": repo,
                       "private": True, "default_branch": "main"},
        "pusher": {"name": author, "email": f"{author}@acme.dev"},
        "sender": {"login": author, "type": "User"},
        "head_commit": {"id": sha, "message": rng.choice(COMMITS), "timestamp": iso(now_s),
                        "author": {"name": author.title(), "username": author},
                        "added": [], "removed": [], "modified": ["src/app.py", "tests/test_app.py"]},
        "compare": f"https://github.com/{repo}/compare/{sha[:12]}",
    }
    return "push", *github_delivery("push", body)


def github_pr(n: int, now_s: float) -> tuple[str, bytes, dict[str, str]]:
    repo = rng.choice(REPOS)
    number = 400 + n
    author = rng.choice(AUTHORS)
    body = {
        "action": "opened",
        "number": number,
        "pull_request": {"number": number, "title": rng.choice(PRS), "state": "open", "draft": False,
                         "user": {"login": author}, "head": {"ref": f"{author}/change-{n}"}, "base": {"ref": "main"},
                         "additions": rng.randint(4, 400), "deletions": rng.randint(0, 120), "changed_files": rng.randint(1, 14),
                         "html_url": f"https://github.com/{repo}/pull/{number}"},
        "repository": {"name": repo.split("/")[1], "full_name": repo},
        "sender": {"login": author},
    }
    return "pull_request", *github_delivery("pull_request", body)


def github_delivery(event: str, body: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body, indent=None).encode()
    headers = {
        "user-agent": "GitHub-Hookshot/a1b2c3d",
        "content-type": "application/json",
        "x-github-event": event,
        "x-github-delivery": str(uuid.UUID(int=rng.getrandbits(128))),
        "x-github-hook-id": "512837461",
        "x-github-hook-installation-target-type": "repository",
        **{k.lower(): v for k, v in signing.github(raw, GITHUB_SECRET).items()},
    }
    return raw, headers


def stripe_event(kind: str, n: int, now_s: float) -> tuple[str, bytes, dict[str, str]]:
    product, price = rng.choice(PRODUCTS)
    quantity = rng.randint(1, 3)
    name = rng.choice(["Ada Lovelace", "Grace Hopper", "Alan Turing", "Katherine Johnson", "Edsger Dijkstra"])
    if kind == "payment_intent.succeeded":
        obj: dict[str, Any] = {
            "id": f"pi_3Q{n:04d}Lk2eZvKYlo2C", "object": "payment_intent", "amount": price * quantity,
            "currency": "eur", "status": "succeeded", "customer": f"cus_R{n:05d}",
            "metadata": {"order_id": str(10400 + n), "items": f"{quantity} × {product}"},
            "shipping": {"name": name, "address": {"city": "Lyon", "country": "FR", "postal_code": "69002"}},
        }
    else:
        obj = {"id": f"dp_1Q{n:04d}Lk2eZvKYlo2C", "object": "dispute", "amount": price, "currency": "eur",
               "reason": rng.choice(["fraudulent", "product_not_received"]), "status": "needs_response",
               "charge": f"ch_3Q{n:04d}Lk2eZvKYlo2C"}
    body = {"id": f"evt_1Q{n:04d}Lk2eZvKYlo2CWx", "object": "event", "api_version": "2024-06-20",
            "created": int(now_s), "type": kind, "livemode": False, "data": {"object": obj},
            "request": {"id": f"req_{n:06d}AbCd", "idempotency_key": str(uuid.UUID(int=rng.getrandbits(128)))}}
    raw = json.dumps(body).encode()
    headers = {"user-agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)", "content-type": "application/json; charset=utf-8",
               **{k.lower(): v for k, v in signing.stripe(raw, STRIPE_SECRET, int(now_s)).items()}}
    return kind, raw, headers


def iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


async def deliver(store: Store, name: str, raw: bytes, headers: dict[str, str]) -> None:
    """What the receiver does with a delivery: verify, redact, route, store."""
    source = await sources.get(store, name, family="webhook")
    now_s = store.clock.now_ms() / 1000
    verified = verifiers.verify(source, headers, raw, now_s, verifiers.resolve_secrets(source))
    event = NewEvent(source=name, family="webhook", type=verified.type, external_id=verified.external_id,
                     trust_mode=source.kind, verified=True, verify_detail=verified.detail,
                     content_type=headers.get("content-type"), headers=verifiers.redact(headers, source), body=raw)
    (result,) = await routing.accept(store, source, [event])
    assert not isinstance(result, Exception), result


# ---------------------------------------------------------------- agents at work


RESULTS = {
    "builds": lambda t: {"status": "passed", "duration_s": rng.randint(48, 310), "tests": rng.randint(800, 1400)},
    "review": lambda t: {"verdict": rng.choice(["approved", "changes requested"]), "comments": rng.randint(0, 9)},
    "fulfilment": lambda t: {"carrier": "Colissimo", "tracking": f"6A{rng.randint(10**9, 10**10 - 1)}"},
    "billing": lambda t: {"evidence_submitted": True},
    "onboarding": lambda t: {"sent": "welcome-v3", "message_id": f"<{uuid.UUID(int=rng.getrandbits(128))}@mail.acme.dev>"},
}
OWNERS = {"builds": "ci-agent", "review": "review-agent", "fulfilment": "shipping-agent", "billing": "billing-agent",
          "onboarding": "mail-agent"}


async def work(store: Store, queue: str, *, fail_with: str | None = None) -> bool:
    """One agent's turn: claim the next todo on ``queue``, then complete it (or fail it with ``fail_with``)."""
    owner = OWNERS[queue]
    claimed = await todos.claim_next(store, owner=f"{owner}-{rng.randint(1, 3)}", queues=[queue], lease=600,
                                     agent="reviewer" if queue == "review" else None)
    if claimed is None:
        return False
    if fail_with:
        await todos.fail(store, Lease.of(claimed), error=fail_with)
    else:
        await todos.complete(store, Lease.of(claimed), result=RESULTS[queue](claimed))
    return True


async def history(db: Path) -> None:
    """The past hour, minute by minute, on a clock that moves (and never past the real now)."""
    start = int(time.time() * 1000) - HISTORY_MINUTES * 60_000
    clock = ManualClock(start)
    store = await open_store(db, clock=clock, rng=random.Random(1))

    def at(ms: int) -> float:
        clock.advance(max(0, ms - clock.now_ms()) / 1000)
        return clock.now_ms() / 1000

    n = 0
    try:
        for minute in range(HISTORY_MINUTES):
            base = start + minute * 60_000
            busy = 1.0 + 0.9 * (minute > 20) + 0.8 * (35 < minute < 50)  # a morning that picks up
            arrivals: list[tuple[str, str]] = []
            arrivals += [("github", "push")] * min(6, int(rng.expovariate(1 / (1.3 * busy))))
            arrivals += [("github", "pull_request")] * (rng.random() < 0.25)
            arrivals += [("stripe", "payment_intent.succeeded")] * min(5, int(rng.expovariate(1 / (1.0 * busy))))
            arrivals += [("stripe", "charge.dispute.created")] * (minute in (17, 44))
            # Deliveries in the first 40 s of the minute, the agents' turns after them.
            for offset, (name, kind) in sorted(zip((rng.uniform(0, 40_000) for _ in arrivals), arrivals)):
                n += 1
                now_s = at(base + int(offset))
                if kind == "push":
                    _, raw, headers = github_push(n, now_s)
                elif kind == "pull_request":
                    _, raw, headers = github_pr(n, now_s)
                else:
                    _, raw, headers = stripe_event(kind, n, now_s)
                await deliver(store, name, raw, headers)
            at(base + 42_000)
            if minute < HISTORY_MINUTES - 4:  # the agents keep up, mostly; the last minutes leave a backlog
                for queue, turns in (("builds", 3), ("fulfilment", 3), ("review", 1), ("billing", 1)):
                    for _ in range(turns):
                        error = None
                        if queue == "builds" and rng.random() < 0.15:
                            error = BUILD_ERRORS[0] if rng.random() < 0.75 else BUILD_ERRORS[1]
                        if queue == "fulfilment" and 38 < minute < 46:
                            error = SHIP_ERROR  # the carrier's outage
                        clock.advance(rng.uniform(0.5, 2.5))
                        await work(store, queue, fail_with=error)
    finally:
        await store.close()


# ---------------------------------------------------------------- now: the live server


def live(board: Board, redis: RedisServer, db: Path) -> int:
    """Deliveries over HTTP and Redis with the real clock; answers the id of a live GitHub push event."""
    client = redis.client()
    plans = ["free", "team", "team", "business"]
    for i in range(9):
        client.xadd("app:signups", {"payload": json.dumps({
            "email": SIGNUPS[i],
            "plan": rng.choice(plans), "signed_up_at": iso(time.time()), "referrer": rng.choice(["google", "newsletter", None]),
        })})
    deadline = time.monotonic() + 30
    while len(board.get_json("/api/events?source=signups")["items"]) < 9:
        if time.monotonic() > deadline:
            raise SystemExit("the Redis adapter did not consume the stream entries")
        time.sleep(0.2)
    _, raw, headers = github_push(900, time.time())
    answer = board.receiver.post("github", raw, headers)
    assert answer.status == 202, answer.body
    push_event = answer.json()["event_id"]
    for i in range(3):
        _, raw, headers = stripe_event("payment_intent.succeeded", 900 + i, time.time())
        assert board.receiver.post("stripe", raw, headers).status == 202
    asyncio.run(now_work(db))
    return push_event


async def now_work(db: Path) -> None:
    store = await open_store(db)
    try:
        for _ in range(5):
            await work(store, "onboarding")
        await work(store, "onboarding", fail_with="SMTP 550 5.1.1 mailbox unavailable")
        # Claimed and still being worked on.
        await todos.claim_next(store, owner="ci-agent-2", queues=["builds"], lease=900)
        await todos.claim_next(store, owner="shipping-agent-1", queues=["fulfilment"], lease=900)
        # An order that just came in, picked up at once: the todos list shows who holds it.
        (newest,) = (await browse.todos(store, queue="fulfilment", state="pending", limit=1)).items
        await todos.claim(store, newest.id, owner="shipping-agent-3", lease=900)
    finally:
        await store.close()


# ---------------------------------------------------------------- the pictures


def settle(page: Page) -> None:
    # The page arrives with its data; "live" shows once its script holds the stream.
    page.wait_for_selector("#live[data-state=live]")
    page.wait_for_timeout(300)  # the fonts and the last repaint


def shoot(page: Page, url: str, out: Path, *, full: bool = True) -> None:
    page.goto(url)
    settle(page)
    page.screenshot(path=str(out), full_page=full)
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


def pick_todo(board: Board) -> int:
    """A build that failed once and then passed: payload, result and two attempts."""
    for todo in board.get_json("/api/todos?queue=builds&state=done&limit=200")["items"]:
        if todo["attempt"] == 2:
            return todo["id"]
    return board.get_json("/api/todos?queue=builds&limit=1")["items"][0]["id"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="switchboard-shots-") as tmp:
        work_dir = Path(tmp)
        db = work_dir / "switchboard.db"
        redis = RedisServer(work_dir).start()
        try:
            configure(db, redis.url)
            asyncio.run(history(db))
            with serving_dashboard(db) as board:
                event_id = live(board, redis, db)
                todo_id = pick_todo(board)
                with sync_playwright() as playwright:
                    browser = launch(playwright, str(work_dir / "profile"))
                    page = browser.new_page()
                    page.set_viewport_size({"width": 1280, "height": 800})
                    page.goto(board.login_url)
                    o = board.origin
                    shoot(page, f"{o}/", args.out / "queues.png")
                    shoot(page, f"{o}/todos/{todo_id}", args.out / "todo.png")
                    shoot(page, f"{o}/events/{event_id}", args.out / "event.png")
                    shoot(page, f"{o}/dead", args.out / "dead-letters.png")
                    shoot(page, f"{o}/todos", args.out / "todos.png", full=False)
                    shoot(page, f"{o}/sources", args.out / "sources.png")
                    page.emulate_media(color_scheme="dark")
                    shoot(page, f"{o}/", args.out / "queues-dark.png")
                    page.emulate_media(color_scheme="light")
                    page.set_viewport_size({"width": 390, "height": 844})
                    shoot(page, f"{o}/", args.out / "queues-narrow.png", full=False)
                    browser.close()
        finally:
            redis.stop()


if __name__ == "__main__":
    main()
