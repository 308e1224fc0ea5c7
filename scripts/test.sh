#!/usr/bin/env bash
# Installs what the test suite needs (a .venv with the test extras) and runs it.
# Extra arguments go to pytest. pytest exits 5 when no test ran: that fails too.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'

exec .venv/bin/python -m pytest "$@"
