"""What a line the MCP transport could not read gets: a JSON-RPC answer, or a line on stderr.

The SDK's stdio transport drops a line it cannot read (not JSON, not a
JSON-RPC message, a lone surrogate, nesting or a number its parser refuses)
and logs it only at debug level, so the client waits for an answer that never
comes. channel.py hands each such line here, and JSON-RPC 2.0 says the rest:

- not JSON: -32700 Parse error, id null;
- JSON that is not a valid request: -32600 Invalid Request, with the request's
  id when one can be read, else null;
- a request whose params hold what the transport cannot read (a lone
  surrogate, an integer of more than 4300 digits): -32602 Invalid params, with
  its id. The request never reached a tool, so it is a protocol error, not a
  tool result; the SDK's client raises it and Claude Code shows the model the
  message, as for any failed call;
- nesting deeper than 200 levels (where the SDK's parser stops) or a line
  over MAX_LINE bytes: -32600, with the id read from the line's ends when it
  is there (as both the Python and the TypeScript SDK write it);
- a malformed notification or response: no answer (JSON-RPC answers neither),
  one line on stderr.

A message names what is wrong and where (a path of keys), never the values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from pydantic import ValidationError

from ..core.text import escape_controls
from .stdio import KEPT_ENDS, MAX_LINE, Overlong

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602

MAX_DEPTH = 200  # the SDK's JSON parser (jiter) refuses messages nested deeper
MAX_DIGITS = 4300  # ... and integers with more digits (Python's own default cap)

RequestId = str | int
Path = tuple[str | int, ...]

_SURROGATE = re.compile("[\ud800-\udfff]")
_ID = r'(-?(?:0|[1-9][0-9]{0,29})(?![0-9.eE])|"[^"\\\x00-\x1f]{0,200}")'
# The id as the first member (after "jsonrpc"), as the Python SDK writes it ...
_ID_AT_HEAD = re.compile(r'\s*\{\s*(?:"jsonrpc"\s*:\s*(?:"[^"\\]{0,20}"|[-+.\w]{1,20})\s*,\s*)?"id"\s*:\s*' + _ID)
# ... or as the last member of the outermost object, as the TypeScript SDK does.
_ID_AT_TAIL = re.compile(r'[{,]\s*"id"\s*:\s*' + _ID + r"\s*\}\s*\Z")
_BAD_ID = "Invalid Request: the id must be a string or an integer"


@dataclass(frozen=True)
class Answer:
    """A JSON-RPC error to send for a line."""

    id: RequestId | None
    code: int
    message: str

    @property
    def log(self) -> str:
        return f"answered a line it could not read ({_id_text(self.id)}) with {self.code} {self.message}"


@dataclass(frozen=True)
class Ignore:
    """No answer for a line (a notification, a response), only a line on stderr."""

    log: str


Verdict = Answer | Ignore


class _Huge:
    """An integer of more than MAX_DIGITS digits, kept as a marker, never converted."""


_HUGE = _Huge()


def judge(line: str | Overlong, detail: str) -> Verdict:
    """What a line the transport refused gets; ``detail`` is the transport's reason, for what is not named here."""
    if isinstance(line, Overlong):
        message = f"Invalid Request: the line is {line.size} bytes, over the limit of {MAX_LINE >> 20} MiB"
        return Answer(_id_at_ends(line.head, line.tail), INVALID_REQUEST, message)
    try:
        value = json.loads(line, parse_int=_integer, parse_float=_fraction)
    except RecursionError:  # far deeper than MAX_DEPTH; refused before the walk below
        too_deep = f"Invalid Request: the message nests deeper than {MAX_DEPTH} levels"
        return Answer(_id_at_ends(line[:KEPT_ENDS], line[-KEPT_ENDS:]), INVALID_REQUEST, too_deep)
    except json.JSONDecodeError as exc:
        return Answer(None, PARSE_ERROR, f"Parse error: the line is not JSON ({exc.msg} at character {exc.pos})")
    if not isinstance(value, dict):
        return Answer(None, INVALID_REQUEST, f"Invalid Request: the message is {_kind(value)}, not an object")
    return _judge_message(value, detail)


def judge_notification(line: str) -> Answer | None:
    """A line the transport read as a notification: answered if it has an ``id`` (of a type no id may have)."""
    try:
        value = json.loads(line, parse_int=_integer, parse_float=_fraction)
    except (ValueError, RecursionError):
        return None  # the transport read it; nothing to add
    if isinstance(value, dict) and "id" in value and _request_id(value) is None:
        return Answer(None, INVALID_REQUEST, _BAD_ID)
    return None


def transport_reason(exc: Exception) -> str:
    """Why the transport refused a line, in its own words (pydantic's), without the values."""
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        where = ".".join(str(step) for step in first["loc"][1:])  # after the union member's name
        return _shown(f"{where}: {first['msg']}" if where else first["msg"], 200)
    return f"the transport could not read it ({type(exc).__name__})"


def _judge_message(message: dict[str, object], detail: str) -> Verdict:
    response = "method" not in message and ("result" in message or "error" in message)
    code, reason = _reason(message, detail, response)
    method = message.get("method")
    if response:
        return Ignore(f"ignored a malformed response from the client: {reason}")
    if "id" not in message and isinstance(method, str):
        return Ignore(f"ignored a malformed notification '{_shown(method, 80)}': {reason}")
    request_id = _request_id(message)
    if "id" in message and request_id is None:
        # An id that cannot be echoed: a lone surrogate says so itself, a wrong type here.
        return Answer(None, INVALID_REQUEST, reason if isinstance(message["id"], str) else _BAD_ID)
    return Answer(request_id, code, reason)


def _reason(message: dict[str, object], detail: str, response: bool) -> tuple[int, str]:
    found = _first_problem(message)
    if found is not None:
        path, what = found
        if what is _TOO_DEEP:
            where = _where(path)
            return INVALID_REQUEST, f"Invalid Request: the message nests deeper than {MAX_DEPTH} levels ({where})"
        if path[0] == "params" and len(path) > 1:
            return INVALID_PARAMS, f"Invalid params: {_where(path[1:])} {what}"
        return INVALID_REQUEST, f"Invalid Request: {_where(path)} {what}"
    if message.get("jsonrpc") != "2.0":
        return INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"'
    if not response:
        if not isinstance(message.get("method"), str):
            return INVALID_REQUEST, 'Invalid Request: "method" must be a string'
        if message.get("params") is not None and not isinstance(message["params"], dict):
            return INVALID_PARAMS, 'Invalid params: "params" must be an object'
    return INVALID_REQUEST, f"Invalid Request: {detail}"


_TOO_DEEP = "nests too deep"


def _first_problem(message: dict[str, object]) -> tuple[Path, str] | None:
    """The first value (depth first) the transport cannot read: where it is, and what is wrong.

    Iterative, so nesting as deep as the JSON parser allows never recurses here.
    """
    path: list[str | int] = []  # the keys down to the container being walked
    walking: list[Iterator[tuple[str | int, object]]] = [iter(message.items())]
    while walking:
        step = next(walking[-1], None)
        if step is None:
            walking.pop()
            if path:
                path.pop()
            continue
        key, node = step
        for text in (key, node):
            if isinstance(text, str) and (lone := _SURROGATE.search(text)):
                return (*path, key), f"holds a lone surrogate (\\u{ord(lone.group()):04x}), which is not Unicode text"
        if node is _HUGE:
            return (*path, key), f"is an integer of more than {MAX_DIGITS} digits"
        children = iter(node.items()) if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else None
        if children is not None:
            if len(walking) >= MAX_DEPTH:
                return (*path, key), _TOO_DEEP
            walking.append(children)
            path.append(key)
    return None


def _request_id(message: dict[str, object]) -> RequestId | None:
    """The id as it can be echoed: an integer, or a string that is Unicode text."""
    found = message.get("id")
    if isinstance(found, int) and not isinstance(found, bool):
        return found
    if isinstance(found, str) and not _SURROGATE.search(found):
        return found
    return None


def _id_at_ends(head: str, tail: str) -> RequestId | None:
    """The id of a line too long or too deep to parse, if it starts or ends the outermost object."""
    found = _ID_AT_HEAD.match(head) or _ID_AT_TAIL.search(tail)
    if found is None:
        return None
    value = found.group(1)
    return value[1:-1] if value.startswith('"') else int(value)


def _integer(digits: str) -> int | _Huge:
    return _HUGE if len(digits.lstrip("-")) > MAX_DIGITS else int(digits)


def _fraction(text: str) -> float | _Huge:
    whole = re.match(r"-?(\d*)", text)
    return _HUGE if whole is not None and len(whole.group(1)) > MAX_DIGITS else float(text)


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "an array (a batch, which MCP does not use)"
    if isinstance(value, str):
        return "a string"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return "a number"


def _where(path: Path) -> str:
    """A path of keys as it may be shown: ``arguments.payload[2].name``, at most six steps."""
    text = ""
    for step in path[:6]:
        text += f"[{step}]" if isinstance(step, int) else ("." if text else "") + (_shown(step, 40) or '""')
    return text + ("…" if len(path) > 6 else "")


def _shown(text: str, limit: int) -> str:
    """Text from the client as it may be shown: lone surrogates and controls escaped, capped."""
    safe = escape_controls(text.encode("utf-8", "backslashreplace").decode("utf-8"))
    return safe if len(safe) <= limit else safe[: limit - 1] + "…"


def _id_text(request_id: RequestId | None) -> str:
    if request_id is None:
        return "id null"
    if isinstance(request_id, str):
        return f"id '{_shown(request_id, 40)}'"
    return f"id {request_id}"
