"""The single-file binary, built for the tests (tests/processes/test_binary.py) in the background,
the way the docs' "Single-file binary" page (docs/guide/binary.md) says.

The page's commands run as they are written, in bash, in a copy of this
checkout that has no .venv (as a clone has none): its lines make the build's
virtualenv (PyInstaller and the dependencies, from the package index) and then
run packaging/build_binary.py, which must leave dist/switchboard-local. So a
build command the page gives with nothing to prepare it fails these tests.

Building takes a minute or two (the virtualenv, then PyInstaller, mostly on
one core), while the suite itself runs on one core: so the build starts as
soon as collection is done when a ``binary`` test is selected
(tests/processes/conftest.py), in a process of lower priority, and
``Build.wait`` hands its executable to the first test that needs it, by which
time the tests before it have run beside the build. What is built and what is
asserted of it are the same as a build made on the spot.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 900  # seconds; the virtualenv and the build take a minute or two on two cores
NAME = "switchboard-local.exe" if sys.platform == "win32" else "switchboard-local"
# What a clone does not hold: the checkout's own environments, builds and caches.
NOT_IN_A_CLONE = shutil.ignore_patterns(".venv", ".git", "build", "dist", "__pycache__", "*.pyc", "*.egg-info",
                                        ".pytest_cache", ".hypothesis", ".ruff_cache", "mutants", "node_modules")  # fmt: skip


PAGE = ROOT / "docs" / "guide" / "binary.md"  # the docs' "Single-file binary"


def documented_build_commands() -> str:
    """The first ``sh`` block of the docs' "Single-file binary" page, as it is written."""
    found = re.search(r"^```sh\n(.*?)^```", PAGE.read_text("utf-8"), re.MULTILINE | re.DOTALL)
    assert found is not None, f"{PAGE.relative_to(ROOT)} has no sh block"
    return found.group(1)


class Build:
    """The documented build commands in a copy of the checkout, started now, in a process of their own."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="switchboard-binary-"))
        self.checkout = self.root / "checkout"
        shutil.copytree(ROOT, self.checkout, ignore=NOT_IN_A_CLONE, symlinks=True)
        self._log = open(self.root / "build.log", "wb")  # noqa: SIM115 (the build's, closed with it)
        # A shell as a newcomer's: no virtualenv of the tests' active, nothing on PYTHONPATH.
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        bin_dir = str(Path(sys.prefix) / "bin")
        env["PATH"] = os.pathsep.join(d for d in env.get("PATH", os.defpath).split(os.pathsep) if d != bin_dir)
        self.proc = subprocess.Popen(
            # nice: the tests running meanwhile come first.
            ["nice", "-n", "10", "bash", "-e", "-x", "-c", documented_build_commands()], cwd=self.checkout, env=env,
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own: stop() ends pip and PyInstaller with the shell
        )  # fmt: skip

    def wait(self) -> Path:
        """The executable, once built (the build's failure, with its output, fails the caller)."""
        try:
            code = self.proc.wait(BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"the build took over {BUILD_TIMEOUT} s") from None
        self._log.close()
        output = (self.root / "build.log").read_text(errors="replace")
        assert code == 0, f"the documented build commands failed:\n{output}"
        path = self.checkout / "dist" / NAME
        assert path.is_file(), f"the documented build commands left no {path}:\n{output}"
        return path

    def stop(self) -> None:
        """End the build if it still runs, and remove its folder."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)
