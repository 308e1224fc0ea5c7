"""Start-up of the single-file binary beside the pip install.

    .venv/bin/python bench/startup.py [--runs R] [--binary PATH]

For each of the two ways to run `switchboard-local` (the executable that
packaging/build_binary.py makes, default dist/switchboard-local, built first
when it is missing; and the console script pip installed beside this
interpreter), prints the median over R runs of:
- `mcp`: process start → the `initialize` reply (what an agent waits for
  before its first tool call);
- `--version`: process start → exit (a CLI command's floor).
The runs alternate between the two (which goes first alternates too), on an
existing database, with a bare environment (PATH=/usr/bin:/bin, a HOME of its
own). Also prints the binary's size. Writes the figures as JSON to
bench/results-startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}


def to_initialize(program: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning `mcp` to its initialize reply; then hang up."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*program, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    proc.stdin.flush()
    reply = proc.stdout.readline()
    elapsed = time.perf_counter() - started
    assert b'"result"' in reply, reply
    proc.stdin.close()
    proc.wait(timeout=30)
    return elapsed


def to_exit(program: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning `--version` to its exit."""
    started = time.perf_counter()
    subprocess.run([*program, "--version"], env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def pip_program() -> list[str]:
    script = shutil.which("switchboard-local", path=str(Path(sys.executable).parent))
    if script is None:
        raise SystemExit(f"no switchboard-local console script beside {sys.executable}: pip install -e . first")
    return [script]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--binary", type=Path, default=ROOT / "dist" / "switchboard-local")
    args = parser.parse_args()
    if not args.binary.exists():
        print(f"{args.binary} is missing: building it", file=sys.stderr)
        subprocess.run([sys.executable, str(ROOT / "packaging" / "build_binary.py"), "--dist",
                        str(args.binary.parent)], check=True)  # fmt: skip
    programs = {"binary": [str(args.binary.resolve())], "pip": pip_program()}

    figures: dict[str, dict[str, list[float]]] = {name: {"mcp": [], "version": []} for name in programs}
    with tempfile.TemporaryDirectory() as tmp:
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "SWITCHBOARD_DB": str(Path(tmp) / "bench.db")}
        if sys.platform == "win32":
            env = {**os.environ, "SWITCHBOARD_DB": env["SWITCHBOARD_DB"]}
        for program in programs.values():  # untimed: the database's creation, a cold page cache
            to_initialize(program, env)
        for run in range(args.runs):
            order = list(programs) if run % 2 == 0 else list(reversed(programs))
            for name in order:
                figures[name]["mcp"].append(to_initialize(programs[name], env))
                figures[name]["version"].append(to_exit(programs[name], env))

    medians = {
        name: {what: statistics.median(times) * 1000 for what, times in f.items()} for name, f in figures.items()
    }
    size = args.binary.stat().st_size
    print(f"switchboard-local start-up, {args.runs} runs each, interleaved")
    print(f"  binary: {args.binary} ({size / 2**20:.1f} MiB)")
    print(f"  pip:    {programs['pip'][0]}")
    for what, label in (("mcp", "mcp: start -> initialize reply"), ("version", "--version: start -> exit")):
        binary, pip = medians["binary"][what], medians["pip"][what]
        print(f"  {label:32} binary {binary:6.0f} ms   pip {pip:6.0f} ms   binary/pip {binary / pip:.2f}")
    results = {
        "runs": args.runs,
        "binary_bytes": size,
        "medians_ms": medians,
        "each_run_ms": {
            name: {what: [t * 1000 for t in times] for what, times in f.items()} for name, f in figures.items()
        },
    }
    (ROOT / "bench" / "results-startup.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
