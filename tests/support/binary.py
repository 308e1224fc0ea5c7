"""The single-file binary, built for the tests (tests/processes/test_binary.py) in the background.

Building takes a minute or two (PyInstaller, mostly on one core), while the
suite itself runs on one core: so the build starts as soon as collection is
done when a ``binary`` test is selected (tests/processes/conftest.py), in a
process of lower priority, and ``Build.wait`` hands its executable to the
first test that needs it, by which time the tests before it have run beside
the build. What is built and what is asserted of it are the same as a build
made on the spot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 900  # seconds; a build takes a minute or two on two cores


class Build:
    """packaging/build_binary.py into a temporary folder, started now, in a process of its own."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="switchboard-binary-"))
        self._log = open(self.root / "build.log", "wb")  # noqa: SIM115 (the build's, closed with it)
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "packaging" / "build_binary.py"),
             "--dist", str(self.root / "dist"), "--work", str(self.root / "work")],  # fmt: skip
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            preexec_fn=lambda: os.nice(10),  # the tests running meanwhile come first
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
        assert code == 0, f"the build failed:\n{output}"
        (path,) = (self.root / "dist").iterdir()
        return path

    def stop(self) -> None:
        """End the build if it still runs, and remove its folder."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)
