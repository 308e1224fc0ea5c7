#!/usr/bin/env bash
# Installs what the test suite needs and runs it: redis-server (Debian's
# package, when missing) and a .venv with the test extras. Extra arguments go
# to pytest. pytest exits 5 when no test ran: that fails too.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq redis-server >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'

exec .venv/bin/python -m pytest "$@"
