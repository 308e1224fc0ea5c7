"""Redis adapters' settings: validated at `adapter add`, never quoting a URL (it may hold a password).

A URL is checked as redis-py will read it (scheme, host, port, db, query
values), then by redis-py itself (``check_options``: an option its connection
does not take), so that a URL that cannot work is refused when it is added,
not at every connect of `serve`.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis.asyncio as redis

from ..core.adapters import Option
from ..core.errors import InvalidArgument
from ..core.text import decimal, digits, first_control
from . import options as shared_options

MODES = ("stream", "list", "pubsub")
DEFAULT_GROUP = "switchboard"
DEFAULT_CLAIM_IDLE = 60
MAX_CLAIM_IDLE = 365 * 86400  # seconds; Redis takes it in ms as a 64-bit number, and longer means never
SCHEMES = ("redis://", "rediss://", "unix://")
# Query options redis-py converts (its URL_QUERY_ARGUMENT_PARSERS): a bad one fails every connect.
_QUERY_INTS = ("db", "socket_read_size", "max_connections", "health_check_interval", "ssl_min_version", "protocol")
_QUERY_FLOATS = ("socket_timeout", "socket_connect_timeout", "timeout")

GUARANTEES = {
    "stream": "durable: acked (XACK) only after the commit; pending entries are re-read on start",
    "list": "durable: removed from KEY:processing (LREM) only after the commit; recovered on start",
    "pubsub": "loss-tolerant only: messages published while the adapter is down are gone",
}

OPTIONS = (
    Option("mode", "stream (a consumer group; recommended), list (a reliable list, via KEY:processing) or "
           "pubsub (a channel: loss-tolerant only).", required=True, choices=MODES),  # fmt: skip
    Option("key", "the stream, list or channel.", required=True),
    Option("group", "--mode stream: the consumer group (default switchboard)."),
    Option("consumer", "--mode stream: the consumer's name (default: this host's name)."),
    Option("claim_idle", "--mode stream: take over others' entries idle this many seconds (default 60, at most a "
           "year).", type=int, min=1, max=MAX_CLAIM_IDLE),  # fmt: skip
    # Their names before there were several brokers: --url and --url-env by their old names.
    Option("redis_url", "the same as --url (its name before there were other brokers).", secret=True),
    Option("redis_url_env", "the same as --url-env.", metavar="VAR"),
)
_BY_NAME = {o.name: o for o in OPTIONS}


def default_consumer() -> str:
    """Stable per host, so a restart re-reads its own pending entries."""
    return socket.gethostname() or "switchboard"


def configure(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate `adapter add` options (at add time, not while running) into the stored config."""
    given = dict(options)
    flag = "--url"
    for old, new in (("redis_url", "url"), ("redis_url_env", "url_env")):
        if given.get(old) is not None:
            if given.get(new) is not None:
                raise InvalidArgument(f"give one of --{new.replace('_', '-')} and --{old.replace('_', '-')}: "
                                      "they are the same option")  # fmt: skip
            given[new] = given[old]
            if new == "url":
                flag = "--redis-url"
    config = shared_options.shared(given)
    if "url" in config:
        check_url(config["url"], flag)
        check_options(config["url"], flag)
    mode = shared_options.text(_BY_NAME["mode"], given.get("mode"))
    key = shared_options.text(_BY_NAME["key"], given.get("key"))
    group = shared_options.text(_BY_NAME["group"], given.get("group"))
    consumer = shared_options.text(_BY_NAME["consumer"], given.get("consumer"))
    claim_idle = shared_options.number(_BY_NAME["claim_idle"], given.get("claim_idle"))
    config.update({"mode": mode, "key": key})
    if mode == "stream":
        config["group"] = group or DEFAULT_GROUP
        config["consumer"] = consumer or default_consumer()
        config["claim_idle"] = claim_idle or DEFAULT_CLAIM_IDLE
    elif group or consumer or claim_idle:
        raise InvalidArgument("--group, --consumer and --claim-idle apply to --mode stream only")
    return config


def check_url(url: str, flag: str = "--url") -> None:
    """Refuse a URL redis-py would refuse, or read differently than it reads: scheme, host, port, db, path.

    No message quotes the URL: it may hold a password.
    """
    if not url.startswith(SCHEMES):
        raise InvalidArgument(f"{flag} must start with redis://, rediss:// or unix://")
    if first_control(url) is not None or " " in url:
        raise InvalidArgument(f"{flag} must not hold spaces or control characters (percent-encode them)")
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as exc:  # a broken [IPv6] literal, a port that is no number or out of range
        raise InvalidArgument(f"{flag}: {_reason(str(exc))}") from None
    if parts.scheme == "unix":
        if host or port is not None:
            raise InvalidArgument(f"{flag}: unix:// takes a socket path, not a host (unix:///run/redis.sock)")
        if len(parts.path) < 2:
            raise InvalidArgument(f"{flag}: unix:// needs the socket's path (unix:///run/redis.sock)")
    else:
        if not host:
            raise InvalidArgument(f"{flag}: no host (redis://HOST[:PORT][/DB])")
        if port == 0:
            raise InvalidArgument(f"{flag}: the port must be a number between 1 and 65535")
        db = parts.path.removeprefix("/")
        if db and digits(db) is None:
            raise InvalidArgument(f"{flag}: the path must be a database number (redis://host:6379/0)")
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        _check_query(flag, key, value)


def check_options(url: str, flag: str = "--url") -> None:
    """Refuse what redis-py would refuse at every connect: an option its
    connection does not take, or a value it rejects (protocol=9)."""
    try:
        pool = redis.ConnectionPool.from_url(url)
        pool.connection_class(**pool.connection_kwargs)  # builds, never connects
    except TypeError as exc:
        unknown = re.search(r"keyword argument '([A-Za-z0-9_]{1,40})'", str(exc))
        what = f"{unknown.group(1)}= is" if unknown else "an option is"
        raise InvalidArgument(f"{flag}: {what} not an option redis takes for this scheme") from None
    except (ValueError, redis.RedisError) as exc:
        secrets = [v for k, v in parse_qsl(urlsplit(url).query) if k == "password"] + [urlsplit(url).password or ""]
        reason = str(exc)
        if any(secret and secret in reason for secret in secrets) or first_control(reason) is not None:
            reason = "an option holds a value redis refuses"
        raise InvalidArgument(f"{flag}: {reason[:200].rstrip('.')}") from None


def _check_query(flag: str, key: str, value: str) -> None:
    if key in _QUERY_INTS:
        number = digits(value)
        if number is None:
            raise InvalidArgument(f"{flag}: {key}= must be a whole number")
        if key in ("max_connections", "socket_read_size") and number < 1:
            raise InvalidArgument(f"{flag}: {key}= must be at least 1")
    elif key in _QUERY_FLOATS:
        if not (decimal(value) or 0) > 0:
            raise InvalidArgument(f"{flag}: {key}= must be a number of seconds")


def _reason(message: str) -> str:
    if "Port" in message:
        return "the port must be a number between 1 and 65535"
    if "IPv6" in message:
        return "a broken [IPv6] address"
    return "not a URL redis can read"
