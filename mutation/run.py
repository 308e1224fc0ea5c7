"""Mutation testing of the core, the SQL, the webhook verifiers, the Redis
consumers and the group commit; a report per area in mutation/report.md.

    .venv/bin/python mutation/run.py [--area AREA ...] [--jobs N] [--resume] [--report-only]

Python areas run under mutmut (configured in pyproject.toml's [tool.mutmut]):
it copies the package to mutants/ with every mutant of a function behind a
trampoline that MUTANT_UNDER_TEST switches, records once which tests reach
which function (in the pytest process), and runs for each mutant only those
tests, in a process forked per mutant. Subprocesses a selected test starts
(python -m switchboard_local) import the mutants/ copy (PYTHONPATH) and inherit
MUTANT_UNDER_TEST, so the mutant is live there too; but a test that reaches a
function only through a subprocess is not selected for its mutants. Functions
called at import (BY_COPY) cannot be switched that way: their mutants run in a
copy of the repository with the mutant written in (copies.py). The SQL area
runs mutation/sql.py. Mutants listed in mutation/equivalent.toml, each with its
reason, are subtracted.

Slow (an hour or more per area on two shared cores): run it before a release
and when changing the core, not in CI. --resume continues an interrupted run
of the same code; without it an area runs again from scratch. --survivors runs
again only the last run's survivors, with the tests as they are now (every
test's reach is recorded anew; the SQL area records its map anew), and the
mutants of functions changed since (mutmut makes them anew, undecided).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import copies  # noqa: E402
import sql  # noqa: E402

PACKAGE = "switchboard_local"
# The modules of core/todos/ (its __init__ only names their verbs).
TODOS = tuple(f"todos.{module}" for module in ("claims", "lifecycle", "batches", "reads", "waits", "operator", "bulk"))
# area -> (title, mutmut name patterns); "sql" is mutation/sql.py's.
AREAS: dict[str, tuple[str, list[str]]] = {
    "webhooks": (
        "Webhook verifiers (http/verifiers.py, core/webhook_config.py)",
        [f"{PACKAGE}.http.verifiers.*", f"{PACKAGE}.core.webhook_config.*"],
    ),
    "sql": ("SQL (shared.sql, sqlite/queries.sql)", []),
    "redis": (
        "Redis consumers (brokers/: loop.py and the Redis readers)",
        [f"{PACKAGE}.brokers.{module}.*" for module in ("loop", "redis_client", "redis_stream", "redis_list", "redis_pubsub")],
    ),
    "group": ("Group commit (core/store/sqlite/group_commit.py)", [f"{PACKAGE}.core.store.sqlite.group_commit.*"]),
    "core": (
        "Core verbs (core/: todos/, events.py, routing.py, retention.py)",
        [f"{PACKAGE}.core.{module}.*" for module in (*TODOS, "events", "routing", "retention")],
    ),
}
# Not in the default run: the rest of the store (opening, migrations, reads, error translation).
EXTRA = {
    "store": (
        "The SQLite store (core/store/sqlite/: store.py, migrations.py, errors.py)",
        [f"{PACKAGE}.core.store.sqlite.{module}.*" for module in ("store", "migrations", "errors")],
    )
}
# Functions mutmut cannot switch at run time: called at import, they build
# closures once (webhooks.KINDS calls _hex_signed), so their mutants are run in
# a copy of the repository with the mutant written in, with the tests that
# reach the function given here.
BY_COPY = {f"{PACKAGE}.http.verifiers.x__hex_signed": f"{PACKAGE}.http.verifiers.x_verify"}
# Tests that drive whole processes or servers reach the core by the way and
# take seconds each: the core's and the group commit's mutants do not run them
# (a survivor would cost minutes); their own edges' tests and areas cover them.
EDGE_TESTS = ("tests/brokers/test_redis.py", "tests/brokers/test_redis_crash.py", "tests/cli/test_todo_commands.py",
              "tests/processes/test_processes.py", "tests/http/test_limits.py", "tests/mcp/test_stdio.py",
              "tests/http/test_receiver.py")  # fmt: skip
SKIP_TESTS = {"core": EDGE_TESTS, "group": EDGE_TESTS}
# The test files whose tests can reach an area's functions in the pytest
# process: mutmut's first pass (which test reaches which function) runs only
# these, a minute instead of the whole suite's seven. Globs, from the root.
AREA_TESTS = {
    "webhooks": ["tests/http/test_verifiers.py", "tests/http/test_signature_kinds.py", "tests/http/test_receiver.py",
                 "tests/core/test_dedup.py", "tests/core/test_routing.py"],
    # test_ack_on_complete.py: the stream reader's hold (XCLAIM JUSTID renewal) is reached in-process there only.
    "redis": ["tests/brokers/test_redis*.py", "tests/brokers/test_ack_on_complete.py"],
    "core": ["tests/core/test_agents.py", "tests/core/test_dedup.py", "tests/core/test_group_commit.py",
             "tests/core/test_ingest.py", "tests/core/test_ingest_batches.py", "tests/core/test_lifecycle.py",
             "tests/core/test_lifecycle_properties.py", "tests/core/test_batches.py",
             "tests/core/test_operator_verbs.py",
             "tests/mcp/test_scope.py", "tests/mcp/test_tools.py", "tests/core/test_retention.py",
             "tests/core/test_routing.py", "tests/core/test_store.py", "tests/core/test_watch.py"],
}  # fmt: skip
# The group commit shares the core's files: one mutants/ copy serves both, and a
# change of selection between them would make mutmut forget the first's results.
AREA_TESTS["group"] = AREA_TESTS["core"]
# The SQL's statements are recorded over every test file of tests/core (not the
# core's list alone: a paused queue, which every claim statement and the counts
# heed, is test_queues.py's) and the MCP tools' in-process tests; the edges
# reach the SQL through the same verbs.
AREA_TESTS["sql"] = ["tests/core/test_*.py", "tests/mcp/test_scope.py", "tests/mcp/test_tools.py"]
KILLED = {"killed", "timeout", "segfault"}  # a test failed, hung, or its process died
REPORT = HERE / "report.md"
EQUIVALENT = HERE / "equivalent.toml"
LOGS = HERE / ".work"
BY_COPY_RESULTS = LOGS / "by-copy-results.json"


@dataclass
class Outcome:
    key: str  # stable: equivalent.toml's key
    status: str
    where: str = ""  # file:line
    diff: str = ""
    group: str = ""  # the function or the statement
    label: str = ""  # what changed, for SQL


@dataclass
class AreaResult:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float | None = None


# ---- mutmut ----


def _mutmut_env() -> dict[str, str]:
    # Subprocesses the tests start (python -m switchboard_local) import the
    # mutated copy and inherit MUTANT_UNDER_TEST, so a mutant is live in them too.
    return {**os.environ, "PYTHONPATH": str(ROOT / "mutants")}


def _patterns(area: str) -> list[str]:
    return {**AREAS, **EXTRA}[area][1]


def _in_area(name: str, area: str) -> bool:
    patterns = _patterns(area)
    if area == "store":  # the rest: not the group commit's
        return fnmatch.fnmatch(name, patterns[0]) and not any(fnmatch.fnmatch(name, p) for p in _patterns("group"))
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def _meta() -> dict[str, tuple[Path, dict]]:
    """mutant name -> (source path, {exit_code, ...}) from mutmut's .meta files."""
    found = {}
    for meta in (ROOT / "mutants" / PACKAGE).rglob("*.py.meta"):  # the package's folders too
        data = json.loads(meta.read_text())
        source = meta.relative_to(ROOT / "mutants").with_name(meta.name.removesuffix(".meta"))
        for name, code in data["exit_code_by_key"].items():
            found[name] = (source, code)
    return found


def _not_known_equivalent(names: list[str]) -> list[str]:
    """Leave out the mutants equivalent.toml already explains: running them only
    costs their tests' whole time (they survive), and the report counts them as equivalent."""
    known, rules = equivalents()
    meta = _meta()
    kept = []
    for name in names:
        diff = _mutmut_diff(name, meta[name][0])
        outcome = Outcome(key=_stable_key(name, diff), status="survived", diff=diff)
        if outcome.key not in known and not _case_only(outcome, rules):
            kept.append(name)
    return kept


def _forget_survivors(area: str) -> None:
    """Mark the area's survivors undecided, so that a resumed run tries them again with today's tests.

    mutmut records the reach of a test it has not timed yet only: a test whose body
    changed keeps the reach of its old body. So every test's reach is forgotten too,
    and mutmut's stats pass records it anew (a minute for an area's test files)."""
    stats_path = ROOT / "mutants" / "mutmut-stats.json"
    if stats_path.exists():
        stats = json.loads(stats_path.read_text())
        stats["tests_by_mangled_function_name"], stats["duration_by_test"] = {}, {}
        stats_path.write_text(json.dumps(stats))
    # equivalent.toml's mutants stay as they are: they survive whatever the tests, and each costs
    # its tests' whole time to run again.
    surviving = [name for name, (_, code) in _meta().items()
                 if _in_area(name, area) and STATUS.get(code, "suspicious") not in KILLED]  # fmt: skip
    again = set(_not_known_equivalent(surviving))
    for meta in (ROOT / "mutants" / PACKAGE).rglob("*.py.meta"):
        data = json.loads(meta.read_text())
        codes = data["exit_code_by_key"]
        for name in codes:
            if name in again:
                codes[name] = None
        meta.write_text(json.dumps(data))
    if BY_COPY_RESULTS.exists():
        results = json.loads(BY_COPY_RESULTS.read_text())
        kept = {k: v for k, v in results.items() if not _in_area(k, area) or v["status"] in KILLED}
        BY_COPY_RESULTS.write_text(json.dumps(kept, indent=1, sort_keys=True))


def run_python(area: str, jobs: int, resume: bool, log_path: Path, survivors: bool = False) -> None:
    names = _patterns(area)
    if survivors:
        _forget_survivors(area)
        resume = True
    if resume:
        # With nothing undecided, mutmut still runs on the area's patterns: it makes the mutants of a
        # function changed (or added) since the last run anew, and runs only those (the decided ones it skips).
        names = _undecided(area) or names
    elif area == "store":
        names = sorted(n for n in _meta() if _in_area(n, area)) or names
    _skip_tests(area)
    _refresh_tests()
    # Before mutmut starts: the PYTHONPATH entry must exist when Python first looks
    # at it, or the import system caches it as missing and the tests import nothing.
    (ROOT / "mutants").mkdir(exist_ok=True)
    command = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *names]
    print(f"{area}: mutmut run ({len(names)} names/patterns), log in {log_path.relative_to(ROOT)}", flush=True)
    with open(log_path, "a") as log, _selection(area):
        done = subprocess.run(command, cwd=ROOT, env=_mutmut_env(), stdout=log, stderr=subprocess.STDOUT, check=False)
        # mutmut makes the mutants of a function changed since the last run anew, undecided,
        # only once it runs: a resumed run, given the names undecided before, runs those now.
        changed = [] if not resume or done.returncode else sorted(set(_undecided(area)) - set(names))
        if changed:
            print(f"{area}: mutmut run again for {len(changed)} mutants of functions changed since the last run")
            again = [*command[: command.index(str(jobs)) + 1], *changed]
            done = subprocess.run(again, cwd=ROOT, env=_mutmut_env(), stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        print(f"{area}: mutmut exited {done.returncode}; see {log_path}")
    run_by_copy(area, jobs, resume)


def _undecided(area: str) -> list[str]:
    """The area's mutants not decided yet, but for those equivalent.toml explains."""
    return _not_known_equivalent([n for n, (_, code) in _meta().items() if _in_area(n, area) and code is None])


def _refresh_tests() -> None:
    """mutmut runs the tests from its copy in mutants/, made once (it makes only the Python
    files anew): bring new and changed tests there, and the package's other files (SQL, templates)."""
    if (ROOT / "mutants").is_dir():
        shutil.copytree(ROOT / "tests", ROOT / "mutants" / "tests", dirs_exist_ok=True)
        for path in (ROOT / PACKAGE).rglob("*"):
            if path.is_file() and path.suffix not in (".py", ".pyc"):
                target = ROOT / "mutants" / path.relative_to(ROOT)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)


def _files(area: str) -> list[str]:
    return sorted({str(p.relative_to(ROOT)) for pattern in AREA_TESTS[area] for p in ROOT.glob(pattern)})


@contextlib.contextmanager
def _selection(area: str) -> Iterator[None]:
    """pyproject's test selection narrowed to AREA_TESTS[area] while mutmut runs (mutmut reads it only there)."""
    if area not in AREA_TESTS:
        yield
        return
    pyproject = ROOT / "pyproject.toml"
    original = pyproject.read_text("utf-8")
    files = _files(area)
    narrowed, count = re.subn(r"(?ms)^pytest_add_cli_args_test_selection = \[.*?\]$",
                              "pytest_add_cli_args_test_selection = " + json.dumps(files),
                              original)  # fmt: skip
    assert count == 1, "pyproject.toml has no pytest_add_cli_args_test_selection to narrow"
    pyproject.write_text(narrowed, "utf-8")
    try:
        yield
    finally:
        pyproject.write_text(original, "utf-8")


def _by_copy(name: str) -> str | None:
    """The function whose tests a by-copy mutant runs, or None for mutmut's own."""
    return BY_COPY.get(name.partition("__mutmut_")[0])


def run_by_copy(area: str, jobs: int, resume: bool) -> None:
    results = json.loads(BY_COPY_RESULTS.read_text()) if resume and BY_COPY_RESULTS.exists() else {}
    if not resume and BY_COPY_RESULTS.exists():
        results = {k: v for k, v in json.loads(BY_COPY_RESULTS.read_text()).items() if not _in_area(k, area)}
    meta = _meta()
    todo = [n for n in sorted(meta) if _in_area(n, area) and _by_copy(n) and n not in results]
    if not todo:
        return
    stats = json.loads((ROOT / "mutants" / "mutmut-stats.json").read_text())
    durations = stats["duration_by_test"]

    def job_of(name: str) -> copies.Job:
        path = meta[name][0]
        tests = sorted(stats["tests_by_mangled_function_name"].get(_by_copy(name), []), key=lambda t: durations.get(t, 0))
        budget = 120 + 4 * sum(durations.get(t, 1.0) for t in tests)
        return copies.Job({str(path): _mutated_source(name, path)}, tests, budget)

    print(f"{area}: {len(todo)} mutants of functions called at import, run in copies", flush=True)
    for name, result in copies.run_all(todo, job_of, jobs):
        results[name] = result
        BY_COPY_RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True))
        print(f"{area} by copy: {result['status']:8} {result['seconds']:6.1f}s {name}", flush=True)


def _mutated_source(name: str, path: Path) -> str:
    """The source file with the one mutant written in (what `mutmut apply` would write)."""
    import libcst as cst
    from mutmut.mutation.diff_apply import (
        find_top_level_function_or_method,
        read_functions_from_index,
    )

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        functions = read_functions_from_index(name, path)
    finally:
        os.chdir(cwd)
    assert functions is not None, f"no line index for {name}"
    original, mutant = functions
    module = cst.parse_module((ROOT / path).read_text("utf-8"))
    target = find_top_level_function_or_method(module, original.name.value)
    assert target is not None
    return module.deep_replace(target, mutant).code


def _skip_tests(area: str) -> None:
    """Take SKIP_TESTS out of mutmut's record of which tests reach the area's functions."""
    stats_path = ROOT / "mutants" / "mutmut-stats.json"
    if area not in SKIP_TESTS or not stats_path.exists():
        return  # the first run records it; later runs filter it
    stats = json.loads(stats_path.read_text())
    reach = stats["tests_by_mangled_function_name"]
    functions = {n.partition("__mutmut_")[0] for n in _meta() if _in_area(n, area)}
    for function in functions & set(reach):
        reach[function] = [t for t in reach[function] if not t.startswith(SKIP_TESTS[area])]
    stats_path.write_text(json.dumps(stats))


STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", -11: "segfault", -9: "segfault",
          None: "not run"}  # fmt: skip


def python_outcomes(area: str) -> list[Outcome]:
    known, rules = equivalents()
    outcomes = []
    by_copy = json.loads(BY_COPY_RESULTS.read_text()) if BY_COPY_RESULTS.exists() else {}
    for name, (path, code) in sorted(_meta().items()):
        if not _in_area(name, area):
            continue
        if _by_copy(name):
            status = by_copy.get(name, {"status": "not run"})["status"]
        else:
            status = STATUS.get(code, "suspicious")
        outcome = Outcome(key=name, status=status)
        if status not in KILLED:
            outcome.diff = _mutmut_diff(name, path)
            outcome.key = _stable_key(name, outcome.diff)
            outcome.where = _where(path, name, outcome.diff)
            outcome.group = _function_name(name)
            if status == "not run" and (outcome.key in known or _case_only(outcome, rules)):
                outcome.status = "equivalent"  # not run on purpose: see _not_known_equivalent
        outcomes.append(outcome)
    return outcomes


def _mutmut_diff(name: str, path: Path) -> str:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        from mutmut.mutation.diff_apply import get_diff_for_mutant

        return get_diff_for_mutant(name, path=path)
    finally:
        os.chdir(cwd)


def _changed(diff: str, sign: str) -> list[str]:
    return [line[1:].strip() for line in diff.splitlines()[2:] if line.startswith(sign)]


def _function_name(name: str) -> str:
    """switchboard_local.core.store.xǁStoreǁ_flush__mutmut_3 -> store.Store._flush"""
    module, _, function = name.partition("__mutmut_")[0].removeprefix(PACKAGE + ".").rpartition(".")
    return f"{module}.{function.removeprefix('x_').replace('xǁ', '').replace('ǁ', '.')}"


def _stable_key(name: str, diff: str) -> str:
    """The function and the mutated line: unlike mutmut's number, it survives edits elsewhere."""
    function = name.partition("__mutmut_")[0]
    added = _changed(diff, "+")
    return f"{function}: {added[0] if added else '(line removed) ' + (_changed(diff, '-') or [''])[0]}"


def _where(path: Path, name: str, diff: str) -> str:
    """file:line of the first changed line, found inside the function's span."""
    function = name.partition("__mutmut_")[0].rpartition(".")[2]
    short = function.split("ǁ")[-1] if "ǁ" in function else function.removeprefix("x_")
    cls = function.split("ǁ")[1] if "ǁ" in function else None
    source = (ROOT / path).read_text("utf-8")
    lines = source.splitlines()
    span = (1, len(lines))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and cls and node.name == cls:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == short:
                    span = (item.lineno, item.end_lineno or item.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not cls and node.name == short:
            if node.col_offset == 0:
                span = (node.lineno, node.end_lineno or node.lineno)
    removed = _changed(diff, "-")
    for number in range(span[0], span[1] + 1):
        if removed and lines[number - 1].strip() == removed[0]:
            return f"{path}:{number}"
    return f"{path}:{span[0]}"


# ---- SQL ----


def sql_outcomes() -> list[Outcome]:
    results = json.loads(sql.RESULTS.read_text()) if sql.RESULTS.exists() else {}
    known = equivalents()[0]  # not run on purpose (sql.run's skip)
    outcomes = []
    for mutant in sql.all_mutants():
        result = results.get(mutant.key)
        status = result["status"] if result else "equivalent" if mutant.key in known else "not run"
        outcome = Outcome(key=mutant.key, status=status)
        if status not in KILLED and status != "not run":
            outcome.diff = mutant.diff()
            outcome.where = f"{mutant.file}:{_sql_line(mutant)}"
            outcome.group = mutant.statement
            outcome.label = mutant.description
        outcomes.append(outcome)
    return outcomes


def _sql_line(mutant: sql.Mutant) -> int:
    for n, (a, b) in enumerate(zip(mutant.original.splitlines(), mutant.mutated.splitlines()), 1):
        if a != b:
            return n
    return 0


# ---- report ----


def kept_survivors() -> dict[str, str]:
    """equivalent.toml's [[kept]]: survivors that do change behaviour, left without a
    test for the reason given. They count as survived; the report shows the reason."""
    if not EQUIVALENT.exists():
        return {}
    return {entry["mutant"]: entry["reason"] for entry in tomllib.loads(EQUIVALENT.read_text("utf-8")).get("kept", [])}


def equivalents() -> tuple[dict[str, str], list[dict[str, str]]]:
    """equivalent.toml: reasons by mutant key, and the case-insensitive rules."""
    if not EQUIVALENT.exists():
        return {}, []
    data = tomllib.loads(EQUIVALENT.read_text("utf-8"))
    return {entry["mutant"]: entry["reason"] for entry in data.get("equivalent", [])}, data.get("case_insensitive", [])


def _case_only(outcome: Outcome, rules: list[dict]) -> bool:
    """A mutant that only changes the case of a string literal where case does not
    matter: one a rule's ``before`` text precedes, or one of its ``literals``."""
    removed, added = _changed(outcome.diff, "-"), _changed(outcome.diff, "+")
    if not (len(removed) == len(added) == 1 and removed[0] != added[0] and removed[0].lower() == added[0].lower()):
        return False
    old = removed[0]
    first = next(i for i, (a, b) in enumerate(zip(old, added[0])) if a != b)
    start = old.rfind('"', 0, first + 1)
    end = old.find('"', first)
    if start < 0 or end < 0:
        return False
    literal, prefix = old[start + 1 : end], old[:start]
    return any(
        ("before" in rule and prefix.endswith(rule["before"])) or literal.lower() in rule.get("literals", [])
        for rule in rules
    )


def _rest_estimate(area: str, left: int) -> str:
    """How long the mutants not run yet would take, from mutmut's times for those that ran."""
    stats = json.loads((ROOT / "mutants" / "mutmut-stats.json").read_text())
    reach, durations = stats["tests_by_mangled_function_name"], stats["duration_by_test"]
    seconds, worst = [], 0.0
    for meta in (ROOT / "mutants" / PACKAGE).rglob("*.py.meta"):
        data = json.loads(meta.read_text())
        seconds += [t for name, t in data["durations_by_key"].items() if _in_area(name, area)]
        for name, code in data["exit_code_by_key"].items():
            if code is None and _in_area(name, area):
                worst += sum(durations.get(t, 0.0) for t in reach.get(name.partition("__mutmut_")[0], []))
    if not seconds:
        return f"Partial: {left} mutants not run yet."
    mean = sum(seconds) / len(seconds)
    return (f"Partial: {left} mutants not run yet (mutmut runs those with the fewest tests first, so these are the "
            f"slowest). At the {mean:.0f} s each that the {len(seconds)} run so far took they would need "
            f"{left * mean / 60:.0f} min with one job; if all survived, their tests alone take {worst / 60:.0f} min.")


def report(results: list[AreaResult]) -> str:
    known, rules = equivalents()
    kept, used_kept = kept_survivors(), set()
    used: set[str] = set()
    out = ["# Mutation testing report", "",
           "Made by `python mutation/run.py` (see docs/development/mutation.md and mutation/run.py's docstring).",
           "Killed includes timeouts (a test hung for a minute, or tests running five times longer than unmutated).",
           "Score = killed / (mutants run − equivalent); equivalent mutants and their reasons are in",
           "mutation/equivalent.toml. A survivor marked \"kept\" changes behaviour but has no test, for the reason",
           "given there ([[kept]]); it counts as survived. Not run: the run was stopped before reaching them.", "",
           "Each mutant runs the tests that reached its function (Python) or executed its statement (SQL) in the",
           "pytest process: a test that reaches code only through a subprocess is not selected for it. A Python",
           "area's tests are those of its test files (run.py's AREA_TESTS): the files that can reach it in-process,",
           "without the tests that drive whole processes; the SQL's, those of tests/core and the MCP tools' tests.",
           "Mutants of webhooks._hex_signed, which webhooks.KINDS calls at import, run in a copy of the repository.",
           "",
           "| area | mutants | killed | survived | no tests | equivalent | not run | score |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    sections = []
    for result in results:
        title = {**AREAS, **EXTRA}[result.name][0]
        counts = {"killed": 0, "survived": 0, "no tests": 0, "equivalent": 0, "not run": 0}
        left = []
        for outcome in result.outcomes:
            if outcome.status in KILLED:
                counts["killed"] += 1
            elif outcome.status == "not run":
                counts["not run"] += 1
            elif outcome.key in known or (outcome.status in ("survived", "equivalent") and _case_only(outcome, rules)):
                counts["equivalent"] += 1
                used.add(outcome.key)
            else:
                counts["no tests" if outcome.status == "no tests" else "survived"] += 1
                left.append(outcome)
        run = len(result.outcomes) - counts["not run"] - counts["equivalent"]
        score = f"{100 * counts['killed'] / run:.1f} %" if run else "–"
        out.append(f"| {title} | {len(result.outcomes)} | {counts['killed']} | {counts['survived']} | "
                   f"{counts['no tests']} | {counts['equivalent']} | {counts['not run']} | {score} |")  # fmt: skip
        section = [f"## {title}", ""]
        if result.seconds is not None:
            section.append(f"Ran in {result.seconds / 60:.0f} min.\n")
        if counts["not run"] and result.name != "sql":
            section.append(_rest_estimate(result.name, counts["not run"]) + "\n")
        if not left:
            section.append("No survivors.\n")
        groups: dict[str, list[Outcome]] = {}
        for outcome in left:
            groups.setdefault(outcome.group, []).append(outcome)
        for group, members in groups.items():
            section += [f"### {group} ({len(members)})", "", "```diff"]
            for outcome in members:
                label = "no test reaches it" if outcome.status == "no tests" else outcome.status
                if outcome.key in kept:
                    label += f", kept: {kept[outcome.key]}"
                    used_kept.add(outcome.key)
                about = f" {outcome.label}" if outcome.label else ""
                section.append(f"# {outcome.where}{about} ({label})")
                section += [line for line in outcome.diff.splitlines()[2:] if line[:1] in "-+"]
            section += ["```", ""]
        sections.append("\n".join(section))
    stale = sorted((set(known) - used) | (set(kept) - used_kept))
    out.append("")
    if stale:
        out += ["Entries of equivalent.toml that matched no surviving mutant (stale, or their area was not run):", ""]
        out += [f"- `{key}`" for key in stale] + [""]
    return "\n".join(out + sections)


def main() -> None:
    # A shell's background job starts with SIGINT ignored, and children inherit
    # that: the tests that stop a process with SIGINT would fail for every mutant.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--area", action="append", choices=[*AREAS, *EXTRA],
                        help="an area to run (repeatable); default: every area but store")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    parser.add_argument("--resume", action="store_true", help="run only the mutants not yet decided")
    parser.add_argument("--survivors", action="store_true",
                        help="run again only the mutants that survived the last run (after adding tests)")
    parser.add_argument("--report-only", action="store_true", help="write the report from the last results")
    parser.add_argument("--out", type=Path, default=REPORT, help="where the report goes (default mutation/report.md)")
    args = parser.parse_args()
    timings_path = LOGS / "timings.json"
    LOGS.mkdir(exist_ok=True)
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    for area in [] if args.report_only else args.area or list(AREAS):
        began = time.monotonic()
        if area == "sql":
            sql.SELECTION = [*_files("sql"), "-m", "not fuzz"]
            sql.run(jobs=args.jobs, rerun=not (args.resume or args.survivors), survivors=args.survivors,
                    skip=frozenset(equivalents()[0]))  # fmt: skip
        else:
            run_python(area, args.jobs, args.resume, LOGS / f"mutmut-{area}.log", args.survivors)
        # A resumed or survivors-only run adds to the area's time rather than replacing it.
        earlier = timings.get(area, 0.0) if (args.resume or args.survivors) else 0.0
        timings[area] = earlier + time.monotonic() - began
        timings_path.write_text(json.dumps(timings))
        print(f"{area}: done in {timings[area] / 60:.0f} min", flush=True)
    # The report covers every area from the last results each has (the store
    # extra only once it has been run).
    shown = list(AREAS) + [a for a in EXTRA if a in timings]
    results = [AreaResult(a, sql_outcomes() if a == "sql" else python_outcomes(a), timings.get(a)) for a in shown]
    args.out.write_text(report(results) + "\n", "utf-8")
    print(re.sub(r"(?s)\n## .*", "", args.out.read_text("utf-8")))


if __name__ == "__main__":
    main()
