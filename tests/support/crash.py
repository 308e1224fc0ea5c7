"""What the crash tests of the adapters share: `serve` as a process, with a fault
hook, and waits that fail at once (with its log) if it exits."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.receiver import ServeProcess, serve_process

FAULT_ENV = "SWITCHBOARD_FAULT"
PAUSED = "fault hook: committed"


def serve(db: Path, *, fault: str = "") -> contextlib.AbstractContextManager[ServeProcess]:
    """`serve` on the file, its stderr read as it comes (a full pipe never stalls it), killed if left running."""
    return serve_process(db, env={FAULT_ENV: fault})


def log(serve: ServeProcess) -> str:
    return "serve's stderr, the last 20 lines:\n" + "".join(serve.lines[-20:])


def watching(serve: ServeProcess) -> dict[str, Any]:
    """Options for a wait on what ``serve`` does: a failure at once if it exits, with its log."""

    def exited() -> str | None:
        status = serve.proc.poll()
        return None if status is None else f"serve exited with status {status}"

    return {"dead": exited, "context": lambda: log(serve)}


def lines_with(serve: ServeProcess, marker: str) -> Callable[[], int]:
    return lambda: sum(marker in line for line in serve.lines)
