"""Run a mutant's tests in a copy of the repository with the mutated files written in.

For what mutmut cannot switch at run time: the SQL (sql.py) and functions
called at import (run.py's BY_COPY). PYTHONPATH and the working directory
point at the copy, so the subprocesses the tests start import it too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


@dataclass(frozen=True)
class Job:
    files: dict[str, str]  # path in the repository -> mutated text
    tests: list[str]  # node ids, fastest first (pytest stops at the first failure)
    timeout: float


def _default_sigint() -> None:
    # A shell's background job starts with SIGINT ignored, and children inherit
    # that; the tests that stop a process with SIGINT need it back.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _copy_repo(into: Path) -> Path:
    copy = into / "repo"
    ignore = shutil.ignore_patterns(".venv", ".git", "mutants", ".work", "__pycache__", "*.db*", ".hypothesis", "bench")
    shutil.copytree(ROOT, copy, ignore=ignore)
    return copy


def run_in_copy(copy: Path, job: Job) -> tuple[str, float, str]:
    """('killed'|'survived'|'timeout', seconds, the failing test if any)."""
    originals = {path: (copy / path).read_text("utf-8") for path in job.files}
    for path, text in job.files.items():
        (copy / path).write_text(text, "utf-8")
    env = {**os.environ, "PYTHONPATH": str(copy)}
    env.pop("SWITCHBOARD_DB", None)
    env.pop("MUTANT_UNDER_TEST", None)
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               "--tb=line", *job.tests]  # fmt: skip
    began = time.monotonic()
    proc = subprocess.Popen(command, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=job.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", time.monotonic() - began, ""
    finally:
        for path, text in originals.items():
            (copy / path).write_text(text, "utf-8")
    elapsed = time.monotonic() - began
    if proc.returncode == 0:
        return "survived", elapsed, ""
    failed = next((line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("FAILED ")), "")
    return "killed", elapsed, failed or f"pytest exited {proc.returncode}"


@contextmanager
def _copies(jobs: int) -> Iterator[list[Path]]:
    scratch = Path(tempfile.mkdtemp(prefix="mutants-"))
    try:
        yield [_copy_repo(scratch / str(n)) for n in range(jobs)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_all(items: Sequence[T], job_of: Callable[[T], Job | None], jobs: int) -> Iterator[tuple[T, dict]]:
    """Run each item's job, ``jobs`` at a time; yield (item, result) in order. No job: no tests."""
    with _copies(jobs) as copies:
        free = list(copies)

        def one(item: T) -> tuple[T, dict]:
            job = job_of(item)
            if job is None or not job.tests:
                return item, {"status": "no tests", "seconds": 0.0, "test": ""}
            copy = free.pop()
            try:
                status, seconds, test = run_in_copy(copy, job)
            finally:
                free.append(copy)
            return item, {"status": status, "seconds": round(seconds, 1), "test": test}

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            yield from pool.map(one, items)
