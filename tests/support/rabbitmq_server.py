"""A real RabbitMQ node for the AMQP tests: Debian's rabbitmq-server, started
on free loopback ports with everything of its own.

Each node has its own name, data and log folders, config file, enabled-plugins
file, Erlang cookie (its own HOME) and its own epmd on a free port, so runs in
parallel (or beside a system node) never meet. ``ctl`` runs ``rabbitmqctl``
against it, as an operator would. Starting takes seconds: the broker tests
share one node per session (tests/brokers/conftest.py), each test on queues of
its own.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from support.redis_server import free_port, in_ci

SBIN = "/usr/lib/rabbitmq/bin"  # the scripts themselves: /usr/sbin's wrappers switch to the rabbitmq user
MISSING = (
    "rabbitmq-server is not installed (apt-get install rabbitmq-server, brew install rabbitmq, or run scripts/test.sh)"
)
START_TIMEOUT = 120  # seconds for a cold node on a loaded machine (it usually takes a few)


def dying_with_the_tests(command: list[str]) -> list[str]:
    """``command``, sent SIGTERM when the test process dies, even by SIGKILL (util-linux's setpriv, where
    there is one): a killed run leaves no node behind (the node's script stops it cleanly on SIGTERM)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *command] if setpriv else command


def script(name: str) -> str | None:
    """A RabbitMQ script: Debian's, or one on PATH (another system's package)."""
    if os.access(f"{SBIN}/{name}", os.X_OK):
        return f"{SBIN}/{name}"
    return shutil.which(name)


class RabbitMQServer:
    """One RabbitMQ node on loopback; ``url`` is its AMQP URL (guest, allowed on loopback only)."""

    def __init__(self, workdir: Path) -> None:
        server, ctl, epmd = script("rabbitmq-server"), script("rabbitmqctl"), shutil.which("epmd")
        if server is None or ctl is None or epmd is None:
            raise RuntimeError(MISSING)
        self.server_binary, self.ctl_binary, self.epmd_binary = server, ctl, epmd
        self.workdir = workdir
        self.port = free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/"
        self.node = f"switchboard-test-{self.port}@localhost"
        self.epmd_port = free_port()
        self.dist_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None
        self._write_files()
        self._admin: Admin | None = None

    def _write_files(self) -> None:
        for folder in ("mnesia", "log", "home"):
            (self.workdir / folder).mkdir(parents=True, exist_ok=True)
        (self.workdir / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            "log.console = false\nlog.file.level = info\n"
            "disk_free_limit.absolute = 50MB\n"
        )
        (self.workdir / "enabled_plugins").write_text("[].\n")  # no management plugin: AMQP is all there is
        (self.workdir / "rabbitmq-env.conf").write_text("")  # never /etc/rabbitmq's
        cookie = self.workdir / "home" / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(16))
        cookie.chmod(0o400)  # Erlang refuses a cookie others can read

    def env(self) -> dict[str, str]:
        """The environment the node and ``rabbitmqctl`` share: they find each other by it."""
        base = self.workdir
        return {
            **os.environ,
            "HOME": str(base / "home"),  # the Erlang cookie's folder
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(base / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
            # rabbitmqctl's own node listens on a port the OS picks, not in the fixed range 35672-35682.
            "RABBITMQ_CTL_DIST_PORT_MIN": "0",
            "RABBITMQ_CTL_DIST_PORT_MAX": "0",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(self.epmd_port),
        }

    def start(self) -> RabbitMQServer:
        if self.epmd is None:  # kept across a restart: the node registers with it again
            self.epmd = subprocess.Popen(
                dying_with_the_tests([self.epmd_binary, "-port", str(self.epmd_port), "-address", "127.0.0.1"]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        pid_file = self.workdir / "rabbitmq.pid"
        pid_file.unlink(missing_ok=True)
        # Its own session: the shell script runs the Erlang VM as a child, and a stop must reach both.
        self.proc = subprocess.Popen(
            dying_with_the_tests([self.server_binary]), env=self.env(), cwd=self.workdir, start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        # `rabbitmqctl wait` returns once the pid file is written and the broker's application has started.
        waited = self.ctl("wait", str(pid_file), "--timeout", str(START_TIMEOUT), timeout=START_TIMEOUT + 30)
        if waited.returncode != 0:
            self.stop()
            raise RuntimeError(f"rabbitmq-server did not start: {waited.stdout}{waited.stderr}\n{self.log_tail()}")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()  # the script's trap stops the node cleanly (queues and messages kept)
            try:
                self.proc.wait(timeout=60)
            finally:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)  # the VM, should it outlive its script
                except ProcessLookupError:
                    pass
            self.proc = None

    def close(self) -> None:
        """Stop the node and its epmd."""
        self.stop()
        if self.epmd is not None:
            self.epmd.terminate()
            self.epmd.wait(timeout=10)
            self.epmd = None

    def ctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``rabbitmqctl -n NODE ARGS``, against this node only."""
        return subprocess.run(
            [self.ctl_binary, "-n", self.node, *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def list_queues(self) -> dict[str, tuple[int, int]]:
        """{queue: (messages ready, messages unacknowledged)}, as the broker itself counts them."""
        done = self.ctl("list_queues", "--quiet", "--no-table-headers", "name", "messages_ready",
                        "messages_unacknowledged")  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        found = {}
        for line in done.stdout.splitlines():
            name, ready, unacked = line.rsplit("\t", 2)
            found[name] = (int(ready), int(unacked))
        return found

    def log_tail(self, lines: int = 30) -> str:
        logs = sorted((self.workdir / "log").glob("*.log"))
        return "\n".join("\n".join(p.read_text(errors="replace").splitlines()[-lines:]) for p in logs)

    @property
    def admin(self) -> Admin:
        """A client of the test's own, for declaring, publishing and counting."""
        if self._admin is None:
            self._admin = Admin(self.url)
        return self._admin


class Admin:
    """The test's own hand on the broker, with pika: a synchronous client, as a producer
    would use (it sends no message-id unless given one; aio-pika always makes one up).

    Each call opens and closes its own connection: nothing idles through a long test.
    """

    def __init__(self, url: str) -> None:
        self.parameters = pika.URLParameters(url)

    @contextlib.contextmanager
    def channel(self) -> Iterator[BlockingChannel]:
        connection = pika.BlockingConnection(self.parameters)
        try:
            yield connection.channel()
        finally:
            connection.close()

    def declare(self, queue: str, arguments: dict[str, Any] | None = None) -> None:
        """A durable queue (what a producer or an operator declares before the adapter reads it)."""
        with self.channel() as channel:
            channel.queue_declare(queue, durable=True, arguments=arguments)

    def delete(self, queue: str) -> None:
        with self.channel() as channel:
            channel.queue_delete(queue)

    def declare_dead_letter(self, exchange: str, queue: str) -> None:
        """A fanout exchange and the durable queue bound to it that collects what it is sent."""
        with self.channel() as channel:
            channel.exchange_declare(exchange, "fanout", durable=True)
            channel.queue_declare(queue, durable=True)
            channel.queue_bind(queue, exchange)

    def publish(self, queue: str, bodies: list[bytes], **properties: Any) -> None:
        """Persistent messages to ``queue`` through the default exchange, each confirmed by the broker."""
        with self.channel() as channel:
            channel.confirm_delivery()
            for body in bodies:
                sent = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent, **properties)
                channel.basic_publish("", queue, body, sent, mandatory=True)

    def ready(self, queue: str) -> int:
        """Messages ready in ``queue`` (a passive declare: what AMQP itself tells)."""
        with self.channel() as channel:
            return channel.queue_declare(queue, passive=True).method.message_count

    def take(self, queue: str) -> list[bytes]:
        """Every message ready in ``queue``, taken (basic.get, acked): what a dead-letter queue collected."""
        bodies = []
        with self.channel() as channel:
            while True:
                method, _, body = channel.basic_get(queue, auto_ack=True)
                if method is None:
                    return bodies
                bodies.append(body)


def started_rabbitmq_server(workdir: Path) -> RabbitMQServer:
    """A started node for the tests. Without rabbitmq-server the tests fail when CI is set
    (CI must run every real-server test), and are skipped, saying why, when not."""
    if script("rabbitmq-server") is None:
        if in_ci():
            pytest.fail(f"{MISSING}; CI is set, so the real-server tests must run", pytrace=False)
        pytest.skip(f"{MISSING}; real-server test skipped because CI is not set")
    return RabbitMQServer(workdir).start()
