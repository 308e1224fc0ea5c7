"""The built wheel carries both schemas, both sets of queries and the dashboard's files, and works from any directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_ships_the_schema_and_runs_from_another_directory(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("switchboard_local-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        shipped = zf.read("switchboard_local/core/store/sqlite/schema.sql").decode()
        shipped_postgres = zf.read("switchboard_local/core/store/postgres/schema.postgres.sql").decode()
        assert "switchboard_local/core/store/shared.sql" in zf.namelist()
        assert "switchboard_local/core/store/sqlite/queries.sql" in zf.namelist()
        assert "switchboard_local/core/store/postgres/queries.postgres.sql" in zf.namelist()
        for shipped_with_the_dashboard in ("templates/base.html", "templates/_ui.html", "templates/queues.html",
                                           "static/dashboard.js", "static/dashboard.css"):  # fmt: skip
            assert f"switchboard_local/dashboard/{shipped_with_the_dashboard}" in zf.namelist()
    assert shipped == (ROOT / "schema.sql").read_text()
    assert shipped_postgres == (ROOT / "schema.postgres.sql").read_text()

    target = tmp_path / "installed"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "SWITCHBOARD_DB": str(tmp_path / "w.db")}
    run = subprocess.run(
        [sys.executable, "-c", "import switchboard_local; print(switchboard_local.__file__)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert run.stdout.strip().startswith(str(target))
    created = subprocess.run(
        [sys.executable, "-m", "switchboard_local", "todo", "create", "--queue", "q", "--title", "t", "--json"],
        cwd=elsewhere, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["created"] is True
