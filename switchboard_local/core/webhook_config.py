"""Webhook sources' configuration: the signature kinds and their options.

What `source add` validates and what the receiver reads back: no HTTP and no
verification here (that is the HTTP edge's ``verifiers``), so the CLI and the
receiver share one definition of a source's config.
"""

from __future__ import annotations

import re
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

# A header is stored redacted when its lowercased name holds one of these words
# anywhere (x-api-key, x-auth-token, x-webhook-secret, x-shopify-hmac-sha256):
# whatever a sender calls its credential, the name says what it is. A source
# keeps a header its name would hide with --keep-header (Idempotency-Key, say).
SECRET_WORDS = ("auth", "token", "secret", "key", "password", "passwd", "signature", "hmac", "session", "cookie",
                "credential")  # fmt: skip
# Headers that carry a credential whatever they are called, and the ones each
# kind's signature or token arrives in: never kept in clear.
CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie", "set-cookie")
SIGNATURE_HEADERS = {
    "github": ("x-hub-signature-256", "x-hub-signature"),
    "gitea": ("x-gitea-signature", "x-gogs-signature", "x-hub-signature-256"),
    "stripe": ("stripe-signature",),
    "slack": ("x-slack-signature",),
    "standard": ("webhook-signature",),
    "gitlab": ("x-gitlab-token",),
}
# RFC 9110's token: what a header's name may be made of.
TCHARS = "!#$%&'*+-.^_`|~"
HEADER_NAME = re.compile(f"[{re.escape(TCHARS)}0-9A-Za-z]{{1,128}}")


def names_a_secret(header: str) -> bool:
    """Whether a header's name (lowercased) says it holds a credential, a signature or a session."""
    name = header.lower()
    return any(word in name for word in SECRET_WORDS)


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
    if options.get("keep_headers"):
        config["keep_headers"] = _kept_headers(kind, config.get("header"), options["keep_headers"])
    if kind in ("hmac", "token", "open"):
        for name in ("id_header", "type_header"):
            if options.get(name):
                config[name] = options[name].lower()
    elif options.get("id_header") or options.get("type_header"):
        raise InvalidArgument(f"kind {kind} names its own delivery id and type; --id-header and --type-header apply to hmac, token and open")
    return config


def _kept_headers(kind: str, verified_by: str | None, names: Any) -> list[str]:
    """--keep-header: names (lowercased, each once) that the name rule would redact and that carry no credential."""
    kept: list[str] = []
    for given in names:
        if not isinstance(given, str) or not HEADER_NAME.fullmatch(given):
            raise InvalidArgument(f"--keep-header {given!r} is not a header name (1-128 of: A-Z a-z 0-9 {TCHARS})")
        name = given.lower()
        if name in CREDENTIAL_HEADERS or name in SIGNATURE_HEADERS.get(kind, ()) or name == verified_by:
            raise InvalidArgument(f"--keep-header {given}: it carries a credential or this source's signature; "
                                  "it is always redacted")  # fmt: skip
        if not names_a_secret(name):
            raise InvalidArgument(f"--keep-header {given}: it is stored in clear already (its name says no secret)")
        if name not in kept:
            kept.append(name)
    return kept


def kept_headers(source: Source) -> frozenset[str]:
    """The headers this source stores in clear although their name says secret (`source add --keep-header`)."""
    kept = source.config.get("keep_headers")
    return frozenset(h for h in kept if isinstance(h, str)) if isinstance(kept, list) else frozenset()


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
