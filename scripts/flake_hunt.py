#!/usr/bin/env python3
"""The flake hunt: the whole suite, run after run, in file order and in random order.

    python3 scripts/flake_hunt.py                 # 6 runs: file order, then a random order, in turn
    python3 scripts/flake_hunt.py --runs 10 --seed 7 -- -m 'not binary'

Each run is the README's test command (scripts/test.sh) with a JUnit report of
its own; a random run shuffles modules, then the tests inside each, with
pytest-randomly (its seed printed, so any order can be run again with
``-p randomly --randomly-seed=SEED``). At the end: each run's counts, and every
test that failed or errored in any run with how often. The exit code is 1 when
any test failed even once: a flaky test is a defect, found here and fixed by its
cause, never retried.

The reports stay in --out (default .flake-hunt/), one XML file per run.
"""

from __future__ import annotations

import argparse
import collections
import random
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Run:
    number: int
    order: str  # "file order" or "random, seed N"
    seconds: float = 0.0
    exit_code: int = 0
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    bad: dict[str, str] = field(default_factory=dict)  # test id -> "failed" | "error", with its first line


def pytest_args(seed: int | None, report: Path) -> list[str]:
    args = ["-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    if seed is not None:
        # pyproject's addopts turn pytest-randomly off (-p no:randomly); -p randomly turns it back on.
        args += ["-p", "randomly", f"--randomly-seed={seed}"]
    return args


def read_report(report: Path, run: Run) -> None:
    if not report.exists():
        run.counts["no report"] += 1
        return
    for case in ET.parse(report).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                message = (child.get("message") or child.text or "").strip().splitlines()
                run.bad[test_id] = f"{outcome}: {message[0][:200] if message else ''}"
                break
            if child.tag == "skipped":
                outcome = "skipped"
        run.counts[outcome] += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=6, help="how many whole-suite runs (default 6)")
    parser.add_argument("--seed", type=int, default=None, help="the first random run's seed (default: a new one)")
    parser.add_argument("--random-only", action="store_true", help="every run in a random order")
    parser.add_argument("--out", type=Path, default=ROOT / ".flake-hunt", help="where the JUnit reports go")
    parser.add_argument("extra", nargs="*", help="more pytest arguments, after --")
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    seeds = random.Random(options.seed)

    runs: list[Run] = []
    for number in range(1, options.runs + 1):
        shuffled = options.random_only or number % 2 == 0
        seed = seeds.randrange(1, 2**31) if shuffled else None
        run = Run(number, f"random, seed {seed}" if shuffled else "file order")
        report = options.out / f"run-{number}.xml"
        report.unlink(missing_ok=True)
        print(f"== run {number}/{options.runs}: {run.order}", flush=True)
        started = time.monotonic()
        run.exit_code = subprocess.call(
            ["bash", str(ROOT / "scripts" / "test.sh"), *pytest_args(seed, report), *options.extra], cwd=ROOT
        )
        run.seconds = time.monotonic() - started
        read_report(report, run)
        runs.append(run)
        print(f"== run {number}: exit {run.exit_code}, {dict(run.counts)}, {run.seconds:.0f} s", flush=True)

    print("\n# runs")
    print("| run | order | passed | failed | errors | skipped | exit | seconds |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        c = r.counts
        print(f"| {r.number} | {r.order} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} "
              f"| {r.exit_code} | {r.seconds:.0f} |")  # fmt: skip
    tally: collections.Counter[str] = collections.Counter(t for r in runs for t in r.bad)
    print(f"\n# tests that failed at least once: {len(tally)}")
    for test_id, times in tally.most_common():
        print(f"- {test_id}: {times} of {len(runs)} runs")
        for r in runs:
            if test_id in r.bad:
                print(f"    run {r.number} ({r.order}): {r.bad[test_id]}")
    clean = not tally and all(r.exit_code == 0 for r in runs)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
