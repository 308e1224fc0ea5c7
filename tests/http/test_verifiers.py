"""The signature schemes as pure functions (webhooks.verify): what each accepts,
how it names a delivery, what it says when it refuses, and the configuration
behind it; and the test signer checked against the providers' own examples.
No HTTP here: test_signature_kinds.py runs the same schemes over HTTP, and
test_receiver.py what the receiver does around them.

Deliveries are signed by tests/support/signing.py, written from the providers'
descriptions.
"""

from __future__ import annotations

import base64

import pytest

from switchboard_local.core import webhook_config
from switchboard_local.core.errors import InvalidArgument
from switchboard_local.core.events import body_hash
from switchboard_local.core.sources import Source
from switchboard_local.http import verifiers as webhooks
from switchboard_local.http.verifiers import SecretUnavailable, Unverified, Verified

import support.signing as signing
from support.signing import KIND_OPTIONS, delivery, secret_for

NOW = 1_767_225_600  # seconds


def source(kind: str, *, secrets: list[dict[str, str]] | None = None, **options) -> Source:
    config = webhook_config.source_config(kind, {**KIND_OPTIONS.get(kind, {}), **options})
    if secrets is None:
        secrets = [] if kind == "open" else [{"value": secret_for(kind)}]
    return Source(name=kind, family="webhook", kind=kind, trust_mode=kind, enabled=True, config=config,
                   secrets=secrets, created_at=0, updated_at=0, last_poll_at=None, last_error=None,
                   consecutive_failures=0, messages_stored=0)  # fmt: skip


def verify(src: Source, headers: dict[str, str], body: bytes, *, now: int = NOW) -> Verified:
    lowered = {k.lower(): v for k, v in headers.items()}
    return webhooks.verify(src, lowered, body, now, webhooks.resolve_secrets(src))


def refusal(src: Source, headers: dict[str, str], body: bytes, *, now: int = NOW) -> str:
    with pytest.raises(Unverified) as refused:
        verify(src, headers, body, now=now)
    return str(refused.value)


# ---------------------------------------------------------------- naming a delivery

DETAIL = {
    "github": "x-hub-signature-256 matched the secret",
    "gitea": "x-gitea-signature matched the secret",
    "stripe": "stripe-signature v1 matched the secret",
    "slack": "x-slack-signature matched the secret",
    "standard": "webhook-signature v1 matched the secret",
    "gitlab": "x-gitlab-token matched the secret",
    "hmac": "x-signature sha512 matched the secret",
    "token": "authorization token matched the secret",
    "open": "open source: not verified",
}


@pytest.mark.parametrize("kind", webhook_config.KINDS)
def test_each_scheme_names_the_delivery_by_its_type_and_id_and_says_how_it_matched(kind):
    sent = delivery(kind, secret_for(kind), timestamp=NOW)
    got = verify(source(kind), sent.headers, sent.body)
    assert (got.type, got.external_id, got.detail, got.challenge) == (sent.type, sent.delivery_id, DETAIL[kind], None)


@pytest.mark.parametrize("kind", ("github", "gitea", "gitlab", "hmac", "token", "open"))
def test_without_type_or_id_headers_a_delivery_is_a_webhook_keyed_by_its_body(kind):
    sent = delivery(kind, secret_for(kind), timestamp=NOW)
    naming = {"x-github-event", "x-github-delivery", "x-gitea-event", "x-gitea-delivery", "x-gitlab-event",
              "x-gitlab-event-uuid", "x-event", "x-delivery"}  # fmt: skip
    headers = {k: v for k, v in sent.headers.items() if k.lower() not in naming}
    got = verify(source(kind), headers, sent.body)
    assert (got.type, got.external_id) == ("webhook", body_hash(sent.body))


@pytest.mark.parametrize("kind", ("stripe", "standard"))
def test_a_body_without_a_type_is_a_webhook(kind):
    body = b'{"id": "evt_9"}' if kind == "stripe" else b"{}"
    headers = signing.signed_headers(kind, body, secret_for(kind), NOW, msg_id="msg_9")
    got = verify(source(kind), headers, body)
    assert got.type == "webhook"
    assert got.external_id == ("evt_9" if kind == "stripe" else "msg_9")


def test_a_stripe_body_without_an_id_is_keyed_by_its_hash():
    body = b'{"type": "invoice.paid"}'
    got = verify(source("stripe"), signing.stripe(body, secret_for("stripe"), NOW), body)
    assert got.external_id == body_hash(body)


def test_gitlab_falls_back_to_its_idempotency_key_header_for_the_delivery_id():
    body = b"{}"
    headers = {"X-Gitlab-Token": secret_for("gitlab"), "Idempotency-Key": "idem-7"}
    assert verify(source("gitlab"), headers, body).external_id == "idem-7"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"type": "event_callback", "event_id": "Ev1", "event": {"type": "app_mention"}}', ("app_mention", "Ev1")),
        (b'{"type": "event_callback", "event_id": "Ev2"}', ("event_callback", "Ev2")),
        (b'{"event_id": 7, "event": {"type": 3}}', ("webhook", None)),  # non-strings name nothing
        (b"not json", ("webhook", None)),
    ],
)
def test_slack_names_a_delivery_by_its_event_type_and_event_id(body, expected):
    got = verify(source("slack"), signing.slack(body, secret_for("slack"), NOW), body)
    assert (got.type, got.external_id) == (expected[0], expected[1] or body_hash(body))


def test_slacks_url_verification_carries_its_challenge():
    body = b'{"type": "url_verification", "challenge": "3eZbrw1a"}'
    got = verify(source("slack"), signing.slack(body, secret_for("slack"), NOW), body)
    assert (got.type, got.challenge, got.external_id) == ("url_verification", "3eZbrw1a", body_hash(body))


def test_a_json_field_that_is_not_valid_text_names_nothing():
    body = b'{"id": "evt_\\ud800", "type": "invoice.paid"}'  # a lone surrogate: cannot be stored
    got = verify(source("stripe"), signing.stripe(body, secret_for("stripe"), NOW), body)
    assert (got.type, got.external_id) == ("invoice.paid", body_hash(body))


# ---------------------------------------------------------------- rotation


@pytest.mark.parametrize("kind", ("github", "stripe", "slack", "standard", "gitlab", "hmac", "token"))
def test_with_two_secrets_the_detail_says_whether_the_newest_or_an_older_one_matched(kind):
    old, new = secret_for(kind, "old"), secret_for(kind, "new")
    src = source(kind, secrets=[{"value": old}, {"value": new}])
    by_new = verify(src, delivery(kind, new, timestamp=NOW).headers, delivery(kind, new, timestamp=NOW).body)
    by_old = verify(src, delivery(kind, old, timestamp=NOW).headers, delivery(kind, old, timestamp=NOW).body)
    assert by_new.detail.endswith("matched the newest secret")
    assert by_old.detail.endswith("matched an older secret (retire it once the sender has switched)")


def test_secrets_are_tried_newest_first_from_the_environment_a_file_or_the_value(tmp_path, monkeypatch):
    monkeypatch.setenv("HOOK_SECRET", "from-env")
    secret_file = tmp_path / "secret"
    secret_file.write_text("  from-file\n")
    src = source("github", secrets=[{"env": "HOOK_SECRET"}, {"file": str(secret_file)}, {"value": "from-value"}])
    assert webhooks.resolve_secrets(src) == [b"from-value", b"from-file", b"from-env"]


def test_unreadable_secrets_are_skipped_and_none_readable_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    src = source("github", secrets=[{"env": "NOT_SET_ANYWHERE"}, {"file": str(tmp_path / "missing")}, {"value": "v"}])
    assert webhooks.resolve_secrets(src) == [b"v"]
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SecretUnavailable, match="'github'"):
        webhooks.resolve_secrets(source("github", secrets=[{"env": "NOT_SET_ANYWHERE"}, {"file": str(empty)}]))
    assert webhooks.resolve_secrets(source("open")) == []


# ---------------------------------------------------------------- refusals, each saying why


@pytest.mark.parametrize(
    ("kind", "drop", "reason"),
    [
        ("github", "X-Hub-Signature-256", "missing x-hub-signature-256 header"),
        ("gitea", "X-Gitea-Signature", "missing x-gitea-signature header"),
        ("stripe", "Stripe-Signature", "missing stripe-signature header"),
        ("slack", "X-Slack-Signature", "missing x-slack-signature header"),
        ("slack", "X-Slack-Request-Timestamp", "missing x-slack-request-timestamp header"),
        ("standard", "webhook-id", "missing webhook-id header"),
        ("standard", "webhook-timestamp", "missing webhook-timestamp header"),
        ("standard", "webhook-signature", "missing webhook-signature header"),
        ("gitlab", "X-Gitlab-Token", "missing x-gitlab-token header"),
        ("hmac", "X-Signature", "missing x-signature header"),
        ("token", "Authorization", "missing authorization header"),
    ],
)
def test_a_missing_header_is_refused_naming_it(kind, drop, reason):
    sent = delivery(kind, secret_for(kind), timestamp=NOW).without(drop)
    assert refusal(source(kind), sent.headers, sent.body) == reason


@pytest.mark.parametrize(
    ("kind", "header", "value", "reason"),
    [
        ("github", "X-Hub-Signature-256", "sha1=abc", "x-hub-signature-256 does not start with 'sha256='"),
        ("github", "X-Hub-Signature-256", "sha256=" + "0" * 64, "x-hub-signature-256 does not match"),
        ("gitea", "X-Gitea-Signature", "0" * 64, "x-gitea-signature does not match"),
        ("stripe", "Stripe-Signature", f"t={NOW}", "stripe-signature has no t= or no v1= element"),
        ("stripe", "Stripe-Signature", "v1=" + "0" * 64, "stripe-signature has no t= or no v1= element"),
        ("stripe", "Stripe-Signature", f"t={NOW},v1=" + "0" * 64, "stripe-signature does not match"),
        ("slack", "X-Slack-Signature", "v1=" + "0" * 64, "x-slack-signature does not start with 'v0='"),
        ("slack", "X-Slack-Signature", "v0=" + "0" * 64, "x-slack-signature does not match"),
        ("standard", "webhook-signature", "v2,abc", "webhook-signature has no matching v1 signature"),
        ("gitlab", "X-Gitlab-Token", "wrong", "x-gitlab-token does not match"),
        ("hmac", "X-Signature", "sha256=abc", "x-signature does not start with 'sha512='"),
        ("hmac", "X-Signature", "sha512=abc", "x-signature does not match"),
        ("token", "Authorization", "Basic abc", "authorization is not a Bearer token"),
        ("token", "Authorization", "Bearer wrong", "authorization token does not match"),
    ],
)
def test_a_bad_signature_is_refused_saying_why(kind, header, value, reason):
    sent = delivery(kind, secret_for(kind), timestamp=NOW)
    assert refusal(source(kind), sent.headers | {header: value}, sent.body) == reason


@pytest.mark.parametrize("kind", ("stripe", "slack", "standard"))
def test_the_timestamp_window_includes_both_its_ends_and_nothing_beyond(kind):
    src = source(kind, tolerance=300)
    for offset in (-300, 300):
        sent = delivery(kind, secret_for(kind), timestamp=NOW + offset)
        assert verify(src, sent.headers, sent.body).detail == DETAIL[kind]
    stale = delivery(kind, secret_for(kind), timestamp=NOW - 301)
    assert refusal(src, stale.headers, stale.body) == "the timestamp is older than 300 s"
    future = delivery(kind, secret_for(kind), timestamp=NOW + 301)
    assert refusal(src, future.headers, future.body) == "the timestamp is more than 300 s in the future"


# Not ASCII digits: a word, '²' (str.isdigit() passes it, int() refuses it), and NOW in Arabic-Indic and
# fullwidth digits (int() reads both).
NOT_ASCII_DIGITS = ["soon", "²", str(NOW).translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")),
                    str(NOW).translate(str.maketrans("0123456789", "０１２３４５６７８９"))]  # fmt: skip


@pytest.mark.parametrize("kind", ("stripe", "slack", "standard"))
@pytest.mark.parametrize("written", NOT_ASCII_DIGITS)
def test_a_timestamp_that_is_not_a_whole_number_in_ascii_digits_is_refused_saying_so(kind, written):
    body = b"{}"
    # Signed as it is sent, so that only the timestamp's digits can be what is refused.
    headers = signing.signed_headers(kind, body, secret_for(kind), written)  # type: ignore[arg-type]
    assert refusal(source(kind), headers, body) == "the timestamp is not a whole number of seconds (ASCII digits)"


# ---------------------------------------------------------------- generic hmac and token


@pytest.mark.parametrize("algorithm", webhook_config.ALGORITHMS)
@pytest.mark.parametrize("encoding", webhook_config.ENCODINGS)
def test_generic_hmac_verifies_each_algorithm_and_encoding(algorithm, encoding):
    src = source("hmac", header="X-Sig", algorithm=algorithm, encoding=encoding, prefix="v=", id_header="X-Id")
    body = b'{"n": 1}'
    headers = signing.generic_hmac(body, secret_for("hmac"), header="X-Sig", algorithm=algorithm, encoding=encoding,
                                   prefix="v=") | {"X-Id": "d-1"}  # fmt: skip
    got = verify(src, headers, body)
    assert (got.external_id, got.detail) == ("d-1", f"x-sig {algorithm} matched the secret")
    other = source("hmac", header="X-Sig", algorithm=algorithm, encoding="hex" if encoding == "base64" else "base64",
                   prefix="v=")  # fmt: skip
    assert refusal(other, headers, body) == "x-sig does not match"


def test_a_hex_signature_matches_in_either_case_and_base64_only_exactly():
    body = b"{}"
    hex_src = source("hmac", header="X-Sig", algorithm="sha256", encoding="hex", prefix="")
    hex_sig = signing.generic_hmac(body, secret_for("hmac"), header="X-Sig")["X-Sig"]
    assert verify(hex_src, {"X-Sig": hex_sig.upper()}, body).detail == "x-sig sha256 matched the secret"
    b64_src = source("hmac", header="X-Sig", algorithm="sha256", encoding="base64", prefix="")
    b64_sig = signing.generic_hmac(body, secret_for("hmac"), header="X-Sig", encoding="base64")["X-Sig"]
    assert verify(b64_src, {"X-Sig": b64_sig}, body).detail == "x-sig sha256 matched the secret"
    flipped = b64_sig.swapcase()
    assert flipped != b64_sig and refusal(b64_src, {"X-Sig": flipped}, body) == "x-sig does not match"


def test_a_token_in_its_own_header_is_compared_whole_and_trimmed():
    src = source("token", header="X-Api-Token")
    secret = secret_for("token")
    assert verify(src, {"X-Api-Token": f"  {secret} "}, b"{}").detail == "x-api-token token matched the secret"
    assert refusal(src, {"X-Api-Token": secret + "x"}, b"{}") == "x-api-token token does not match"


def test_a_bearer_scheme_is_recognised_in_any_case():
    src = source("token")
    assert verify(src, {"Authorization": f"bearer {secret_for('token')}"}, b"{}").detail == DETAIL["token"]


def test_stripe_accepts_any_of_several_v1_signatures():
    body = b'{"id": "evt_1", "type": "invoice.paid"}'
    good = signing.stripe(body, secret_for("stripe"), NOW)["Stripe-Signature"].split(",")[1]
    header = f"t={NOW},v1={'0' * 64},{good}"
    assert verify(source("stripe"), {"Stripe-Signature": header}, body).external_id == "evt_1"


def test_a_standard_webhooks_secret_without_whsec_is_used_as_its_bytes():
    body, secret = b'{"type": "x"}', "plain-secret-bytes"
    headers = signing.signed_headers("standard", body, base64.b64encode(secret.encode()).decode(), NOW)
    assert verify(source("standard", secrets=[{"value": secret}]), headers, body).type == "x"


# ---------------------------------------------------------------- configuration and redaction


def test_source_config_defaults():
    assert webhook_config.source_config("github", {}) == {"tolerance": 300, "max_body": 5 * 1024 * 1024,
                                                    "replay_window": 86400}  # fmt: skip
    assert webhook_config.source_config("hmac", {"header": "X-Sig"}) == {
        "tolerance": 300, "max_body": 5 * 1024 * 1024, "replay_window": 86400,
        "header": "x-sig", "algorithm": "sha256", "encoding": "hex", "prefix": "",
    }  # fmt: skip
    assert webhook_config.source_config("token", {})["header"] == "authorization"
    assert webhook_config.source_config("open", {"id_header": "X-Id", "type_header": "X-Type", "queue": "q"}) == {
        "tolerance": 300, "max_body": 5 * 1024 * 1024, "replay_window": 0, "id_header": "x-id",
        "type_header": "x-type", "queue": "q",
    }  # fmt: skip


OPTIONS_OF_HMAC_AND_TOKEN = "--header, --algorithm, --encoding and --prefix apply to kinds hmac and token, not {}"
OWN_ID_AND_TYPE = "kind {} names its own delivery id and type; --id-header and --type-header apply to hmac, token and open"


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        ("nope", {}, "kind must be one of github, gitea, stripe, slack, standard, gitlab, hmac, token, open, got 'nope'"),
        ("hmac", {}, "kind hmac needs --header (the signature header's name)"),
        ("hmac", {"header": "X", "algorithm": "md5"}, "algorithm must be one of sha1, sha256, sha512"),
        ("hmac", {"header": "X", "encoding": "base32"}, "encoding must be one of hex, base64"),
        ("github", {"header": "X"}, OPTIONS_OF_HMAC_AND_TOKEN.format("github")),
        ("gitea", {"algorithm": "sha1"}, OPTIONS_OF_HMAC_AND_TOKEN.format("gitea")),
        ("slack", {"encoding": "base64"}, OPTIONS_OF_HMAC_AND_TOKEN.format("slack")),
        ("stripe", {"prefix": "v1="}, OPTIONS_OF_HMAC_AND_TOKEN.format("stripe")),
        ("github", {"id_header": "X-Id"}, OWN_ID_AND_TYPE.format("github")),
        ("slack", {"type_header": "X-T"}, OWN_ID_AND_TYPE.format("slack")),
        ("github", {"tolerance": 0}, "tolerance must be a whole number from 1 to 86400"),
        ("github", {"tolerance": 86401}, "tolerance must be a whole number from 1 to 86400"),
        ("github", {"tolerance": True}, "tolerance must be a whole number from 1 to 86400"),
        ("github", {"max_body": 64 * 1024 * 1024 + 1}, "max_body must be a whole number from 1 to 67108864"),
        ("github", {"replay_window": -1}, "replay window must be a whole number of seconds from 0 (off) to 7 days"),
    ],
)
def test_a_bad_source_configuration_is_refused_naming_what_is_wrong(kind, options, message):
    with pytest.raises(InvalidArgument) as refused:
        webhook_config.source_config(kind, options)
    assert refused.value.message == message


def test_hmac_and_token_sources_keep_their_header_options_lowercased():
    config = webhook_config.source_config("hmac", {"header": "X-Sig", "algorithm": "sha512", "encoding": "base64",
                                             "prefix": "v0=", "id_header": "X-Id", "type_header": "X-Type"})  # fmt: skip
    assert {k: config[k] for k in ("header", "algorithm", "encoding", "prefix", "id_header", "type_header")} == {
        "header": "x-sig", "algorithm": "sha512", "encoding": "base64", "prefix": "v0=", "id_header": "x-id",
        "type_header": "x-type"}  # fmt: skip
    assert webhook_config.source_config("token", {"header": "X-Token"})["header"] == "x-token"


@pytest.mark.parametrize("kind", ("hmac", "token"))
def test_the_configured_secret_header_of_hmac_and_token_sources_is_redacted(kind):
    src = source(kind, header="X-Custom")
    stored = webhooks.redact({"x-custom": "secret", "x-other": "kept", "cookie": "c"}, src)
    assert stored == {"x-custom": "[redacted]", "x-other": "kept", "cookie": "[redacted]"}


def test_other_kinds_keep_a_header_they_do_not_use_for_secrets():
    stored = webhooks.redact({"x-custom": "kept", "x-hub-signature": "sha1=…"}, source("stripe"))
    assert stored == {"x-custom": "kept", "x-hub-signature": "[redacted]"}


# Header names, and whether the name rule stores them redacted: a credential, a signature,
# a session or a cookie, whatever the sender calls it; nothing else.
NAMES_SAY_SECRET = {
    "X-Api-Key": True, "X-Apikey": True, "X-Auth-Token": True, "X-Webhook-Secret": True, "Authorization": True,
    "Proxy-Authorization": True, "Cookie": True, "Set-Cookie": True, "X-Hub-Signature-256": True,
    "X-Hub-Signature": True, "X-Gitea-Signature": True, "X-Gogs-Signature": True, "Stripe-Signature": True,
    "X-Slack-Signature": True, "webhook-signature": True, "X-Gitlab-Token": True, "X-Shopify-Hmac-Sha256": True,
    "Linear-Signature": True, "X-Session-Id": True, "X-Db-Password": True, "X-Passwd": True,
    "X-Client-Credentials": True, "X-CSRF-Token": True, "Idempotency-Key": True,
    "Keep-Alive": False, "Content-Type": False, "Content-Length": False, "User-Agent": False, "Host": False,
    "Accept-Encoding": False, "Connection": False, "X-GitHub-Event": False, "X-GitHub-Delivery": False,
    "X-GitHub-Hook-ID": False, "X-Gitlab-Event": False, "X-Gitlab-Event-UUID": False, "X-Request-Id": False,
    "X-Forwarded-For": False, "webhook-id": False, "webhook-timestamp": False, "X-Slack-Request-Timestamp": False,
}  # fmt: skip


@pytest.mark.parametrize("name", NAMES_SAY_SECRET)
def test_a_header_is_redacted_when_its_name_says_it_holds_a_secret(name):
    stored = webhooks.redact({name.lower(): "value"}, source("github"))
    assert stored[name.lower()] == ("[redacted]" if NAMES_SAY_SECRET[name] else "value")


def test_a_source_keeps_the_headers_it_names_in_clear_and_only_those():
    src = source("github", keep_headers=["Idempotency-Key", "X-Session-Id"])
    headers = {"idempotency-key": "i", "x-session-id": "s", "x-api-key": "k", "x-hub-signature-256": "sig"}
    assert webhooks.redact(headers, src) == {"idempotency-key": "i", "x-session-id": "s", "x-api-key": "[redacted]",
                                             "x-hub-signature-256": "[redacted]"}  # fmt: skip
    assert src.config["keep_headers"] == ["idempotency-key", "x-session-id"]


ALWAYS_REDACTED = "--keep-header {}: it carries a credential or this source's signature; it is always redacted"
NOT_A_NAME = "--keep-header {!r} is not a header name (1-128 of: A-Z a-z 0-9 !#$%&'*+-.^_`|~)"
IN_CLEAR = "--keep-header {}: it is stored in clear already (its name says no secret)"


@pytest.mark.parametrize(
    ("kind", "options", "keep", "message"),
    [
        ("github", {}, "Content-Type", IN_CLEAR.format("Content-Type")),
        ("github", {}, "Authorization", ALWAYS_REDACTED.format("Authorization")),
        ("github", {}, "X-Hub-Signature-256", ALWAYS_REDACTED.format("X-Hub-Signature-256")),
        ("gitlab", {}, "X-Gitlab-Token", ALWAYS_REDACTED.format("X-Gitlab-Token")),
        ("token", {"header": "X-Api-Key"}, "x-api-key", ALWAYS_REDACTED.format("x-api-key")),
        ("hmac", {"header": "X-Sig"}, "X-Sig", ALWAYS_REDACTED.format("X-Sig")),
        ("github", {}, "X Api Key", NOT_A_NAME.format("X Api Key")),
        ("github", {}, "", NOT_A_NAME.format("")),
        ("github", {}, "X-Api-Key\n", NOT_A_NAME.format("X-Api-Key\n")),
    ],
)
def test_a_header_that_cannot_be_kept_is_refused_naming_why(kind, options, keep, message):
    with pytest.raises(InvalidArgument) as refused:
        webhook_config.source_config(kind, {**options, "keep_headers": [keep]})
    assert refused.value.message == message


# ---------------------------------------------------------------- malformed signature elements


def test_a_standard_webhooks_signature_with_more_after_a_comma_is_refused():
    body = b'{"type": "x"}'
    sent = signing.standard(body, secret_for("standard"), NOW, "msg_1")
    signature = sent["webhook-signature"].removeprefix("v1,")
    for forged in (f"v1,{signature},junk", f"v1,junk,{signature}"):
        reason = refusal(source("standard"), sent | {"webhook-signature": forged}, body)
        assert reason == "webhook-signature has no matching v1 signature"


def test_a_stripe_element_with_an_equals_sign_in_its_value_is_refused_as_not_matching():
    body = b'{"id": "evt_1", "type": "invoice.paid"}'
    sent = signing.stripe(body, secret_for("stripe"), NOW)
    t, v1 = sent["Stripe-Signature"].split(",")
    for forged in (f"{t},{v1}=x", f"{t},v1=x={v1.removeprefix('v1=')}"):
        assert refusal(source("stripe"), {"Stripe-Signature": forged}, body) == "stripe-signature does not match"


def test_a_bearer_token_holding_a_space_is_compared_whole():
    src = source("token", secrets=[{"value": "two words"}])
    assert verify(src, {"Authorization": "Bearer two words"}, b"{}").detail == "authorization token matched the secret"
    assert refusal(src, {"Authorization": "Bearer words"}, b"{}") == "authorization token does not match"


def test_slacks_url_verification_says_how_it_matched_and_answers_an_empty_challenge_when_none_is_sent():
    body = b'{"type": "url_verification"}'
    got = verify(source("slack"), signing.slack(body, secret_for("slack"), NOW), body)
    assert (got.challenge, got.detail) == ("", DETAIL["slack"])


@pytest.mark.parametrize(("option", "value"), [("tolerance", 1), ("tolerance", 86400), ("max_body", 1),
                                               ("max_body", 64 * 1024 * 1024), ("replay_window", 0),
                                               ("replay_window", 7 * 86400)])  # fmt: skip
def test_source_options_at_their_bounds_are_accepted(option, value):
    assert webhook_config.source_config("github", {option: value})[option] == value


def test_a_replay_window_that_is_not_a_whole_number_is_refused():
    for value in (True, 1.5, "60"):
        with pytest.raises(InvalidArgument):
            webhook_config.source_config("github", {"replay_window": value})


@pytest.mark.parametrize(("kind", "window"), [("github", 86400), ("stripe", 0), ("open", 0)])
def test_a_source_stored_before_replay_windows_existed_gets_its_kinds_default(kind, window):
    src = source(kind)
    del src.config["replay_window"]
    assert webhook_config.replay_window(src) == window


# ---------------------------------------------------------------- the signer itself


SLACK_EXAMPLE_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
    b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
    b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
    b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)


def test_the_test_signer_reproduces_the_providers_published_examples():
    # GitHub's, Slack's and the Standard Webhooks spec's own worked examples:
    # the signer the receiver is tested against is right on its own terms.
    assert signing.github(b"Hello, World!", "It's a Secret to Everybody") == {
        "X-Hub-Signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    }
    assert signing.slack(SLACK_EXAMPLE_BODY, "8f742231b10e8888abcd99yyyzzz85a5", 1531420618)["X-Slack-Signature"] == (
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    )
    assert signing.standard(
        b'{"test": 2432232314}', "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 1614265330, "msg_p5jXN8AQM9LWM0D4loKWxJek"
    )["webhook-signature"] == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
