"""A PostgreSQL URL, taken apart here before any driver sees it, and shown without its password.

libpq quotes what it cannot parse: a bad percent-escape, an unclosed ``[``
or an ``@`` left unencoded in a password came back in its error text as the
password, or its tail read as a host name. So a URL is read here, strictly,
into libpq's keywords (``parse``), and the driver is handed those, never the
URL; a URL that does not read cleanly is refused with an error that says
what is wrong and where, and never quotes a part of the URL. ``redacted``
is how a URL is shown: its password (and any secret parameter) as ``***``;
one that does not read cleanly shows nothing before its last ``@``.

The grammar is libpq's (``postgresql://[user[:password]@][host[:port][,…]][/dbname][?key=value&…]``),
with what libpq leaves ambiguous refused: an ``@``, a ``#`` or a second
``/`` anywhere a password's unencoded tail would land.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, unquote_to_bytes

from ..errors import InvalidArgument

SCHEMES = ("postgresql://", "postgres://")
# Query parameters whose value is a secret, shown as *** like the password.
SECRET_PARAMS = frozenset({"password", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key"})
# libpq's connection keywords (psycopg's pq.Conninfo.get_defaults() lists them): after a secret
# parameter, only these are shown (anything else may be the secret's tail, after an '&').
KEYWORDS = frozenset({
    "application_name", "channel_binding", "client_encoding", "connect_timeout", "dbname",
    "fallback_application_name", "gssdelegation", "gssencmode", "gsslib", "host", "hostaddr", "keepalives",
    "keepalives_count", "keepalives_idle", "keepalives_interval", "krbsrvname", "load_balance_hosts",
    "max_protocol_version", "min_protocol_version", "options", "passfile", "port", "replication", "require_auth",
    "requirepeer", "service", "ssl_max_protocol_version", "ssl_min_protocol_version", "sslcert", "sslcertmode",
    "sslcompression", "sslcrl", "sslcrldir", "sslkey", "sslkeylogfile", "sslmode", "sslnegotiation", "sslrootcert",
    "sslsni", "target_session_attrs", "tcp_user_timeout", "user",
})  # fmt: skip
HINT = "percent-encode '@', '/', '?', '#' and '%' in a user name or password (%40, %2F, %3F, %23, %25)"

_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _split(url: str) -> tuple[str, str, str, str, str]:
    """(scheme, authority, path, query, rest): the URL's raw pieces, split where libpq splits them."""
    lowered = url[:13].lower()
    scheme = next((s for s in SCHEMES if lowered.startswith(s)), None)
    if scheme is None:
        raise InvalidArgument("a PostgreSQL database is named by a postgresql:// URL")
    rest = url[len(scheme) :]
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    path, _, query = tail.partition("?")
    return scheme, authority, path, query, tail


def _decoded(raw: str, what: str) -> str:
    if _BAD_ESCAPE.search(raw):
        raise InvalidArgument(f"the URL's {what} holds a '%' that is not followed by two hex digits; {HINT}")
    try:
        text = unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(f"the URL's {what} is not UTF-8 once its %-escapes are decoded") from None
    if "\0" in text:
        raise InvalidArgument(f"the URL's {what} holds a NUL (%00), which PostgreSQL cannot take")
    return text


def _hosts(hostspec: str) -> tuple[list[str], list[str]]:
    """The hosts and ports of ``host[:port],…`` (an IPv6 address in brackets)."""
    hosts: list[str] = []
    ports: list[str] = []
    for number, item in enumerate(hostspec.split(",") if hostspec else [], start=1):
        which = "host" if "," not in hostspec else f"host {number}"
        if item.startswith("["):
            close = item.find("]")
            if close < 0:
                raise InvalidArgument(f"the URL's {which} opens an IPv6 address with '[' and never closes it with ']'")
            host, after = item[1:close], item[close + 1 :]
            if after and not after.startswith(":"):
                raise InvalidArgument(f"the URL's {which} has something other than ':PORT' after its ']'")
            port = after[1:] if after else ""
        else:
            if "[" in item or "]" in item:
                raise InvalidArgument(f"the URL's {which} holds '[' or ']' outside an IPv6 address in brackets")
            host, _, port = item.partition(":")
            host = _decoded(host, which)
        if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise InvalidArgument(f"the URL's port (of its {which}) is not a number from 1 to 65535; {HINT}")
        hosts.append(host)
        ports.append(port)
    return hosts, ports


def parse(url: str, known: frozenset[str] | None = None) -> dict[str, str]:
    """libpq's connection keywords for ``url``; InvalidArgument, naming what is wrong
    and never quoting the URL, when it does not read cleanly. ``known``: the keywords
    libpq takes (a query parameter outside them is refused)."""
    return read(url, known)[0]


def read(url: str, known: frozenset[str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """``parse``'s keywords, and those of them the URL's query gave (their values are not shown
    in a driver's error: after a stray '&', one may be a password's tail)."""
    _, authority, path, query, tail = _split(url)
    if "#" in url:
        raise InvalidArgument(f"the URL holds a '#', which a PostgreSQL URL cannot; {HINT}")
    if "@" in tail:
        raise InvalidArgument(f"the URL holds an '@' after its host; {HINT}")
    if authority.count("@") > 1:
        raise InvalidArgument(f"the URL's user part holds an '@'; {HINT}")
    userinfo, at, hostspec = authority.rpartition("@")
    params: dict[str, str] = {}
    if at:
        user, colon, password = userinfo.partition(":")
        if user:
            params["user"] = _decoded(user, "user name")
        if colon:
            params["password"] = _decoded(password, "password")
    hosts, ports = _hosts(hostspec)
    if any(hosts):
        params["host"] = ",".join(hosts)
    if any(ports):
        params["port"] = ",".join(ports)
    if path:
        database = path[1:]
        if "/" in database:
            raise InvalidArgument(f"the URL's path holds more than one '/' (it is /DATABASE); {HINT}")
        if database:
            params["dbname"] = _decoded(database, "database name")
    given: dict[str, str] = {}
    for number, item in enumerate(query.split("&") if query else [], start=1):
        key, equals, value = item.partition("=")
        # Names in a query are not repeated in a message: one may be a password's tail after an '&'.
        if not equals:
            raise InvalidArgument(f"parameter {number} of the URL's query has no '=' (each is key=value)")
        name = _decoded(key, f"query parameter {number}'s name")
        if known is not None and name not in known:
            raise InvalidArgument(
                f"parameter {number} of the URL's query is not a connection parameter PostgreSQL knows "
                "(names in a URL are not shown: one may hold part of a password)"
            )
        params[name] = given[name] = _decoded(value, f"{name} parameter" if name in (known or ()) else "query")
    return params, given


def redacted(url: str) -> str:
    """``url`` as it may be shown: its password and secret parameters as ``***``. A URL that
    does not read cleanly shows only its scheme and the host after its last ``@``."""
    try:
        scheme, authority, path, query, _ = _split(url)
        parse(url)
    except InvalidArgument:
        return _malformed(url)
    userinfo, at, hostspec = authority.rpartition("@")
    if ":" in userinfo:
        userinfo = userinfo.partition(":")[0] + ":***"
    query = _shown_query(query)
    return f"{scheme}{userinfo}{at}{hostspec}{path}{'?' if query else ''}{query}"


def _shown_query(query: str) -> str:
    """The query with each secret parameter's value as ``***``; after the first secret, a
    parameter is shown only when it is libpq's (``key=value`` with a key in KEYWORDS), since
    a password's tail after an '&' reads as more parameters."""
    shown: list[str] = []
    hiding = False
    for item in query.split("&") if query else []:
        name, equals, _ = item.partition("=")
        key = unquote(name).lower()
        if key in SECRET_PARAMS:
            shown.append(f"{name}=***")
            hiding = True
        elif hiding and not (equals and key in KEYWORDS):
            if shown[-1] != "***":
                shown.append("***")
        else:
            shown.append(item)
    return "&".join(shown)


def _malformed(url: str) -> str:
    scheme = url.split("://", 1)[0] + "://"
    before, at, after = url[len(scheme) :].rpartition("@")
    # After the last '@' is the host, unless a query began before it (then a password= value may go on there).
    if not at or "?" in before:
        return f"{scheme}(a malformed URL)"
    host = re.split(r"[/?#]", after, maxsplit=1)[0]
    return f"{scheme}***@{host} (a malformed URL)"
