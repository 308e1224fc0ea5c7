#!/usr/bin/env bash
# Installs what the test suite needs and runs it: redis-server, nats-server, rabbitmq-server, chromium,
# postgresql and npm (Debian's packages, when missing), a .venv with the test extras, and Claude
# Code's CLI in .venv/claude-code. Extra arguments go to pytest. pytest exits 5 when
# no test ran: that fails too.
#
# Repeat runs are quick: the package and its extras are installed again only
# when pyproject.toml changed since the last install (a stamp in .venv holds
# its hash) or the installed package cannot be imported; Claude Code only
# when its `claude` does not answer --version.
set -euo pipefail
cd "$(dirname "$0")/.."

LOCK_WAIT=600 # seconds to wait for another apt/dpkg (unattended-upgrades, a second run) to finish

apt_get() {
    $sudo apt-get -o DPkg::Lock::Timeout="$LOCK_WAIT" "$@"
}

# `update` also takes apt's lists lock, which older apt does not wait for:
# retry while the failure is about a lock, for as long as LOCK_WAIT.
apt_update() {
    local waited=0 err
    while ! err=$(apt_get update -qq 2>&1); do
        case "$err" in
            *lock*) ;;
            *) printf '%s\n' "$err" >&2; return 1 ;;
        esac
        if [ "$waited" -ge "$LOCK_WAIT" ]; then
            printf '%s\n' "$err" >&2
            return 1
        fi
        sleep 5
        waited=$((waited + 5))
    done
}

# Debian's packages the tests run for real: redis-server (the Redis adapters),
# nats-server (the NATS JetStream adapters: tests/support/nats_server.py runs it
# with -js on a free port and its own store folder), rabbitmq-server (the AMQP
# adapters: tests/support/rabbitmq_server.py starts a node of its own on free
# ports), chromium (the dashboard's browser tests; never playwright's download)
# and postgresql (the PostgreSQL backend: tests/support/postgres.py runs initdb
# and the server in a temporary folder, as nobody when run as root; a missing
# server fails those tests, it never skips them); npm (Claude Code's CLI, below).
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
# Not on PATH for a non-root user (/usr/sbin), hence the full path too.
command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ] || missing+=(rabbitmq-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    apt_update
    apt_get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=.venv/.switchboard-installed
wanted=$(.venv/bin/python -c 'import hashlib, sys; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')
# -I: not from the checkout's directory, so this sees what is installed in .venv.
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ] ||
    ! .venv/bin/python -I -c 'import switchboard_local, nats, pytest, hypothesis, fakeredis, playwright, psycopg, pytest_randomly, mkdocs, material, aiobotocore, moto.server' >/dev/null 2>&1; then
    rm -f "$stamp"
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e '.[test]'
    printf '%s\n' "$wanted" >"$stamp"
fi

# Claude Code's CLI (npm's @anthropic-ai/claude-code, its latest release), project-local:
# tests/cli/test_claude_code.py registers the `claude mcp add` lines that the README, the docs
# and doctor print with it and asks it whether each server connects. A missing one fails
# those tests, it never skips them.
claude=.venv/claude-code/node_modules/.bin/claude
if ! "$claude" --version >/dev/null 2>&1; then
    npm install --prefix .venv/claude-code --no-audit --no-fund --loglevel=error @anthropic-ai/claude-code
fi

exec .venv/bin/python -m pytest "$@"
