"""Running the command line from a test: in this process (`invoke`, behind the
`cli` fixture) or as a real `python -m switchboard_local` process (`run_cli`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from click.testing import CliRunner

from switchboard_local.cli.main import main

REPO_ROOT = Path(__file__).resolve().parents[2]


def ctrl_c_reaches_it() -> None:
    """A ``preexec_fn``: the child takes SIGINT as a command typed at a terminal does.

    A test run started as a background job (``cmd &`` in a script) has SIGINT
    ignored, and a child inherits that: Python then never installs its Ctrl-C
    handler, so a test of what Ctrl-C does would wait for an exit that never comes.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Result(NamedTuple):
    """What a command left: its exit status, stdout and stderr as text, stdout as bytes."""

    code: int
    out: str
    err: str
    raw: bytes


def invoke(db: Path | str | None, *args: str, input: str | None = None,
           env: Mapping[str, str | None] | None = None) -> Result:  # fmt: skip
    """The command in this process through click's runner; ``--db`` appended when ``db`` is given."""
    db_args = ["--db", str(db)] if db is not None else []
    result = CliRunner().invoke(main, [*args, *db_args], input=input, env=env)
    return Result(result.exit_code, result.stdout, result.stderr, result.stdout_bytes)


def as_json(cli: Callable[..., Result], *args: str, input: str | None = None) -> Any:
    """The command's ``--json`` output, parsed; the command must succeed."""
    result = cli(*args, "--json", input=input)
    assert result.code == 0, result.err
    return json.loads(result.out)


def run_cli(*args: str, db: Path | str | None = None, stdin: Any = None, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`python -m switchboard_local ARGS` as a real process, the database named by $SWITCHBOARD_DB."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    if db is not None:
        full_env["SWITCHBOARD_DB"] = str(db)
    return subprocess.run([sys.executable, "-m", "switchboard_local", *args], check=False, capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=cwd, stdin=stdin)  # fmt: skip
