"""Mutation testing for the SQL SQLite runs: switchboard_local/core/store/shared.sql
(the statements both backends run as written) and core/store/sqlite/queries.sql.

No Python mutation tool reads SQL, so this one does it for the statements that
carry the lifecycle and ingestion rules (TARGETS). Each mutant changes one
thing in one statement: a WHERE/AND/OR condition dropped, a comparison
flipped, IS NULL <-> IS NOT NULL, a NOT dropped, a CASE's branches swapped,
MIN <-> MAX, an ORDER BY direction flipped, + <-> -, an integer one higher, a
state literal replaced, a conflict clause changed.

Which tests run for a mutant: once, the suite runs with sql_recorder.py, which
notes per test the named statements it executed (in the pytest process:
statements run only by subprocesses it starts are not seen). A mutant runs
those tests, fastest first, in a copy of the repository whose file of that
statement is the mutant (PYTHONPATH and the working directory point at the copy, so the
subprocesses the tests start use it too). Tests that fail or time out: killed.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import copies

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "switchboard_local" / "core" / "store"
SHARED = STORE / "shared.sql"
QUERIES = STORE / "sqlite" / "queries.sql"
FILES = (SHARED, QUERIES)  # the statements SQLite runs: each in one of them
WORK = ROOT / "mutation" / ".work"
COVERAGE = WORK / "sql-tests.json"
RESULTS = WORK / "sql-results.json"

# The statements whose rules the tests must pin (a trailing * is a prefix).
TARGETS = (
    "claim_*", "end_attempt", "end_lapsed_attempts", "attempts_of_todo", "recover_lapsed_leases",
    "any_lapsed_lease", "heartbeat", "complete", "fail", "release", "redrive", "stats", "insert_todo*",
    "live_todo_by_key", "seen_delivery", "insert_event", "remember_delivery", "prune_*",
    "keep_pruned_delivery", "forget_delivery_keys", "list_todos*", "list_events", "todo_arrivals",
    "event_in_scope", "event_in_queues", "todo_ids_of_event", "link_event_todo", "events_in_play",
)  # fmt: skip
STATES = {"pending": "failed", "claimed": "pending", "done": "failed", "failed": "done",
          "lease_expired": "released"}  # fmt: skip
FLIPS = {"<=": "<", "<": "<=", ">=": ">", ">": ">=", "=": "<>", "<>": "=", "!=": "=", "<<": ">>"}
# Words after which a new condition (or expression) starts, or at which one ends.
STARTS = {"WHERE", "AND", "OR", "WHEN", "ON", "HAVING"}
ENDS = {"AND", "OR", "THEN", "ELSE", "END", "ORDER", "GROUP", "LIMIT", "RETURNING", "UNION", "SET", "FROM",
        "OFFSET", "DO"}  # fmt: skip
KEYWORDS = STARTS | ENDS | {"SELECT", "UPDATE", "DELETE", "INSERT", "INTO", "VALUES", "CASE", "IS", "NOT", "NULL",
                            "IN", "EXISTS", "AS", "BY", "ASC", "DESC", "JOIN", "LEFT", "CONFLICT", "NOTHING",
                            "IGNORE", "ALL", "INDEXED", "DISTINCT", "LIKE", "CAST", "INTEGER"}  # fmt: skip

_TOKEN = re.compile(
    r"""(?P<space>\s+)|(?P<comment>--[^\n]*)|(?P<string>'(?:[^']|'')*')|(?P<param>:[A-Za-z_]\w*)"""
    r"""|(?P<number>\d+)|(?P<word>[A-Za-z_][\w.]*)|(?P<op><<|>>|<=|>=|<>|!=|\|\||[-+*/%=<>(),;])"""
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    start: int
    end: int
    depth: int  # parentheses around it (an opening one counts as outside, a closing one too)

    @property
    def word(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


@dataclass(frozen=True)
class Mutant:
    statement: str
    description: str  # stable: the statement and what changed, used by equivalent.toml
    original: str  # the whole file, as it is
    mutated: str  # the whole file, with the mutant
    file: str = "switchboard_local/core/store/sqlite/queries.sql"  # the statement's file, from the repository

    @property
    def key(self) -> str:
        return f"{self.statement}: {self.description}"

    def diff(self) -> str:
        return "\n".join(
            difflib.unified_diff(
                self.original.splitlines(), self.mutated.splitlines(), f"{self.file} ({self.statement})",
                f"{self.file} ({self.statement}, mutant)", lineterm="", n=1,
            )
        )  # fmt: skip


def statements(text: str) -> dict[str, tuple[int, int]]:
    """name -> (start, end) offsets of its statement text in a file of statements (as queries.py parses it)."""
    spans: dict[str, tuple[int, int]] = {}
    name, start = None, 0
    offset = 0
    for line in text.splitlines(keepends=True):
        if line.startswith("-- name:"):
            if name is not None:
                spans[name] = (start, offset)
            name, start = line.removeprefix("-- name:").strip(), offset + len(line)
        offset += len(line)
    if name is not None:
        spans[name] = (start, offset)
    return spans


def is_target(name: str) -> bool:
    return any(name.startswith(t[:-1]) if t.endswith("*") else name == t for t in TARGETS)


def tokenize(sql: str) -> list[Token]:
    tokens, depth = [], 0
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup
        assert kind is not None
        if kind in ("space", "comment"):
            continue
        text = match.group()
        if text == ")":
            depth -= 1
        tokens.append(Token(kind, text, match.start(), match.end(), depth))
        if text == "(":
            depth += 1
    covered = sum(len(m.group()) for m in _TOKEN.finditer(sql))
    if covered != len(sql):
        raise ValueError("a statement has text the SQL mutator cannot read")
    return tokens


def _operand(tokens: list[Token], index: int) -> bool:
    """Whether the token ends an operand (so a following * or - is binary)."""
    token = tokens[index]
    return token.kind in ("param", "number", "string") or token.text == ")" or (
        token.kind == "word" and token.word not in KEYWORDS
    )


def _chains(tokens: list[Token]) -> Iterator[tuple[Token | None, list[tuple[int, int]], list[int]]]:
    """Boolean chains: (the word before it, its operands as token index ranges, its AND/OR indexes)."""
    for opener in range(len(tokens)):
        head = tokens[opener]
        if head.word not in ("WHERE", "WHEN", "HAVING") and head.text != "(":
            continue
        depth = head.depth + (1 if head.text == "(" else 0)
        operands, operators, begin = [], [], opener + 1
        i = begin
        while i < len(tokens):
            token = tokens[i]
            if token.depth < depth or (token.depth == depth and (token.word in ENDS - {"AND", "OR"} or token.text in ",;")):
                break
            if token.depth == depth and token.word == "CASE":  # skip to its END
                nested = 1
                while nested and i + 1 < len(tokens):
                    i += 1
                    nested += {"CASE": 1, "END": -1}.get(tokens[i].word, 0)
            elif token.depth == depth and token.word in ("AND", "OR"):
                operands.append((begin, i))
                operators.append(i)
                begin = i + 1
            i += 1
        operands.append((begin, i))
        if head.text == "(" and not operators:
            continue  # a parenthesised single expression or a call's arguments
        yield head, operands, operators


def mutants(name: str, sql: str) -> Iterator[tuple[str, str]]:
    """(description, mutated text) for one statement's text."""
    tokens = tokenize(sql)

    def cut(start: int, end: int, new: str = "") -> str:
        return sql[:start] + new + sql[end:]

    def span(first: int, last: int) -> str:
        text = " ".join(sql[tokens[first].start : tokens[last - 1].end].split())
        return text if len(text) <= 70 else text[:67] + "..."

    # Conditions dropped.
    for head, operands, operators in _chains(tokens):
        if not operators:
            if head is not None and head.word == "WHERE" and operands[0][1] > operands[0][0]:
                first, last = operands[0]
                yield f"WHERE {span(first, last)!r} dropped", cut(head.start, tokens[last - 1].end).rstrip()
            continue
        for n, (first, last) in enumerate(operands):
            if first >= last:
                continue
            if n == 0:  # with the operator after it
                yield f"condition {span(first, last)!r} dropped", cut(tokens[first].start, tokens[operators[0] + 1].start)
            else:
                yield f"condition {span(first, last)!r} dropped", cut(tokens[operators[n - 1] - 1].end, tokens[last - 1].end)

    set_depth: int | None = None
    assigning = False
    for i, token in enumerate(tokens):
        word = token.word
        # Inside SET a = ..., b = ...: the first = of each item assigns.
        if word == "SET":
            set_depth, assigning = token.depth, True
        elif set_depth is not None and token.depth == set_depth and (word in ("WHERE", "RETURNING", "FROM") or token.text == ";"):
            set_depth = None
        elif set_depth is not None and token.depth == set_depth and token.text == ",":
            assigning = True
        if token.kind == "op" and token.text in FLIPS:
            if token.text == "=" and assigning and set_depth is not None and token.depth == set_depth:
                assigning = False
                continue
            before = sql[max(0, tokens[i - 1].start) : token.start].strip()
            after = tokens[i + 1].text if i + 1 < len(tokens) else ""
            yield f"`{before} {token.text} {after}` -> `{FLIPS[token.text]}`", cut(token.start, token.end, FLIPS[token.text])
        elif token.kind == "op" and token.text in "+-*" and i and _operand(tokens, i - 1):
            new = {"+": "-", "-": "+", "*": "/"}[token.text]
            yield f"`{tokens[i - 1].text} {token.text} {tokens[i + 1].text}` -> `{new}`", cut(token.start, token.end, new)
        elif token.kind == "number" and tokens[i - 1].word != "SELECT":
            yield f"`{tokens[i - 1].text} {token.text}` -> {int(token.text) + 1}", cut(token.start, token.end, str(int(token.text) + 1))
        elif token.kind == "string" and token.text.strip("'") in STATES:
            new = STATES[token.text.strip("'")]
            yield f"{token.text} -> '{new}' (at {tokens[i - 1].text} {token.text})", cut(token.start, token.end, f"'{new}'")
        elif word == "IS":
            following = tokens[i + 1]
            if following.word == "NOT":
                yield f"`{tokens[i - 1].text} IS NOT NULL` -> IS NULL", cut(token.end, following.end)
            elif following.word == "NULL":
                yield f"`{tokens[i - 1].text} IS NULL` -> IS NOT NULL", cut(token.end, token.end, " NOT")
        elif word == "NOT" and tokens[i - 1].word != "IS":
            yield f"NOT dropped before `{tokens[i + 1].text}`", cut(token.start, tokens[i + 1].start)
        elif word in ("MIN", "MAX") and i + 1 < len(tokens) and tokens[i + 1].text == "(":
            new = "MAX" if word == "MIN" else "MIN"
            yield f"{word}(...) -> {new} (at {span(i, i + 3)!r})", cut(token.start, token.end, new)
        elif word == "CASE":
            yield from _swap_case(sql, tokens, i)
        elif word == "BY" and tokens[i - 1].word == "ORDER":
            yield from _flip_order(sql, tokens, i)
        elif word == "CONFLICT":
            yield from _conflict(sql, tokens, i)
        elif word == "OR" and tokens[i - 1].word == "INSERT":
            yield "INSERT OR IGNORE -> INSERT", cut(tokens[i - 1].end, tokens[i + 1].end)
        elif word == "UNION":
            end = i + 2 if tokens[i + 1].word == "ALL" else i + 1
            yield "first UNION branch dropped", sql[tokens[end].start :]
            yield "second UNION branch dropped", cut(token.start, _statement_tail(tokens, end)).rstrip()


def _statement_tail(tokens: list[Token], start: int) -> int:
    """Where the branch starting at ``start`` ends: its top-level LIMIT/ORDER, else the end."""
    for token in tokens[start:]:
        if token.depth == tokens[start].depth and token.word in ("LIMIT", "ORDER"):
            return token.start
    return tokens[-1].end


def _swap_case(sql: str, tokens: list[Token], at: int) -> Iterator[tuple[str, str]]:
    """CASE WHEN c THEN a ELSE b END -> CASE WHEN c THEN b ELSE a END (one WHEN only)."""
    depth, marks, i = tokens[at].depth, {}, at + 1
    while i < len(tokens):
        word = tokens[i].word
        if tokens[i].depth == depth and word in ("WHEN", "THEN", "ELSE", "END"):
            if word in marks:
                return  # several WHENs: left alone
            marks[word] = i
            if word == "END":
                break
        elif word == "CASE":
            return
        i += 1
    if set(marks) != {"WHEN", "THEN", "ELSE", "END"}:
        return
    then = sql[tokens[marks["THEN"] + 1].start : tokens[marks["ELSE"] - 1].end]
    other = sql[tokens[marks["ELSE"] + 1].start : tokens[marks["END"] - 1].end]
    swapped = (
        sql[: tokens[marks["THEN"] + 1].start] + other + sql[tokens[marks["ELSE"] - 1].end : tokens[marks["ELSE"] + 1].start]
        + then + sql[tokens[marks["END"] - 1].end :]
    )  # fmt: skip
    condition = sql[tokens[marks["WHEN"] + 1].start : tokens[marks["THEN"] - 1].end]
    yield f"CASE WHEN {condition} branches swapped", swapped


def _flip_order(sql: str, tokens: list[Token], at: int) -> Iterator[tuple[str, str]]:
    depth, i, begin = tokens[at].depth, at + 1, at + 1
    while True:
        ends = i >= len(tokens) or tokens[i].depth < depth or (
            tokens[i].depth == depth and (tokens[i].text in ",;)" or tokens[i].word in ("LIMIT", "OFFSET"))
        )
        if ends:
            last = tokens[i - 1]
            item = sql[tokens[begin].start : last.end]
            if last.word in ("ASC", "DESC"):
                new = "ASC" if last.word == "DESC" else "DESC"
                yield f"ORDER BY {item} -> {new}", sql[: last.start] + new + sql[last.end :]
            else:
                yield f"ORDER BY {item} -> DESC", sql[: last.end] + " DESC" + sql[last.end :]
            if i >= len(tokens) or tokens[i].text != ",":
                return
            begin = i + 1
        i += 1


def _conflict(sql: str, tokens: list[Token], at: int) -> Iterator[tuple[str, str]]:
    on = tokens[at - 1]
    do = next(i for i in range(at, len(tokens)) if tokens[i].word == "DO")
    action = tokens[do + 1]
    if action.word == "NOTHING":
        yield "ON CONFLICT DO NOTHING dropped", sql[: on.start].rstrip() + sql[action.end :]
    else:
        end = next((t.start for t in tokens[do:] if t.word == "RETURNING"), tokens[-1].end)
        yield "ON CONFLICT DO UPDATE -> DO NOTHING", sql[: action.start] + "NOTHING" + sql[end:]


def all_mutants(texts: dict[Path, str] | None = None) -> list[Mutant]:
    """Every mutant of the target statements (of FILES, or of the given texts by file),
    each with the whole file as it would be."""
    texts = {path: path.read_text("utf-8") for path in FILES} if texts is None else texts
    return [mutant for path, text in texts.items() for mutant in _file_mutants(path, text)]


def _file_mutants(path: Path, text: str) -> list[Mutant]:
    file = path.resolve().relative_to(ROOT).as_posix() if path.is_absolute() else path.as_posix()
    found: list[Mutant] = []
    for name, (start, end) in statements(text).items():
        if not is_target(name):
            continue
        body = text[start:end]
        # Only the statement itself (not its description comments) is mutated.
        lines = body.splitlines(keepends=True)
        skip = sum(len(line) for line in _leading_comments(lines))
        sql_start = start + skip
        sql = text[sql_start:end]
        seen: dict[str, int] = {}
        after = sql[len(sql.rstrip()) :]  # the blank line before the next statement's name
        for description, mutated in mutants(name, sql):
            # A mutant that ends the text where it cut keeps that line, or the next
            # `-- name:` would join its last line and the next statement vanish.
            mutated = mutated.rstrip() + after
            if mutated == sql:
                continue
            seen[description] = seen.get(description, 0) + 1
            if seen[description] > 1:  # the same text twice in one statement
                description += f" (occurrence {seen[description]})"
            found.append(Mutant(name, description, text, text[:sql_start] + mutated + text[end:], file))
    return found


def _leading_comments(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        if line.strip().startswith("--") or not line.strip():
            out.append(line)
        else:
            break
    return out


# ---- running ----


def record(timeout: float = 3600) -> dict[str, object]:
    """Run the suite once with sql_recorder.py; write and return {statement: [tests]}, durations."""
    WORK.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).parent)]),
           "SQL_RECORDER_OUT": str(COVERAGE)}  # fmt: skip
    command = [sys.executable, "-m", "pytest", "-q", "-p", "sql_recorder", "-p", "no:cacheprovider", *SELECTION]
    done = subprocess.run(command, cwd=ROOT, env=env, timeout=timeout, check=False, preexec_fn=copies._default_sigint)
    if done.returncode != 0:
        raise SystemExit(f"the suite failed while recording which tests run which statements ({done.returncode})")
    return json.loads(COVERAGE.read_text())


# The tests whose statements are recorded: tests/core's files and the MCP tools'
# tests (run.py sets it from its AREA_TESTS["sql"]); the edges' tests reach the
# SQL through the same verbs.
SELECTION = ["tests/", "-m", "not fuzz", "--ignore=tests/processes/test_packaging.py"]


def run(jobs: int = 2, only: list[str] | None = None, rerun: bool = False, survivors: bool = False,
        log=print, skip: frozenset[str] = frozenset()) -> dict[str, dict]:  # noqa: ANN001
    """Run every mutant (or those of the ``only`` statements) not yet decided; return all results by key.
    With ``rerun`` (a run from scratch) or ``survivors`` (the last run's survivors count as undecided) the
    tests' statements are recorded anew: only a resumed run goes on with the map it began with.
    The mutants of ``skip`` (equivalent.toml's: they survive, at the cost of all their tests) are not run."""
    resuming = COVERAGE.exists() and not (rerun or survivors)
    coverage = json.loads(COVERAGE.read_text()) if resuming else record()
    tests_of: dict[str, list[str]] = coverage["statements"]  # type: ignore[assignment]
    durations: dict[str, float] = coverage["durations"]  # type: ignore[assignment]
    results: dict[str, dict] = json.loads(RESULTS.read_text()) if RESULTS.exists() and not rerun else {}
    if survivors:
        results = {key: result for key, result in results.items() if result["status"] in ("killed", "timeout")}
    decided = set(results) | skip
    todo = [m for m in all_mutants() if (only is None or m.statement in only) and m.key not in decided]
    stale = set(results) - {m.key for m in all_mutants()}
    for key in stale:
        del results[key]
    log(f"sql: {len(todo)} mutants to run ({len(results)} already decided)")

    def job_of(mutant: Mutant) -> copies.Job:
        tests = sorted(tests_of.get(mutant.statement, []), key=lambda t: durations.get(t, 0.0))
        budget = 120 + 4 * sum(durations.get(t, 1.0) for t in tests)
        return copies.Job({mutant.file: mutant.mutated}, tests, budget)

    for n, (mutant, result) in enumerate(copies.run_all(todo, job_of, jobs), 1):
        results[mutant.key] = {**result, "statement": mutant.statement}
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True))
        log(f"sql [{n}/{len(todo)}] {result['status']:8} {result['seconds']:6.1f}s {mutant.key}")
    return results


if __name__ == "__main__":
    for m in all_mutants():
        print(m.key)
