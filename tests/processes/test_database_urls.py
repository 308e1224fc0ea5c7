"""A PostgreSQL URL's password never reaches the screen, whatever shape the URL is in (issue 28 §3.4):
each command that opens the database, as a real process, on each URL libpq used to quote back."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.cli import REPO_ROOT
from support.redis_server import free_port

PASSWORD = "Zq9wXv7Kp3Jm"  # distinctive: none of its four-letter pieces occurs in any other output


def _shapes() -> dict[str, str]:
    port = free_port()  # nothing listens there: a URL that reached a connection would fail at once
    head, tail = PASSWORD[:6], PASSWORD[6:]
    return {
        "a bad percent-escape in the password": f"postgresql://alice:{PASSWORD}%zz@127.0.0.1:{port}/db",
        "an unclosed [ before the host": f"postgresql://alice:{PASSWORD}@[127.0.0.1:{port}/db",
        "an unencoded @ in the password": f"postgresql://alice:{head}@{tail}@127.0.0.1:{port}/db",
        "an unencoded / in the password": f"postgresql://alice:{head}/{tail}@127.0.0.1:{port}/db",
    }


COMMANDS = {
    "doctor": ["doctor"],
    "status": ["status"],
    "dashboard": ["dashboard"],
    "serve": ["serve", "--port", "0"],
    "mcp": ["mcp"],
}


def pieces(secret: str, size: int = 4) -> set[str]:
    return {secret[i : i + size] for i in range(len(secret) - size + 1)}


def test_no_command_shows_any_part_of_a_malformed_urls_password(tmp_path) -> None:
    runs = {}
    for shape, url in _shapes().items():
        for name, args in COMMANDS.items():
            env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"),
                   "PYTHONPATH": str(REPO_ROOT), "SWITCHBOARD_DB": url}  # fmt: skip
            runs[shape, name] = subprocess.Popen(
                [sys.executable, "-m", "switchboard_local", *args], env=env, cwd=tmp_path,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
    for (shape, name), proc in runs.items():
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"{name} on a URL with {shape} did not exit: {err[-500:]}")
        shown = [piece for piece in pieces(PASSWORD) if piece in out + err]
        assert not shown, f"{name} on a URL with {shape} showed {shown}:\n{out}{err}"
        assert "Traceback" not in err, f"{name} on a URL with {shape}:\n{err}"
        assert proc.returncode != 0 or name == "doctor", f"{name} on a URL with {shape} succeeded:\n{out}{err}"
        assert "alice" in out + err or "***@" in out + err, f"{name} did not say which database:\n{out}{err}"
