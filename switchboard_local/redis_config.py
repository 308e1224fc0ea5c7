"""Redis adapter settings: validated at `adapter add`, shown without passwords.

No Redis client here, so the CLI stays quick; redis_adapters.py runs them.
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

from .errors import InvalidArgument

MODES = ("stream", "list", "pubsub")
DEFAULT_GROUP = "switchboard"
DEFAULT_BATCH = 64
DEFAULT_CLAIM_IDLE = 60

GUARANTEES = {
    "stream": "durable: acked (XACK) only after the commit; pending entries are re-read on start",
    "list": "durable: removed from KEY:processing (LREM) only after the commit; recovered on start",
    "pubsub": "loss-tolerant only: messages published while the adapter is down are gone",
}


def default_consumer() -> str:
    """Stable per host, so a restart re-reads its own pending entries."""
    return socket.gethostname() or "switchboard"


def adapter_config(options: dict[str, Any]) -> dict[str, Any]:
    """Validate `adapter add` options (at add time, not while running)."""
    url, url_env = options.get("redis_url"), options.get("redis_url_env")
    if (url is None) == (url_env is None):
        raise InvalidArgument("give exactly one of --redis-url and --redis-url-env")
    if url is not None and urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise InvalidArgument("--redis-url must start with redis://, rediss:// or unix://")
    mode = options.get("mode")
    if mode not in MODES:
        raise InvalidArgument(f"--mode must be one of {', '.join(MODES)}")
    if not options.get("key"):
        raise InvalidArgument("--key must name the stream, list or channel")
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
    if options.get("queue"):
        config["queue"] = options["queue"]
    return config
