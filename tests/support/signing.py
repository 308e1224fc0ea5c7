"""Sign a delivery the way each provider does (notes/providers.md), for the tests.

Written from the providers' descriptions, not from switchboard_local.http.verifiers:
a scheme both sides got wrong the same way would otherwise pass unnoticed.
Each scheme's function returns the signature headers a provider would send
for ``body``; ``delivery`` builds a whole delivery (body, naming headers,
signature) per kind.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any


def _mac(key: bytes, message: bytes, digest: str = "sha256") -> bytes:
    return hmac.new(key, message, getattr(hashlib, digest)).digest()


def github(body: bytes, secret: str) -> dict[str, str]:
    """X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>."""
    return {"X-Hub-Signature-256": "sha256=" + _mac(secret.encode(), body).hex()}


def gitea(body: bytes, secret: str) -> dict[str, str]:
    """X-Gitea-Signature: <hex>, and the GitHub header Gitea sends alongside."""
    digest = _mac(secret.encode(), body).hex()
    return {"X-Gitea-Signature": digest, "X-Hub-Signature-256": "sha256=" + digest}


def stripe(body: bytes, secret: str, timestamp: int) -> dict[str, str]:
    """Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "{t}.{body}">."""
    digest = _mac(secret.encode(), f"{timestamp}.".encode() + body).hex()
    return {"Stripe-Signature": f"t={timestamp},v1={digest}"}


def slack(body: bytes, secret: str, timestamp: int) -> dict[str, str]:
    """X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:{ts}:{body}">."""
    digest = _mac(secret.encode(), f"v0:{timestamp}:".encode() + body).hex()
    return {"X-Slack-Request-Timestamp": str(timestamp), "X-Slack-Signature": "v0=" + digest}


def standard(body: bytes, secret: str, timestamp: int, msg_id: str) -> dict[str, str]:
    """Standard Webhooks: key = base64 after "whsec_"; v1,<base64 HMAC of "{id}.{ts}.{body}">."""
    key = base64.b64decode(secret.split("_", 1)[1] if secret.startswith("whsec_") else secret)
    digest = _mac(key, f"{msg_id}.{timestamp}.".encode() + body)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
    }


def gitlab(secret: str) -> dict[str, str]:
    """X-Gitlab-Token: the shared secret itself (no HMAC)."""
    return {"X-Gitlab-Token": secret}


def generic_hmac(
    body: bytes, secret: str, *, header: str, algorithm: str = "sha256", encoding: str = "hex", prefix: str = ""
) -> dict[str, str]:
    """A configured header holding prefix + HMAC(algorithm) of the raw body, hex or base64."""
    digest = _mac(secret.encode(), body, algorithm)
    text = digest.hex() if encoding == "hex" else base64.b64encode(digest).decode()
    return {header: prefix + text}


def token(secret: str, *, header: str = "authorization") -> dict[str, str]:
    """A bearer token in Authorization, or the bare token in a named header."""
    if header.lower() == "authorization":
        return {"Authorization": f"Bearer {secret}"}
    return {header: secret}


def signed_headers(
    kind: str, body: bytes, secret: str, timestamp: int, *, msg_id: str = "msg_1", config: Mapping[str, Any] = {}
) -> dict[str, str]:
    """The signature headers of one kind (``config``: the hmac/token source options)."""
    if kind == "github":
        return github(body, secret)
    if kind == "gitea":
        return gitea(body, secret)
    if kind == "stripe":
        return stripe(body, secret, timestamp)
    if kind == "slack":
        return slack(body, secret, timestamp)
    if kind == "standard":
        return standard(body, secret, timestamp, msg_id)
    if kind == "gitlab":
        return gitlab(secret)
    if kind == "hmac":
        return generic_hmac(
            body,
            secret,
            header=config["header"],
            algorithm=config.get("algorithm") or "sha256",
            encoding=config.get("encoding") or "hex",
            prefix=config.get("prefix") or "",
        )
    if kind == "token":
        return token(secret, header=config.get("header") or "authorization")
    if kind == "open":
        return {}
    raise ValueError(f"unknown kind {kind!r}")


# ---------------------------------------------------------------- whole deliveries
#
# One delivery per kind as its provider would send it: a body that is valid
# JSON but not canonically serialised (odd spacing, UTF-8, CRLF), the headers
# that name it, and the signature. ``type`` and ``delivery_id`` are what
# providers.md says the receiver must derive from it.

# The options each kind's test source is added with (hmac and token need theirs).
KIND_OPTIONS: dict[str, dict[str, str]] = {
    "hmac": {"header": "X-Signature", "algorithm": "sha512", "encoding": "base64", "prefix": "sha512=",
             "id_header": "X-Delivery", "type_header": "X-Event"},
    "token": {"id_header": "X-Delivery", "type_header": "X-Event"},
    "open": {"id_header": "X-Delivery", "type_header": "X-Event"},
}  # fmt: skip


@dataclass(frozen=True)
class Delivery:
    body: bytes
    headers: dict[str, str]
    type: str
    delivery_id: str

    def without(self, *names: str) -> Delivery:
        drop = {n.lower() for n in names}
        return replace(self, headers={k: v for k, v in self.headers.items() if k.lower() not in drop})


def secret_for(kind: str, label: str = "first") -> str:
    """A secret in the form the kind expects (Standard Webhooks: whsec_ + base64)."""
    if kind == "standard":
        return "whsec_" + base64.b64encode(f"{label}-key-bytes-for-standard".encode()).decode()
    return f"{label}-secret-{kind}"


def _body(kind: str, n: int) -> bytes:
    if kind == "stripe":
        fields = f'"id": "evt_{n}", "type": "invoice.paid"'
    elif kind == "slack":
        fields = f'"type": "event_callback", "event_id": "Ev{n}", "event": {{"type": "app_mention"}}'
    elif kind == "standard":
        fields = '"type": "invoice.created"'
    else:
        fields = f'"action": "opened", "pull_request": {{"title": "Fix #{n}"}}'
    return f'{{{fields},   "n": {n}, "note": "café"}}\r\n'.encode()


def delivery(kind: str, secret: str, *, n: int = 1, timestamp: int | None = None, body: bytes | None = None) -> Delivery:
    """Delivery number ``n`` of a kind, signed with ``secret`` at ``timestamp`` (default now)."""
    body = _body(kind, n) if body is None else body
    timestamp = int(time.time()) if timestamp is None else timestamp
    headers = {
        "Content-Type": "application/json",
        "Cookie": "session=cookie-value-not-for-storage",
        "Authorization": "Basic cHJveHktdXNlcjpwcm94eS1wYXNz",  # a proxy's credentials (the token kind overrides it)
    }
    if kind == "github":
        headers |= {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": f"gh-{n}"}
        named = ("pull_request", f"gh-{n}")
    elif kind == "gitea":
        headers |= {"X-Gitea-Event": "push", "X-Gitea-Delivery": f"gitea-{n}"}
        named = ("push", f"gitea-{n}")
    elif kind == "stripe":
        named = ("invoice.paid", f"evt_{n}")
    elif kind == "slack":
        named = ("app_mention", f"Ev{n}")
    elif kind == "standard":
        named = ("invoice.created", f"msg_{n}")
    elif kind == "gitlab":
        headers |= {"X-Gitlab-Event": "Merge Request Hook", "X-Gitlab-Event-UUID": f"uuid-{n}"}
        named = ("Merge Request Hook", f"uuid-{n}")
    else:  # hmac, token, open: the configured id and type headers
        headers |= {"X-Event": f"{kind}.event", "X-Delivery": f"{kind}-{n}"}
        named = (f"{kind}.event", f"{kind}-{n}")
    headers |= signed_headers(kind, body, secret, timestamp, msg_id=f"msg_{n}", config=KIND_OPTIONS.get(kind, {}))
    return Delivery(body, headers, *named)
