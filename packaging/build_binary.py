"""Build `switchboard-local` as one executable file, for the platform this runs on.

    python3 -m venv .venv && .venv/bin/pip install -e '.[binary]'   # once
    .venv/bin/python packaging/build_binary.py [--dist DIR] [--work DIR]

PyInstaller (the `binary` extra brings it; the `test` extra too) bundles the
interpreter that runs this script, the packages installed beside it and this
checkout's switchboard_local into DIR/switchboard-local (`.exe` on Windows;
default DIR: dist/), following packaging/switchboard-local.spec. Prints the
file's path and size.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "switchboard-local.spec"
NAME = "switchboard-local.exe" if sys.platform == "win32" else "switchboard-local"


def build(dist: Path, work: Path) -> Path:
    """Run PyInstaller on the spec; the executable's path."""
    if importlib.util.find_spec("PyInstaller") is None or not _installed("switchboard-local"):
        # Without the package's dependencies beside it the build would succeed and the binary fail at run time.
        raise SystemExit(
            f"PyInstaller and switchboard-local's dependencies are not installed for {sys.executable}. "
            f"Make the build's environment once, in {ROOT}: python3 -m venv .venv && .venv/bin/pip install -e "
            f"'.[binary]'; then build with .venv/bin/python packaging/build_binary.py"
        )
    subprocess.run(
        [sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN",
         "--distpath", str(dist), "--workpath", str(work), str(SPEC)],
        cwd=ROOT, check=True,
    )  # fmt: skip
    return dist / NAME


def _installed(name: str) -> bool:
    from importlib import metadata

    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="where the executable lands (default: dist/)")
    parser.add_argument(
        "--work", type=Path, default=ROOT / "build" / "pyinstaller", help="PyInstaller's scratch folder"
    )
    args = parser.parse_args()
    try:
        binary = build(args.dist.resolve(), args.work.resolve())
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"PyInstaller failed (exit {exc.returncode})") from None
    print(f"{binary} ({binary.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
