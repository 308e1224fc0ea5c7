"""POST /hooks/NAME per signature kind, over real HTTP to a real uvicorn (issue 3 §3).

Here: what each kind's signature decides end to end: accepted and stored
once, refused and storing nothing, headers redacted, a redelivery known by the
id the kind names, secrets rotated. The schemes as pure functions (and the
test signer itself) are in test_verifiers.py; what the receiver does around
verification (body cap, unknown sources, store failures, routing, `serve`) is
in test_receiver.py.

Each kind's deliveries are signed by tests/support/signing.py, written from
notes/providers.md rather than from the verifier, and what was stored is read
back with support.sql (what is committed on disk).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from switchboard_local.core import events, sources

import support.signing as signing
from support.receiver import add_source, serving
from support.signing import KIND_OPTIONS, Delivery, delivery, secret_for, signed_headers
from support.sql import counts, records

pytestmark = pytest.mark.anyio

KINDS = ("github", "gitea", "stripe", "slack", "standard", "gitlab", "hmac", "token", "open")
SIGNED = tuple(k for k in KINDS if k != "open")
# gitlab and token send the secret itself: their body is not signed.
BODY_SIGNED = ("github", "gitea", "stripe", "slack", "standard", "hmac")
TIMESTAMPED = ("stripe", "slack", "standard")
# The headers that carry a signature or the secret, per kind (all must be redacted).
SIGNATURE_HEADERS = {
    "github": ("X-Hub-Signature-256",),
    "gitea": ("X-Gitea-Signature", "X-Hub-Signature-256"),
    "stripe": ("Stripe-Signature",),
    "slack": ("X-Slack-Signature",),
    "standard": ("webhook-signature",),
    "gitlab": ("X-Gitlab-Token",),
    "hmac": ("X-Signature",),
    "token": ("Authorization",),
    "open": (),
}
REDACTED = "[redacted]"


@pytest.fixture
def receiver(store, db_path):
    with serving(db_path) as running:
        yield running


async def source(store, kind, *, name=None, secret=None, **options):
    """The test source of a kind, named after it unless told otherwise."""
    if kind != "open" and secret is None:
        secret = secret_for(kind)
    return await add_source(store, name or kind, kind, secret, **KIND_OPTIONS.get(kind, {}), **options)


def send(receiver, name, sent: Delivery):
    return receiver.post(name, sent.body, sent.headers)


def accepted(answer) -> dict:
    assert answer.status == 202, answer.body
    return answer.json()


def refused(answer) -> None:
    assert answer.status == 401, answer.body


# ---------------------------------------------------------------- accepted deliveries


@pytest.mark.both_backends
@pytest.mark.parametrize("kind", KINDS)
async def test_a_signed_delivery_is_stored_once_with_its_todo(kind, store, receiver, db_path):
    await source(store, kind)
    sent = delivery(kind, secret_for(kind))

    got = accepted(send(receiver, kind, sent))

    assert set(got) == {"event_id", "duplicate", "todos"}
    assert got["duplicate"] is False
    assert len(got["todos"]) == 1
    (event,) = records(db_path, "SELECT * FROM events")
    assert event["id"] == got["event_id"]
    assert (event["source"], event["family"], event["trust_mode"]) == (kind, "webhook", kind)
    assert (event["type"], event["external_id"]) == (sent.type, sent.delivery_id)
    assert event["verified"] == (0 if kind == "open" else 1)
    assert bytes(event["body"]) == sent.body  # byte for byte: spacing, UTF-8, CRLF
    todos = records(db_path, "SELECT id, queue, event_id, state, payload FROM todos")
    assert [tuple(t)[:4] for t in todos] == [(got["todos"][0], kind, event["id"], "pending")]
    assert json.loads(todos[0]["payload"])["verified"] is (kind != "open")  # open events are labelled unverified


@pytest.mark.parametrize("kind", KINDS)
async def test_stored_headers_have_signatures_tokens_and_cookies_redacted(kind, store, receiver, db_path):
    secret = None if kind == "open" else secret_for(kind)
    await source(store, kind)
    sent = delivery(kind, secret or "")

    accepted(send(receiver, kind, sent))

    (event,) = records(db_path, "SELECT * FROM events")
    stored = {name.lower(): value for name, value in json.loads(event["headers"]).items()}
    secret_bearing = {n.lower() for n in (*SIGNATURE_HEADERS[kind], "Cookie", "Authorization")}
    for name, value in sent.headers.items():
        assert stored[name.lower()] == (REDACTED if name.lower() in secret_bearing else value), name
    # Neither the secret nor any signature made with it is anywhere in the stored rows.
    hidden = [sent.headers[n] for n in (*SIGNATURE_HEADERS[kind], "Cookie", "Authorization")]
    if secret:
        hidden.append(secret)
    for table in ("events", "todos"):
        for row in records(db_path, f"SELECT * FROM {table}"):
            text = " ".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in tuple(row))
            for value in hidden:
                assert value not in text, f"{value!r} stored in {table}"


# ---------------------------------------------------------------- refused deliveries


@pytest.mark.parametrize("kind", SIGNED)
async def test_a_delivery_signed_with_a_wrong_secret_is_refused_and_stores_nothing(kind, store, receiver, db_path):
    await source(store, kind)
    refused(send(receiver, kind, delivery(kind, secret_for(kind, "wrong"))))
    assert counts(db_path) == (0, 0)


@pytest.mark.parametrize("kind", BODY_SIGNED)
async def test_a_tampered_body_is_refused_and_stores_nothing(kind, store, receiver, db_path):
    await source(store, kind)
    sent = delivery(kind, secret_for(kind))
    tampered = sent.body.replace("café".encode(), "CAFÉ".encode())
    assert tampered != sent.body and len(tampered) == len(sent.body)

    refused(receiver.post(kind, tampered, sent.headers))
    assert counts(db_path) == (0, 0)


def damaged_last(value: str) -> str:
    """The value with its last significant character changed (base64 padding kept)."""
    body, padding = value.rstrip("="), value[len(value.rstrip("=")) :]
    # Not a change of case: hex digests compare case-insensitively (a -> A would still match).
    return body[:-1] + ("B" if body[-1] in "aA" else "A") + padding


@pytest.mark.parametrize("kind", SIGNED)
async def test_a_signature_wrong_only_in_its_last_character_is_refused(kind, store, receiver, db_path):
    await source(store, kind)
    sent = delivery(kind, secret_for(kind))
    header = SIGNATURE_HEADERS[kind][0]
    refused(receiver.post(kind, sent.body, sent.headers | {header: damaged_last(sent.headers[header])}))
    assert counts(db_path) == (0, 0)


@pytest.mark.parametrize("kind", SIGNED)
async def test_a_signature_cut_short_is_refused(kind, store, receiver, db_path):
    await source(store, kind)
    sent = delivery(kind, secret_for(kind))
    header = SIGNATURE_HEADERS[kind][0]
    value = sent.headers[header]
    refused(receiver.post(kind, sent.body, sent.headers | {header: value[: len(value) // 2 + 4]}))
    assert counts(db_path) == (0, 0)


async def test_a_token_sources_configured_header_is_stored_redacted(store, receiver, db_path):
    secret = secret_for("token")
    await source(store, "token", name="tk", header="X-Api-Token")
    sent = delivery("token", secret).without("Authorization")
    accepted(receiver.post("tk", sent.body, sent.headers | {"X-Api-Token": secret}))
    (event,) = records(db_path, "SELECT headers FROM events")
    stored = {k.lower(): v for k, v in json.loads(event["headers"]).items()}
    assert stored["x-api-token"] == REDACTED
    assert secret not in event["headers"]


async def test_githubs_older_sha1_signature_header_is_stored_redacted(store, receiver, db_path):
    await source(store, "github")
    sent = delivery("github", secret_for("github"))
    older = signing.generic_hmac(sent.body, secret_for("github"), header="X-Hub-Signature", algorithm="sha1",
                                 prefix="sha1=")  # fmt: skip
    accepted(receiver.post("github", sent.body, sent.headers | older))
    (event,) = records(db_path, "SELECT headers FROM events")
    stored = {k.lower(): v for k, v in json.loads(event["headers"]).items()}
    assert stored["x-hub-signature"] == REDACTED and older["X-Hub-Signature"] not in event["headers"]


# Credentials a sender may add beside a provider's own headers, under names of its own.
SENDERS_SECRETS = {"X-Api-Key": "ak-123", "X-Auth-Token": "at-456", "X-Webhook-Secret": "ws-789",
                   "X-Session-Id": "sess-1", "X-Db-Password": "pw-2", "X-Client-Credential": "cred-3"}  # fmt: skip


async def test_headers_whose_name_says_secret_are_stored_redacted_and_a_kept_one_in_clear(store, receiver, db_path):
    await source(store, "github", keep_headers=["Idempotency-Key"])
    sent = delivery("github", secret_for("github"))
    extra = {**SENDERS_SECRETS, "Idempotency-Key": "idem-1", "Keep-Alive": "timeout=5", "X-Request-Id": "req-1"}
    got = accepted(receiver.post("github", sent.body, sent.headers | extra))

    shown = (await events.get_event(store, got["event_id"])).full()  # what `events show` and get_event answer
    stored = {k.lower(): v for k, v in shown["headers"].items()}
    for name in SENDERS_SECRETS:
        assert stored[name.lower()] == REDACTED, name
    assert (stored["idempotency-key"], stored["keep-alive"], stored["x-request-id"]) == ("idem-1", "timeout=5", "req-1")
    assert stored["x-hub-signature-256"] == REDACTED
    (row,) = records(db_path, "SELECT headers FROM events")
    for value in SENDERS_SECRETS.values():
        assert value not in row["headers"]


@pytest.mark.parametrize("kind", SIGNED)
async def test_a_delivery_without_its_signature_header_is_refused_and_stores_nothing(kind, store, receiver, db_path):
    await source(store, kind)
    sent = delivery(kind, secret_for(kind)).without(*SIGNATURE_HEADERS[kind])
    refused(send(receiver, kind, sent))
    assert counts(db_path) == (0, 0)


@pytest.mark.parametrize("offset", [-600, 600], ids=["stale", "future"])
@pytest.mark.parametrize("kind", TIMESTAMPED)
async def test_a_timestamp_outside_the_window_is_refused_even_when_signed(kind, offset, store, receiver, db_path):
    await source(store, kind)
    sent = delivery(kind, secret_for(kind), timestamp=int(time.time()) + offset)
    refused(send(receiver, kind, sent))
    assert counts(db_path) == (0, 0)


@pytest.mark.parametrize("kind", TIMESTAMPED)
async def test_the_window_is_the_sources_tolerance(kind, store, receiver, db_path):
    await source(store, kind, tolerance=60)
    now = int(time.time())
    refused(send(receiver, kind, delivery(kind, secret_for(kind), n=1, timestamp=now - 120)))
    refused(send(receiver, kind, delivery(kind, secret_for(kind), n=2, timestamp=now + 120)))
    accepted(send(receiver, kind, delivery(kind, secret_for(kind), n=3, timestamp=now - 30)))
    assert counts(db_path) == (1, 1)


@pytest.mark.parametrize("kind", ["stripe", "standard"])
async def test_any_of_several_signatures_in_the_header_may_match(kind, store, receiver, db_path):
    await source(store, kind)
    now = int(time.time())
    sent = delivery(kind, secret_for(kind), timestamp=now)
    other = signed_headers(kind, sent.body, secret_for(kind, "other"), now, msg_id="msg_1")
    if kind == "stripe":  # t=..,v1=<other>,v1=<ours>
        ours = sent.headers["Stripe-Signature"].split(",")[1]
        header = {"Stripe-Signature": f"{other['Stripe-Signature']},{ours}"}
    else:  # "v1,<other> v1,<ours>"
        header = {"webhook-signature": f"{other['webhook-signature']} {sent.headers['webhook-signature']}"}

    accepted(receiver.post(kind, sent.body, sent.headers | header))
    assert counts(db_path) == (1, 1)


# ---------------------------------------------------------------- duplicates


@pytest.mark.both_backends
@pytest.mark.parametrize("kind", KINDS)
async def test_a_redelivery_answers_the_first_ids_and_adds_nothing(kind, store, receiver, db_path):
    await source(store, kind)
    sent = delivery(kind, secret_for(kind))
    first = accepted(send(receiver, kind, sent))
    stored = counts(db_path)

    again = accepted(send(receiver, kind, sent))

    assert again == {"event_id": first["event_id"], "duplicate": True, "todos": first["todos"]}
    assert counts(db_path) == stored == (1, 1)


@pytest.mark.parametrize("kind", TIMESTAMPED)
async def test_a_provider_retry_signed_anew_is_the_same_delivery(kind, store, receiver, db_path):
    # Stripe, Slack and Svix re-sign each retry with a new timestamp; the delivery id is the same.
    await source(store, kind)
    now = int(time.time())
    first = accepted(send(receiver, kind, delivery(kind, secret_for(kind), timestamp=now - 60)))
    retry = delivery(kind, secret_for(kind), timestamp=now)
    assert retry.headers != delivery(kind, secret_for(kind), timestamp=now - 60).headers

    again = accepted(send(receiver, kind, retry))

    assert again == {"event_id": first["event_id"], "duplicate": True, "todos": first["todos"]}
    assert counts(db_path) == (1, 1)


@pytest.mark.both_backends
async def test_concurrent_copies_of_one_delivery_make_one_event_and_share_its_ids(store, receiver, db_path):
    await source(store, "github")
    sent = delivery("github", secret_for("github"))
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = [accepted(a) for a in pool.map(lambda _: send(receiver, "github", sent), range(16))]

    assert sorted(a["duplicate"] for a in answers) == [False] + [True] * 15
    assert {(a["event_id"], tuple(a["todos"])) for a in answers} == {(answers[0]["event_id"], tuple(answers[0]["todos"]))}
    assert counts(db_path) == (1, 1)


async def test_a_refused_delivery_does_not_claim_its_delivery_id(store, receiver, db_path):
    await source(store, "github")
    forged = delivery("github", "attacker-guess")
    genuine = delivery("github", secret_for("github"))
    assert forged.delivery_id == genuine.delivery_id

    refused(send(receiver, "github", forged))
    got = accepted(send(receiver, "github", genuine))

    assert got["duplicate"] is False
    assert counts(db_path) == (1, 1)


async def test_one_delivery_id_reaching_two_sources_is_two_events(store, receiver, db_path):
    await source(store, "github", name="gh-app")
    await source(store, "github", name="gh-org")
    sent = delivery("github", secret_for("github"))

    first = accepted(send(receiver, "gh-app", sent))
    second = accepted(send(receiver, "gh-org", sent))

    assert first["duplicate"] is False and second["duplicate"] is False
    assert first["event_id"] != second["event_id"]
    assert sorted(r[0] for r in records(db_path, "SELECT source FROM events")) == ["gh-app", "gh-org"]


# ---------------------------------------------------------------- rotation


@pytest.mark.parametrize("kind", SIGNED)
async def test_old_and_new_secret_both_verify_until_the_old_one_is_retired(kind, store, receiver, db_path):
    old, new = secret_for(kind, "old"), secret_for(kind, "new")
    await source(store, kind, secret=old)
    await sources.rotate_secret(store, kind, sources.secret_ref(value=new))

    accepted(send(receiver, kind, delivery(kind, old, n=1)))
    accepted(send(receiver, kind, delivery(kind, new, n=2)))

    await sources.retire_secret(store, kind)

    refused(send(receiver, kind, delivery(kind, old, n=3)))
    accepted(send(receiver, kind, delivery(kind, new, n=4)))
    assert sorted(r[0] for r in records(db_path, "SELECT external_id FROM events")) == sorted(
        delivery(kind, new, n=n).delivery_id for n in (1, 2, 4)
    )


# ---------------------------------------------------------------- secrets as configured


@pytest.mark.parametrize("kind", ["gitlab", "token"])
async def test_a_non_ascii_token_verifies(kind, store, receiver, db_path):
    # The token is sent as its UTF-8 bytes, as any client sends a str header.
    secret = "pässwörd-ünïcode"
    await source(store, kind, secret=secret)
    sent = delivery(kind, "placeholder")
    name, value = {"gitlab": ("X-Gitlab-Token", secret), "token": ("Authorization", f"Bearer {secret}")}[kind]

    accepted(receiver.post(kind, sent.body, sent.headers | {name: value.encode("utf-8")}))
    assert counts(db_path) == (1, 1)
