"""The fuzz suite's budget: small in CI, long on demand.

Each surface (HTTP to `serve`, MCP lines over stdio, CLI argument vectors) is
fuzzed with hypothesis against real processes. CI runs FUZZ_EXAMPLES examples
per test (default 25); set SWITCHBOARD_FUZZ_EXAMPLES=2000 (or more) to run it
long, e.g. before a release:

    SWITCHBOARD_FUZZ_EXAMPLES=2000 .venv/bin/python -m pytest -m fuzz
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES = int(os.environ.get("SWITCHBOARD_FUZZ_EXAMPLES", "25"))

# Real processes are slow next to hypothesis's defaults: no deadline (the runner
# bounds hangs, not a timing assert), and fixtures shared across examples.
fuzz_settings = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("SWITCHBOARD_FUZZ_RANDOM") is None,  # CI: the same examples every run
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
