"""A real browser for the dashboard's tests: Debian's Chromium, driven by playwright.

Playwright's own browser downloads fail on these machines (and would be a
second, unpinned Chromium): the tests launch the system's `chromium`
(`apt-get install chromium`; scripts/test.sh installs it when missing) through
`executable_path`. A missing Chromium fails the tests, as a missing
redis-server does: in CI a browser test that skipped would prove nothing.

One browser per test module (`chromium()` in a module-scoped fixture:
starting Chromium costs a second or two), a fresh tab per test (`tab()`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

from playwright.sync_api import BrowserContext, Page, Playwright, sync_playwright

MISSING = "chromium is not installed (apt-get install chromium, or run scripts/test.sh; SWITCHBOARD_CHROMIUM names another)"

# Headless, and quiet on the network: on a closed network Chromium's own
# background connections (component updates, sync, QUIC probes) are refused
# and slow it down or fail its start; the sandbox needs user namespaces that
# containers (and root, in CI) do not give.
# A name the browser resolves to 127.0.0.1 as a DNS-rebinding attacker's would:
# a page opened under it sends its own Host header.
REBOUND_NAME = "rebound.test"

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    f"--host-resolver-rules=MAP {REBOUND_NAME} 127.0.0.1",
]


def chromium_path() -> str:
    """The Chromium binary: $SWITCHBOARD_CHROMIUM, or `chromium` on PATH; an error naming what to install."""
    named = os.environ.get("SWITCHBOARD_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not named or not os.access(named, os.X_OK):
        raise RuntimeError(MISSING)
    return named


def launch(playwright: Playwright, user_data_dir: str, *, javascript: bool = True) -> BrowserContext:
    """Chromium on a fresh profile (`user_data_dir`): playwright's persistent context is how it takes one
    (``javascript=False``: pages run no script, as a reader who turned it off, or before it loads)."""
    return playwright.chromium.launch_persistent_context(
        user_data_dir,
        executable_path=chromium_path(),
        headless=True,
        args=ARGS,
        viewport={"width": 1280, "height": 800},
        java_script_enabled=javascript,
    )


@contextlib.contextmanager
def chromium(*, javascript: bool = True) -> Iterator[BrowserContext]:
    """Chromium on a fresh profile, closed on exit (a module-scoped fixture holds one per test module)."""
    with tempfile.TemporaryDirectory(prefix="switchboard-chromium-") as profile, sync_playwright() as playwright:
        context = launch(playwright, profile, javascript=javascript)
        try:
            yield context
        finally:
            context.close()


@contextlib.contextmanager
def tab(context: BrowserContext) -> Iterator[Page]:
    """A fresh tab; what it logged as errors is in ``tab.console_errors`` (a list of texts)."""
    opened = context.new_page()
    errors: list[str] = []
    opened.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.console_errors = errors  # type: ignore[attr-defined]
    try:
        yield opened
    finally:
        opened.close()
