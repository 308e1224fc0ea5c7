"""The MCP server over real stdio, as Claude Code runs it (`switchboard-local mcp`).

    .venv/bin/python bench/mcp.py [--runs R] [--todos N]

Speaks raw JSON-RPC lines to a child process (no client library in the
measured path) and prints medians over R runs of:
- process start → `initialize` reply (the SDK import dominates);
- the round trip of `claim_next` + `complete` (p50 and p99 over N todos, one
  after the other, at full durability), and of `complete` with `claim_next:
  true` (one call and one commit per job) over N more;
- the byte size of the `tools/list` reply, for every tool and for an agent
  limited to two.
Writes the figures as JSON to bench/results-mcp.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from switchboard_local.core import (
    agents,
    todos,  # noqa: E402
)
from switchboard_local.core.store.opener import open_store  # noqa: E402
from switchboard_local.core.todo_model import NewTodo  # noqa: E402

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}


def command() -> list[str]:
    """The console script Claude Code would launch, else the module."""
    script = shutil.which("switchboard-local", path=str(Path(sys.executable).parent))
    return [script, "mcp"] if script else [sys.executable, "-m", "switchboard_local", "mcp"]


class Server:
    """One `mcp` child process and a line-at-a-time JSON-RPC conversation with it."""

    def __init__(self, db: Path, *args: str) -> None:
        env = {**os.environ, "SWITCHBOARD_DB": str(db)}
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [*command(), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        self._next_id = 1

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def reply(self) -> bytes:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            assert line, "the server closed stdout"
            if b'"id"' in line:  # skip notifications (the doorbell)
                return line

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        answer = json.loads(self.reply())
        assert "result" in answer, answer
        return answer["result"]

    def initialize(self) -> float:
        """Seconds from process start to the initialize reply."""
        self.send(INITIALIZE)
        self.reply()
        elapsed = time.perf_counter() - self.started
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return elapsed

    def tools_list_bytes(self) -> int:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": "tools/list", "params": {}})
        return len(self.reply().rstrip(b"\n"))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def call(server: Server, tool: str, **arguments: Any) -> dict[str, Any]:
    result = server.request("tools/call", {"name": tool, "arguments": arguments})
    assert not result.get("isError"), result
    return result["structuredContent"]


async def prepare(db: Path, n: int) -> None:
    async with await open_store(db) as store:
        await agents.add(store, "drainer", queues=["bench"], tools=["claim_next", "complete"])
        for i in range(n):
            await todos.create(store, NewTodo(queue="bench", title=f"job {i}", payload={"n": i}))


def one_run(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        asyncio.run(prepare(db, 2 * n))

        server = Server(db)
        startup = server.initialize()
        full_list = server.tools_list_bytes()
        trips = []
        for _ in range(n):
            start = time.perf_counter()
            todo = call(server, "claim_next", queue="bench")["todo"]
            call(server, "complete", id=todo["id"], lease_token=todo["lease_token"])
            trips.append(time.perf_counter() - start)
        # One call per job: complete with claim_next hands over the next todo.
        chained = []
        todo = call(server, "claim_next", queue="bench")["todo"]
        while todo is not None:
            start = time.perf_counter()
            todo = call(server, "complete", id=todo["id"], lease_token=todo["lease_token"], claim_next=True)["next"]
            chained.append(time.perf_counter() - start)
        assert len(chained) == n and call(server, "claim_next")["empty"] is True
        server.close()

        scoped = Server(db, "--agent", "drainer")
        scoped.initialize()
        scoped_list = scoped.tools_list_bytes()
        scoped.close()

    trips.sort()
    chained.sort()
    return {
        "startup_to_initialize_ms": startup * 1000,
        "claim_next_complete_p50_ms": statistics.median(trips) * 1000,
        "claim_next_complete_p99_ms": trips[min(len(trips) - 1, int(len(trips) * 0.99))] * 1000,
        "complete_claim_next_p50_ms": statistics.median(chained) * 1000,
        "complete_claim_next_p99_ms": chained[min(len(chained) - 1, int(len(chained) * 0.99))] * 1000,
        "tools_list_bytes": full_list,
        "tools_list_bytes_two_tools": scoped_list,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--todos", type=int, default=200)
    args = parser.parse_args()

    runs = [one_run(args.todos) for _ in range(args.runs)]
    medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    print(f"switchboard-local mcp over stdio, {args.runs} runs, {args.todos} todos each ({' '.join(command())})")
    print(f"  process start -> initialize reply   {medians['startup_to_initialize_ms']:8.0f} ms (median)")
    print(f"  claim_next + complete round trip    {medians['claim_next_complete_p50_ms']:8.2f} ms p50, "
          f"{medians['claim_next_complete_p99_ms']:.2f} ms p99 (medians of runs)")  # fmt: skip
    print(f"  complete with claim_next            {medians['complete_claim_next_p50_ms']:8.2f} ms p50, "
          f"{medians['complete_claim_next_p99_ms']:.2f} ms p99 (one call per job)")  # fmt: skip
    print(f"  tools/list reply                    {medians['tools_list_bytes']:8.0f} bytes (13 tools), "
          f"{medians['tools_list_bytes_two_tools']:.0f} bytes (an agent with 2)")  # fmt: skip
    results = {"runs": args.runs, "todos": args.todos, "medians": medians, "each_run": runs}
    (ROOT / "bench" / "results-mcp.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
