"""Count what hostile input does to each surface of a checkout: tracebacks, 5xx, hangs.

    python scripts/hostile_census.py [--root CHECKOUT] [--random N]

Throws a fixed corpus of hostile cases (the hardening issue's, one by one)
and N seeded random ones at real processes of the checkout at CHECKOUT
(default: this one), run with this Python: HTTP requests to `serve`, lines to
`mcp` over stdio, and argument vectors to the CLI. Prints one table row per
surface: cases tried, tracebacks on stderr, 5xx answers (HTTP) or lines left
unanswered (MCP), hangs (no answer within the bound), and raw control
characters written to a log or a terminal. The fuzz suite (pytest -m fuzz)
keeps these at zero; this script is for comparing two checkouts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import select
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
HANG_SECONDS = 8.0


@dataclass
class Tally:
    cases: int = 0
    tracebacks: int = 0
    failures: int = 0  # 5xx (HTTP), unanswered requests (MCP), usage format broken (CLI)
    hangs: int = 0
    raw_controls: int = 0
    notes: list[str] = field(default_factory=list)


def env_for(root: Path, db: Path) -> dict[str, str]:
    # cwd is the checkout too: `python -m` puts the working directory first on sys.path.
    return {**os.environ, "PYTHONPATH": str(root), "SWITCHBOARD_DB": str(db), "SWITCHBOARD_BUSY_TIMEOUT": "1"}


def cli(root: Path, db: Path, *args: str, timeout: float = HANG_SECONDS, stdin: bytes = b"") -> tuple[int | None, bytes, bytes]:
    try:
        done = subprocess.run([sys.executable, "-m", "switchboard_local", *args], input=stdin, capture_output=True,
                              env=env_for(root, db), timeout=timeout, cwd=root)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        return None, exc.stdout or b"", exc.stderr or b""
    return done.returncode, done.stdout, done.stderr


# ---------------------------------------------------------------- HTTP


def http_census(root: Path, work: Path, n_random: int, rng: random.Random) -> Tally:
    tally = Tally()
    db = work / "http.db"
    cli(root, db, "source", "add", "gh", "--kind", "github", "--secret", "s3cret")
    port = free_port()
    log = open(work / "serve.log", "wb")
    # Where the checkout has them, timeouts within the hang bound (else a slow body waits forever).
    options = ["--head-timeout", "3", "--body-timeout", "3"] if b"--body-timeout" in cli(root, db, "serve", "--help")[1] else []
    proc = subprocess.Popen([sys.executable, "-m", "switchboard_local", "serve", "--port", str(port), *options],
                            env=env_for(root, db), stdout=log, stderr=subprocess.STDOUT, cwd=root)  # fmt: skip
    try:
        wait_listening(port)
        cases = [
            b"POST /hooks/gh HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (64 * 1024 * 1024) + b"\r\n\r\n",
            b"POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{}",  # a body that never ends
            b"POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-",  # a head that never ends
            b"POST /hooks/x%0AFAKE%20INFO%20forged HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
            b"POST /hooks/x%1B%5B2J%1B%5D0;pwned%07 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
            b"POST /hooks/gh HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"GARBAGE\x00\xff\r\n\r\n",
            b"POST /hooks/gh HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST /hooks/gh HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256=\xff\xfe\r\nContent-Length: 2\r\n\r\n{}",
        ]
        for _ in range(n_random):
            cases.append(random_request(rng))
        for raw in cases:
            tally.cases += 1
            status = exchange(port, raw)
            if status is None:
                tally.hangs += 1
            elif status >= 500:
                tally.failures += 1
        if proc.poll() is not None:
            tally.notes.append("serve died")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    output = (work / "serve.log").read_bytes()
    if os.environ.get("CENSUS_KEEP_LOG"):
        Path(os.environ["CENSUS_KEEP_LOG"]).write_bytes(output)
    tally.tracebacks = output.count(b"Traceback")
    tally.raw_controls = sum(1 for line in output.decode("utf-8", "replace").splitlines() if RAW_CONTROL.search(line))
    tally.raw_controls += len(re.findall(rb"^FAKE INFO forged", output, re.M))  # a forged log line
    return tally


def random_request(rng: random.Random) -> bytes:
    method = rng.choice([b"POST", b"GET", b"PUT", b"DELETE", b"\x00", b"POST"])
    path = rng.choice([b"/hooks/gh", b"/hooks/nope", b"/healthz", b"/", b"/hooks/%00", b"/hooks/" + rng.randbytes(8).hex().encode()])
    headers = [b"Host: x"]
    for _ in range(rng.randint(0, 4)):
        name = rng.choice([b"X-GitHub-Event", b"X-GitHub-Delivery", b"Content-Type", b"X-Hub-Signature-256", b"X-Odd"])
        value = bytes(rng.choice(range(0x20, 0xff)) for _ in range(rng.randint(0, 40)))
        headers.append(name + b": " + value)
    body = rng.choice([b"{}", b'{"action": "opened"}', rng.randbytes(rng.randint(0, 300)), b"[" * 5000, b""])
    headers.append(b"Content-Length: " + str(len(body)).encode())
    return method + b" " + path + b" HTTP/1.1\r\n" + b"\r\n".join(headers) + b"\r\nConnection: close\r\n\r\n" + body


def exchange(port: int, raw: bytes) -> int | None:
    """Send, then read the status line; None when none comes within the bound (a hang)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=HANG_SECONDS) as conn:
            try:
                conn.sendall(raw)
            except OSError:
                pass  # the server may close early (431): its answer may still be there
            deadline = time.monotonic() + HANG_SECONDS
            data = b""
            while b"\r\n" not in data:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                ready, _, _ = select.select([conn], [], [], left)
                if not ready:
                    return None
                chunk = conn.recv(65536)
                if not chunk:
                    return 0 if not data else parse_status(data)  # closed without an answer: not a hang
                data += chunk
            return parse_status(data)
    except OSError:
        return 0


def parse_status(data: bytes) -> int:
    match = re.match(rb"HTTP/1\.[01] (\d{3})", data)
    return int(match.group(1)) if match else 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("serve did not start")


# ---------------------------------------------------------------- MCP


def mcp_census(root: Path, work: Path, n_random: int, rng: random.Random) -> Tally:
    tally = Tally()
    db = work / "mcp.db"
    cli(root, db, "todo", "create", "--queue", "q", "--title", "t")
    proc = subprocess.Popen([sys.executable, "-m", "switchboard_local", "mcp"], env=env_for(root, db), cwd=root,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdin and proc.stdout and proc.stderr
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "census", "version": "1"}}}  # fmt: skip
    send(proc, json.dumps(init).encode())
    read_answer(proc, HANG_SECONDS * 4)
    send(proc, b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def call(n: int, name: str, arguments: str) -> bytes:
        return (b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "%s", "arguments": %s}}'
                % (n, name.encode(), arguments.encode()))  # fmt: skip

    cases: list[tuple[bytes, bool]] = [  # (line, expects an answer)
        (b"this is not json", True),
        (call(1, "create_for", '{"queue": "q", "title": "x\\ud800"}'), True),
        (b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": ' + b"[" * 10000 + b"]" * 10000 + b"}", True),
        (b"[1, 2, 3]", True),
        (b"42", True),
        (b'{"jsonrpc": "2.0", "id": 3}', True),
        (b'{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": "nope"}', True),
        (call(5, "get_todo", '{"id": ' + "9" * 5000 + "}"), True),
        (b'{"jsonrpc": "2.0", "method": "notifications/x", "params": ' + b"[" * 5000 + b"}", False),
        (b'{"jsonrpc": "2.0", "id": 6, "method": "ping"' + b" " * (17 * 1024 * 1024) + b"}", True),
    ]
    tools = ["list_todos", "get_todo", "claim", "claim_next", "complete", "fail", "create_for", "get_event", "nope"]
    for i in range(n_random):
        n = 100 + i
        kind = rng.randrange(4)
        if kind == 0:
            cases.append((rng.randbytes(rng.randint(1, 200)).replace(b"\n", b" "), True))
        elif kind == 1:
            text = call(n, rng.choice(tools), json.dumps({"id": rng.choice([1, -1, "x", None, 2**70, 1.5])}))
            cases.append((text[: rng.randint(10, len(text))], True))  # often cut short
        else:
            args = {rng.choice(["id", "title", "queue", "payload", "lease_token", "wait_seconds"]):
                    rng.choice([1, "x", None, [], {}, "\ud800", "a" * 1000, 1e308, -5]) for _ in range(3)}  # fmt: skip
            text = json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                               "params": {"name": rng.choice(tools), "arguments": args}})  # fmt: skip
            cases.append((text.encode("utf-8", "surrogatepass"), True))
    for line, expects in cases:
        tally.cases += 1
        if not send(proc, line):
            tally.notes.append("mcp died")
            tally.hangs += 1
            break
        if expects:
            answer = read_answer(proc, HANG_SECONDS)
            if answer is None:
                tally.failures += 1  # unanswered: an agent would hang
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        tally.notes.append("did not exit on EOF")
    err = proc.stderr.read()
    tally.tracebacks = err.count(b"Traceback")
    tally.raw_controls = sum(1 for line in err.decode("utf-8", "replace").splitlines() if RAW_CONTROL.search(line))
    return tally


def send(proc: subprocess.Popen, line: bytes) -> bool:
    try:
        proc.stdin.write(line + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        return True
    except (BrokenPipeError, OSError):
        return False


def read_answer(proc: subprocess.Popen, bound: float) -> bytes | None:
    """One line from stdout within ``bound`` seconds (answers and notifications alike)."""
    fd = proc.stdout.fileno()  # type: ignore[union-attr]
    ready, _, _ = select.select([fd], [], [], bound)
    if not ready:
        return None
    line = proc.stdout.readline()  # type: ignore[union-attr]
    return line or None


# ---------------------------------------------------------------- CLI


def cli_census(root: Path, work: Path, n_random: int, rng: random.Random) -> Tally:
    tally = Tally()
    db = work / "cli.db"
    cli(root, db, "todo", "create", "--queue", "q", "--title", "t")
    bad_utf8 = work / "bad.json"
    bad_utf8.write_bytes(b'{"a": "\xff\xfe"}')
    fifo = work / "fifo"
    os.mkfifo(fifo)
    foreign = work / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE todos (x)")
        conn.execute("PRAGMA user_version = 1")
    cases: list[tuple[str, ...]] = [
        ("todo", "create", "--queue", "q", "--title", "t", "--payload", "{bad"),
        ("todo", "complete", "1"),
        ("todo", "list", "--state", "bogus"),
        ("todo", "claim", "--lease", "-5"),
        ("todo", "create", "--queue", "q", "--title", "t", "--payload", f"@{bad_utf8}"),
        ("todo", "create", "--queue", "q", "--title", "t", "--payload", "@/dev/zero"),
        ("todo", "create", "--queue", "q", "--title", "t", "--payload", f"@{fifo}"),
        ("adapter", "add", "a", "--redis-url", "redis://:pw@localhost:notaport/0", "--mode", "stream", "--key", "k"),
        ("adapter", "list"),
        ("source", "add", "s", "--kind", "open", "--queue", "x://u:p@h:99999"),
        ("source", "list"),
        ("rule", "add", "--source", "s", "--where", "items.²=x", "--queue", "q"),
        ("todo", "create", "--queue", "q", "--title", "\x1b]0;pwned\x07\x1b[2J"),
        ("--db", "/dev/null", "todo", "list"),
        ("--db", "/proc/self/status", "todo", "list"),
        ("--db", str(foreign), "todo", "list"),
        ("source", "add", "gh", "--kind", "github", "--secret", "s"),
        ("source", "add", "gh", "--kind", "github", "--secret", "s"),
    ]
    words = ["todo", "create", "list", "claim", "show", "--queue", "--title", "--payload", "--lease", "--state", "--json",
             "-5", "nan", "1e999", "99999999999999999999", "\x1b[2J", "", "@-", "@/dev/null", "q", "{}", "[", "source",
             "add", "--kind", "github", "rule", "--where", "a.b=c", "events", "replay", "prune", "--max-events"]  # fmt: skip
    for _ in range(n_random):
        cases.append(tuple(rng.choice(words) for _ in range(rng.randint(1, 7))))
    for args in cases:
        tally.cases += 1
        code, out, err = cli(root, db, *args)
        if code is None:
            tally.hangs += 1
            continue
        if b"Traceback" in err:
            tally.tracebacks += 1
        elif code != 0 and not re.match(rb"switchboard-local: [a-z_]+: ", err):
            tally.failures += 1  # an error not in the one documented form
        if RAW_CONTROL.search((out + err).decode("utf-8", "replace").replace("\n", "").replace("\t", "")):
            tally.raw_controls += 1
    with sqlite3.connect(db) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM todos ORDER BY id")]
    tally.notes.append(f"todo ids {ids[:6]}{'…' if len(ids) > 6 else ''}")
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--random", type=int, default=200, help="seeded random cases per surface (default 200)")
    parser.add_argument("--only", default="http,mcp,cli")
    args = parser.parse_args()
    print(f"| surface | cases | tracebacks | 5xx / unanswered / bad error form | hangs | raw control chars out | notes |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, census in (("HTTP", http_census), ("MCP", mcp_census), ("CLI", cli_census)):
        if name.lower() not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            t = census(args.root.resolve(), Path(tmp), args.random, random.Random(1))
        print(f"| {name} | {t.cases} | {t.tracebacks} | {t.failures} | {t.hangs} | {t.raw_controls} | {'; '.join(t.notes)} |")


if __name__ == "__main__":
    main()
