"""Redis sources' settings: validated at `adapter add`, shown without passwords.

The broker consumers (``switchboard_local.brokers``) run them. A URL is checked
here as redis-py will read it (scheme, host, port, db, query values); what
only redis-py itself can tell (an option its connection does not take) is
checked by the Redis edge's ``config.check_options``, which the process
module passes in as ``driver_check``, so the core never imports redis-py.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .errors import InvalidArgument
from .sources import require_queue
from .text import decimal, digits, first_control

MODES = ("stream", "list", "pubsub")
DEFAULT_GROUP = "switchboard"
DEFAULT_BATCH = 64
DEFAULT_CLAIM_IDLE = 60
MAX_CLAIM_IDLE = 365 * 86400  # seconds; Redis takes it in ms as a 64-bit number, and longer means never
SCHEMES = ("redis://", "rediss://", "unix://")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Query options redis-py converts (its URL_QUERY_ARGUMENT_PARSERS): a bad one fails every connect.
_QUERY_INTS = ("db", "socket_read_size", "max_connections", "health_check_interval", "ssl_min_version", "protocol")
_QUERY_FLOATS = ("socket_timeout", "socket_connect_timeout", "timeout")

GUARANTEES = {
    "stream": "durable: acked (XACK) only after the commit; pending entries are re-read on start",
    "list": "durable: removed from KEY:processing (LREM) only after the commit; recovered on start",
    "pubsub": "loss-tolerant only: messages published while the adapter is down are gone",
}


def default_consumer() -> str:
    """Stable per host, so a restart re-reads its own pending entries."""
    return socket.gethostname() or "switchboard"


def adapter_config(options: dict[str, Any], *, driver_check: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Validate `adapter add` options (at add time, not while running)."""
    url, url_env = options.get("redis_url"), options.get("redis_url_env")
    if (url is None) == (url_env is None):
        raise InvalidArgument("give exactly one of --redis-url and --redis-url-env")
    if url is not None:
        check_url(url)
        if driver_check is not None:
            driver_check(url)
    if url_env is not None and not ENV_NAME.fullmatch(url_env):
        raise InvalidArgument("--redis-url-env must name an environment variable (letters, digits and '_')")
    mode = options.get("mode")
    if mode not in MODES:
        raise InvalidArgument(f"--mode must be one of {', '.join(MODES)}")
    if not options.get("key"):
        raise InvalidArgument("--key must name the stream, list or channel")
    for option in ("key", "group", "consumer"):
        _no_controls(f"--{option}", options.get(option))
    config: dict[str, Any] = {
        "mode": mode,
        "key": options["key"],
        "batch": options.get("batch") or DEFAULT_BATCH,
    }
    config["redis_url" if url is not None else "redis_url_env"] = url if url is not None else url_env
    if mode == "stream":
        config["group"] = options.get("group") or DEFAULT_GROUP
        config["consumer"] = options.get("consumer") or default_consumer()
        config["claim_idle"] = options.get("claim_idle") or DEFAULT_CLAIM_IDLE
    elif options.get("group") or options.get("consumer") or options.get("claim_idle"):
        raise InvalidArgument("--group, --consumer and --claim-idle apply to --mode stream only")
    if options.get("queue") is not None:
        require_queue("--queue", options["queue"])
        config["queue"] = options["queue"]
    return config


def check_url(url: str) -> None:
    """Refuse a URL redis-py would refuse, or read differently than it reads: scheme, host, port, db, path.

    No message quotes the URL: it may hold a password.
    """
    if not url.startswith(SCHEMES):
        raise InvalidArgument("--redis-url must start with redis://, rediss:// or unix://")
    if first_control(url) is not None or " " in url:
        raise InvalidArgument("--redis-url must not hold spaces or control characters (percent-encode them)")
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:  # a broken [IPv6] literal, a port that is no number or out of range
        raise InvalidArgument(f"--redis-url: {_reason(str(exc))}") from None
    if parts.scheme == "unix":
        if host or port is not None:
            raise InvalidArgument("--redis-url: unix:// takes a socket path, not a host (unix:///run/redis.sock)")
        if len(parts.path) < 2:
            raise InvalidArgument("--redis-url: unix:// needs the socket's path (unix:///run/redis.sock)")
    else:
        if not host:
            raise InvalidArgument("--redis-url: no host (redis://HOST[:PORT][/DB])")
        if port == 0:
            raise InvalidArgument("--redis-url: the port must be a number between 1 and 65535")
        db = parts.path.removeprefix("/")
        if db and digits(db) is None:
            raise InvalidArgument("--redis-url: the path must be a database number (redis://host:6379/0)")
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        _check_query(key, value)


def _check_query(key: str, value: str) -> None:
    if key in _QUERY_INTS:
        number = digits(value)
        if number is None:
            raise InvalidArgument(f"--redis-url: {key}= must be a whole number")
        if key in ("max_connections", "socket_read_size") and number < 1:
            raise InvalidArgument(f"--redis-url: {key}= must be at least 1")
    elif key in _QUERY_FLOATS:
        if not (decimal(value) or 0) > 0:
            raise InvalidArgument(f"--redis-url: {key}= must be a number of seconds")


def _reason(message: str) -> str:
    if "Port" in message:
        return "the port must be a number between 1 and 65535"
    if "IPv6" in message:
        return "a broken [IPv6] address"
    return "not a URL redis can read"


def _no_controls(option: str, value: str | None) -> None:
    if value is not None and (found := first_control(value)) is not None:
        raise InvalidArgument(f"{option} holds a control character ({found})")
