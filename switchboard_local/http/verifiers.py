"""Webhook signature schemes: verify a delivery on its raw bytes, name it, redact it.

Pure functions of (source, headers, body, now, secrets): no HTTP here, so
every scheme is testable byte for byte. Headers are passed with lower-case
names. Every comparison of a signature or token is constant-time; every
timestamped scheme refuses deliveries outside the source's tolerance window,
too old or too far in the future. Each active secret is tried, so a secret can
be rotated without losing deliveries.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.events import body_hash
from ..core.sources import Source
from ..core.text import digits
from ..core.webhook_config import kept_headers, names_a_secret, needs_secret

REDACTED = "[redacted]"


class Unverified(Exception):
    """The delivery failed verification (answer 401; store nothing)."""


class SecretUnavailable(Exception):
    """No configured secret could be read (a server-side fault: answer 503)."""


@dataclass(frozen=True)
class Verified:
    type: str
    external_id: str
    detail: str
    challenge: str | None = None  # Slack's url_verification: answer it, store nothing


def resolve_secrets(source: Source) -> list[bytes]:
    """The values of the source's active secrets, newest first; unreadable ones are skipped."""
    values = []
    for ref in reversed(source.secrets):
        value: str | None
        if "env" in ref:
            value = os.environ.get(ref["env"])
        elif "file" in ref:
            try:
                value = Path(ref["file"]).read_text("utf-8").strip()
            except OSError:
                value = None
        else:
            value = ref.get("value")
        if value:
            values.append(value.encode())
    if needs_secret(source.kind) and not values:
        raise SecretUnavailable(f"no secret of source {source.name!r} can be read")
    return values


# ---------------------------------------------------------------- verification


def verify(source: Source, headers: Mapping[str, str], body: bytes, now: float, secrets: list[bytes]) -> Verified:
    """Verify a delivery and name it: its type and its delivery id."""
    return _VERIFIERS[source.kind](source.config, headers, body, now, secrets)


def _hmac_hex(secret: bytes, message: bytes, algorithm: str = "sha256") -> str:
    return hmac.new(secret, message, algorithm).hexdigest()


def _matches(candidates: list[str], expected: list[str] | list[bytes]) -> int | None:
    """Index (1-based) of the secret whose signature matches, compared in constant time.

    Header values arrive decoded as latin-1 (HTTP's rule), so encoding them
    back gives the bytes that were sent, whatever the token's charset.
    """
    found = None
    given = [got.encode("latin-1", "replace") for got in candidates]
    for i, want in enumerate(expected, start=1):
        want_bytes = want if isinstance(want, bytes) else want.encode()
        for got in given:
            if hmac.compare_digest(want_bytes, got):
                found = found or i
    return found


def _which(index: int, count: int) -> str:
    """Which active secret matched, in words: secrets are tried newest first."""
    if count == 1:
        return "the secret"
    return "the newest secret" if index == 1 else "an older secret (retire it once the sender has switched)"


def _require(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if not value:
        raise Unverified(f"missing {name} header")
    return value


def _check_window(timestamp: str, now: float, tolerance: int) -> None:
    ts = digits(timestamp)
    if ts is None:
        raise Unverified("the timestamp is not a whole number of seconds (ASCII digits)")
    if ts < now - tolerance:
        raise Unverified(f"the timestamp is older than {tolerance} s")
    if ts > now + tolerance:
        raise Unverified(f"the timestamp is more than {tolerance} s in the future")


def _json_field(body: bytes, *path: str) -> str | None:
    """A string field of a JSON body, if it has one that can be stored (valid UTF-8)."""
    try:
        value: Any = json.loads(body)
    except (ValueError, RecursionError):
        return None
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    if not isinstance(value, str) or not value:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


def _hex_signed(prefix: str, header: str, type_header: str, id_header: str):  # noqa: ANN202
    """GitHub-style: HMAC-SHA256 hex of the raw body in one header."""

    def check(config: dict[str, Any], headers: Mapping[str, str], body: bytes, now: float, secrets: list[bytes]) -> Verified:
        given = _require(headers, header)
        if not given.startswith(prefix):
            raise Unverified(f"{header} does not start with {prefix!r}")
        index = _matches([given[len(prefix):].lower()], [_hmac_hex(s, body) for s in secrets])
        if index is None:
            raise Unverified(f"{header} does not match")
        return Verified(
            type=headers.get(type_header) or "webhook",
            external_id=headers.get(id_header) or body_hash(body),
            detail=f"{header} matched {_which(index, len(secrets))}",
        )

    return check


def _stripe(config: dict[str, Any], headers: Mapping[str, str], body: bytes, now: float, secrets: list[bytes]) -> Verified:
    parts = [p.split("=", 1) for p in _require(headers, "stripe-signature").split(",") if "=" in p]
    timestamp = next((v for k, v in parts if k.strip() == "t"), None)
    given = [v.strip().lower() for k, v in parts if k.strip() == "v1"]
    if timestamp is None or not given:
        raise Unverified("stripe-signature has no t= or no v1= element")
    _check_window(timestamp, now, config["tolerance"])
    index = _matches(given, [_hmac_hex(s, timestamp.encode() + b"." + body) for s in secrets])
    if index is None:
        raise Unverified("stripe-signature does not match")
    return Verified(
        type=_json_field(body, "type") or "webhook",
        external_id=_json_field(body, "id") or body_hash(body),
        detail=f"stripe-signature v1 matched {_which(index, len(secrets))}",
    )


def _slack(config: dict[str, Any], headers: Mapping[str, str], body: bytes, now: float, secrets: list[bytes]) -> Verified:
    timestamp = _require(headers, "x-slack-request-timestamp")
    given = _require(headers, "x-slack-signature")
    _check_window(timestamp, now, config["tolerance"])
    if not given.startswith("v0="):
        raise Unverified("x-slack-signature does not start with 'v0='")
    base = b"v0:" + timestamp.encode() + b":" + body
    index = _matches([given[3:].lower()], [_hmac_hex(s, base) for s in secrets])
    if index is None:
        raise Unverified("x-slack-signature does not match")
    detail = f"x-slack-signature matched {_which(index, len(secrets))}"
    if _json_field(body, "type") == "url_verification":
        return Verified("url_verification", body_hash(body), detail, challenge=_json_field(body, "challenge") or "")
    return Verified(
        type=_json_field(body, "event", "type") or _json_field(body, "type") or "webhook",
        external_id=_json_field(body, "event_id") or body_hash(body),
        detail=detail,
    )


def _standard(config: dict[str, Any], headers: Mapping[str, str], body: bytes, now: float, secrets: list[bytes]) -> Verified:
    msg_id = _require(headers, "webhook-id")
    timestamp = _require(headers, "webhook-timestamp")
    signatures = _require(headers, "webhook-signature")
    _check_window(timestamp, now, config["tolerance"])
    given = [s.split(",", 1)[1] for s in signatures.split() if s.startswith("v1,")]
    signed = f"{msg_id}.{timestamp}.".encode() + body
    expected = []
    for secret in secrets:
        try:
            key = base64.b64decode(secret.removeprefix(b"whsec_"), validate=True)
        except binascii.Error:
            key = secret  # not base64: use the bytes as given
        expected.append(base64.b64encode(hmac.new(key, signed, "sha256").digest()).decode())
    index = _matches(given, expected)
    if index is None:
        raise Unverified("webhook-signature has no matching v1 signature")
    return Verified(
        type=_json_field(body, "type") or "webhook",
        external_id=msg_id,
        detail=f"webhook-signature v1 matched {_which(index, len(secrets))}",
    )


def _gitlab(config: dict[str, Any], headers: Mapping[str, str], body: bytes, now: float, secrets: list[bytes]) -> Verified:
    index = _matches([_require(headers, "x-gitlab-token")], secrets)
    if index is None:
        raise Unverified("x-gitlab-token does not match")
    return Verified(
        type=headers.get("x-gitlab-event") or "webhook",
        external_id=headers.get("x-gitlab-event-uuid") or headers.get("idempotency-key") or body_hash(body),
        detail=f"x-gitlab-token matched {_which(index, len(secrets))}",
    )


def _named(config: dict[str, Any], headers: Mapping[str, str], body: bytes, detail: str) -> Verified:
    return Verified(
        type=headers.get(config.get("type_header", ""), "") or "webhook",
        external_id=headers.get(config.get("id_header", ""), "") or body_hash(body),
        detail=detail,
    )


def _generic_hmac(config: dict[str, Any], headers: Mapping[str, str], body: bytes, now: float, secrets: list[bytes]) -> Verified:
    header, prefix = config["header"], config["prefix"]
    given = _require(headers, header)
    if not given.startswith(prefix):
        raise Unverified(f"{header} does not start with {prefix!r}")
    given = given[len(prefix):]
    digests = [hmac.new(s, body, config["algorithm"]).digest() for s in secrets]
    if config["encoding"] == "hex":
        index = _matches([given.lower()], [d.hex() for d in digests])
    else:
        index = _matches([given], [base64.b64encode(d).decode() for d in digests])
    if index is None:
        raise Unverified(f"{header} does not match")
    return _named(config, headers, body, f"{header} {config['algorithm']} matched {_which(index, len(secrets))}")


def _token(config: dict[str, Any], headers: Mapping[str, str], body: bytes, now: float, secrets: list[bytes]) -> Verified:
    header = config["header"]
    given = _require(headers, header)
    if header == "authorization":
        scheme, _, given = given.partition(" ")
        if scheme.lower() != "bearer":
            raise Unverified("authorization is not a Bearer token")
    index = _matches([given.strip()], secrets)
    if index is None:
        raise Unverified(f"{header} token does not match")
    return _named(config, headers, body, f"{header} token matched {_which(index, len(secrets))}")


def _open(config: dict[str, Any], headers: Mapping[str, str], body: bytes, now: float, secrets: list[bytes]) -> Verified:
    return _named(config, headers, body, "open source: not verified")


_VERIFIERS = {
    "github": _hex_signed("sha256=", "x-hub-signature-256", "x-github-event", "x-github-delivery"),
    "gitea": _hex_signed("", "x-gitea-signature", "x-gitea-event", "x-gitea-delivery"),
    "stripe": _stripe,
    "slack": _slack,
    "standard": _standard,
    "gitlab": _gitlab,
    "hmac": _generic_hmac,
    "token": _token,
    "open": _open,
}


def redact(headers: Mapping[str, str], source: Source) -> dict[str, str]:
    """Headers as stored: each whose name says it holds a secret (a credential, a signature, a
    session, a cookie) replaced, unless the source keeps it; the header an hmac or token source
    reads its secret from, whatever it is called, always."""
    configured = source.config.get("header")  # hmac and token sources alone have one (webhook_config.source_config)
    kept = kept_headers(source)
    return {name: REDACTED if _hidden(name.lower(), configured, kept) else value for name, value in headers.items()}


def _hidden(name: str, configured: str | None, kept: frozenset[str]) -> bool:
    return name == configured or (names_a_secret(name) and name not in kept)
