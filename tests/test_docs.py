"""The docs: a README that is a front door, and a docs site (mkdocs.yml, docs/) that builds
strictly, with reference pages that say what the code says now.

The site is built by the real MkDocs with mkdocs-material (the test extras), in a
subprocess, into a temporary folder; the reference pages are written again by
scripts/gen_reference.py into another and compared. The README's first webhook
runs as written, with the console script of the environment running the tests.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.receiver import serve_process

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
REFERENCE = ROOT / "docs" / "reference"
README_MOST_LINES = 250


def build_site(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of the site whose mkdocs.yml is in ``root``; its output in stdout."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # the theme's notice about its future, at each start
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        check=False, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
    )  # fmt: skip


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    built = build_site(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stdout
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "commands.html").is_file()


@pytest.mark.parametrize(
    ("sabotage", "said"),
    [
        ("a page left out of the navigation", "stray.md"),
        ("a link to a page that is not there", "no-such-page.md"),
        ("a link to an anchor that is not there", "#no-such-anchor"),
    ],
)
def test_a_strict_build_fails_on(sabotage: str, said: str, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    if sabotage.startswith("a page"):
        (copy / "docs" / "stray.md").write_text("# Stray\n\nIn no navigation.\n")
    else:
        with open(copy / "docs" / "guide" / "lifecycle.md", "a") as page:
            page.write(f"\nSee [there]({said if said.endswith('.md') else 'commands.md' + said}).\n")
    built = build_site(copy, tmp_path / "site")
    assert built.returncode != 0, built.stdout
    assert said in built.stdout, built.stdout


def test_the_reference_pages_are_what_the_generator_writes_from_the_code_now(tmp_path: Path) -> None:
    made = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--out", str(tmp_path)],
        check=False, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout
    written = sorted(path.name for path in tmp_path.glob("*.md"))
    assert written, made.stdout
    assert sorted(path.name for path in REFERENCE.glob("*.md")) == written
    stale = [name for name in written if (REFERENCE / name).read_text("utf-8") != (tmp_path / name).read_text("utf-8")]
    assert stale == [], f"out of date: {stale}; run: .venv/bin/python scripts/gen_reference.py"


def test_the_readme_is_a_front_door_of_at_most_250_lines() -> None:
    lines = README.read_text("utf-8").splitlines()
    assert len(lines) <= README_MOST_LINES, len(lines)


def test_the_readme_gives_the_test_command_that_ci_runs() -> None:
    ci = [line for line in (ROOT / ".ci" / "run").read_text("utf-8").splitlines() if line.startswith("bash ")]
    assert ci == ["bash scripts/test.sh"]
    blocks = re.findall(r"^```sh\n(.*?)^```", README.read_text("utf-8"), re.MULTILINE | re.DOTALL)
    assert any(line == ci[0] for block in blocks for line in block.splitlines()), blocks


def test_every_relative_link_of_the_readme_names_a_file_in_the_repository() -> None:
    targets = re.findall(r"\]\(([^)\s]+)\)", README.read_text("utf-8"))
    local = [target.split("#", 1)[0] for target in targets if not re.match(r"[a-z]+:", target)]
    assert local, targets
    assert [target for target in local if target and not (ROOT / target).exists()] == []


def first_webhook_commands() -> list[str]:
    """The README's first-webhook block: its commands, continuation lines joined."""
    section = README.read_text("utf-8").split("The first webhook", 1)[1]
    found = re.search(r"^```sh\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert found is not None, "the README's first webhook has no sh block"
    return found.group(1).replace("\\\n", " ").splitlines()


def test_the_readmes_first_webhook_makes_the_todo_it_says(tmp_path: Path) -> None:
    add, serve, send, look = first_webhook_commands()
    program = Path(sys.executable).parent / "switchboard-local"  # what pipx would put on PATH
    env = {**os.environ, "SWITCHBOARD_DB": str(tmp_path / "hello.db")}
    env["PATH"] = f"{program.parent}{os.pathsep}{env['PATH']}"

    def shell(line: str) -> subprocess.CompletedProcess[str]:
        ran = subprocess.run(["bash", "-c", line], check=False, env=env, capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        return ran

    shell(add)
    *assignments, command, verb = shlex.split(serve, comments=True)
    assert (command, verb) == ("switchboard-local", "serve"), serve
    secret_env = dict(assignment.split("=", 1) for assignment in assignments)
    with serve_process(tmp_path / "hello.db", env=secret_env, program=(str(program),)) as running:
        receiver = running.wait_serving()
        answer = json.loads(shell(send.replace("127.0.0.1:8787", f"127.0.0.1:{receiver.port}")).stdout)
        assert answer["duplicate"] is False and len(answer["todos"]) == 1, answer
        assert running.stop() == 0, running.stderr
    said = re.search(r'# its todo: "(.+)"', look)
    assert said is not None, look
    assert said.group(1) in shell(look).stdout
