"""Webhook sources' configuration: the signature kinds and their options.

What `source add` validates and what the receiver reads back: no HTTP and no
verification here (that is the HTTP edge's ``verifiers``), so the CLI and the
receiver share one definition of a source's config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import InvalidArgument
from .sources import Source

KINDS = ("github", "gitea", "stripe", "slack", "standard", "gitlab", "hmac", "token", "open")
ALGORITHMS = ("sha1", "sha256", "sha512")
ENCODINGS = ("hex", "base64")
DEFAULT_TOLERANCE = 300
DEFAULT_MAX_BODY = 5 * 1024 * 1024
MAX_TOLERANCE = 86400  # a signed timestamp older than a day is no protection
MAX_BODY = 64 * 1024 * 1024  # a body is held in memory while it is verified (GitHub sends at most 25 MB)
# Schemes that sign the body but not the delivery id: a captured body could be
# reposted under a new id, so the same verified type and body within this
# many seconds is a duplicate. The others sign a timestamp with the id.
UNSIGNED_ID_KINDS = ("github", "gitea", "gitlab", "hmac", "token")
DEFAULT_REPLAY_WINDOW = 24 * 3600
MAX_REPLAY_WINDOW = 7 * 86400  # the default dedup horizon, when prune forgets what was seen

def source_config(kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a source's kind options (at `source add`, not at delivery time)."""
    if kind not in KINDS:
        raise InvalidArgument(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    config: dict[str, Any] = {
        "tolerance": _positive_int("tolerance", options.get("tolerance"), DEFAULT_TOLERANCE, MAX_TOLERANCE),
        "max_body": _positive_int("max_body", options.get("max_body"), DEFAULT_MAX_BODY, MAX_BODY),
        "replay_window": _replay_window(kind, options.get("replay_window")),
    }
    if options.get("queue"):
        config["queue"] = options["queue"]
    if kind == "hmac":
        if not options.get("header"):
            raise InvalidArgument("kind hmac needs --header (the signature header's name)")
        algorithm = options.get("algorithm") or "sha256"
        encoding = options.get("encoding") or "hex"
        if algorithm not in ALGORITHMS:
            raise InvalidArgument(f"algorithm must be one of {', '.join(ALGORITHMS)}")
        if encoding not in ENCODINGS:
            raise InvalidArgument(f"encoding must be one of {', '.join(ENCODINGS)}")
        config |= {"header": options["header"].lower(), "algorithm": algorithm, "encoding": encoding,
                   "prefix": options.get("prefix") or ""}  # fmt: skip
    elif kind == "token":
        config["header"] = (options.get("header") or "authorization").lower()
    elif options.get("header") or options.get("algorithm") or options.get("encoding") or options.get("prefix"):
        raise InvalidArgument(f"--header, --algorithm, --encoding and --prefix apply to kinds hmac and token, not {kind}")
    if kind in ("hmac", "token", "open"):
        for name in ("id_header", "type_header"):
            if options.get(name):
                config[name] = options[name].lower()
    elif options.get("id_header") or options.get("type_header"):
        raise InvalidArgument(f"kind {kind} names its own delivery id and type; --id-header and --type-header apply to hmac, token and open")
    return config


def needs_secret(kind: str) -> bool:
    return kind != "open"


def _replay_window(kind: str, value: Any) -> int:
    if value is None:
        return DEFAULT_REPLAY_WINDOW if kind in UNSIGNED_ID_KINDS else 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_REPLAY_WINDOW:
        raise InvalidArgument("replay window must be a whole number of seconds from 0 (off) to 7 days")
    return value


def replay_window(source: Source) -> int:
    """Seconds within which the same verified type and body is a duplicate (sources
    added before the window existed get their kind's default)."""
    return int(source.config.get("replay_window", _replay_window(source.kind, None)))


def _positive_int(name: str, value: Any, default: int, high: int) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= high:
        raise InvalidArgument(f"{name} must be a whole number from 1 to {high}")
    return value
