"""Text from outside, made safe to store, log and print.

A control character in a name, a title or a log line can forge lines, move a
terminal's cursor, recolour it or reorder what it shows. "Control" here means
the C0 and C1 control characters and DEL (Unicode category Cc), the line and
paragraph separators (U+2028, U+2029: a line break to log viewers and to
str.splitlines) and the bidirectional embeddings, overrides and isolates
(which reorder what a terminal shows, as in "trojan source"). The bidi marks
(U+200E, U+200F, U+061C) are not: right-to-left titles use them, and they
only set the direction of the neutral characters beside them.

A number in text from outside (a path, a header, a setting, an argument) is
read by ``digits`` or ``decimal``: ASCII digits alone. Python's own readers
take more: ``str.isdigit()`` passes '²', which ``int()`` then refuses (a
500), and ``int()`` and ``float()`` read other scripts' digits ('١' is 1),
spaces, underscores, ``nan`` and ``inf``.
"""

from __future__ import annotations

import logging
import re

# Beyond C0 (U+0000-001F): DEL and C1; the line and paragraph separators; bidi
# embeddings and overrides (U+202A-202E) and isolates (U+2066-2069).
NON_C0_CONTROLS = "\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROLS = re.compile(f"[\x00-\x1f{NON_C0_CONTROLS}]")
# What a multi-line text for people may keep: the newline itself.
_CONTROLS_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f{NON_C0_CONTROLS}]")


# At most 4,000 digits: int() refuses 4,300 and more (a ValueError, not a number).
_DIGITS = re.compile(r"[0-9]{1,4000}")
# At most 300 characters: float() of more digits may be inf.
_DECIMAL = re.compile(r"(?=.{1,300}\Z)([0-9]+(\.[0-9]*)?|\.[0-9]+)", re.DOTALL)


def digits(text: str) -> int | None:
    """``text`` as a whole number when it is ASCII digits (0-9) and nothing else; else None."""
    return int(text) if _DIGITS.fullmatch(text) else None


def decimal(text: str) -> float | None:
    """``text`` as a number when it is ASCII digits with one decimal point at most (``2``, ``2.5``, ``.5``)."""
    return float(text) if _DECIMAL.fullmatch(text) else None


def has_controls(text: str) -> bool:
    return _CONTROLS.search(text) is not None


def first_control(text: str) -> str | None:
    """The first control character, escaped for an error message (e.g. ``\\x1b``)."""
    found = _CONTROLS.search(text)
    return None if found is None else _escape(found)


def replace_controls(text: str, by: str = "\ufffd") -> str:
    """Each control character replaced (U+FFFD by default): for text derived from a delivery."""
    return _CONTROLS.sub(by, text)


def escape_controls(text: str, *, keep_newlines: bool = False) -> str:
    """Each control character written as a visible escape (``\\x1b``, ``\\u202e``): for logs and terminals.

    A backslash is left as it is: the escapes are for a person to read, not to be decoded.
    """
    pattern = _CONTROLS_BUT_NEWLINE if keep_newlines else _CONTROLS
    return pattern.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class SafeFormatter(logging.Formatter):
    """A log formatter for values from outside: one record, one line.

    Control characters in the message (a source name from a URL, a header)
    are escaped, so a request cannot forge a log line or drive the terminal.
    A traceback keeps its own newlines; every other control in it is escaped.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        # The traceback (exc_text) may have been formatted and cached by another handler.
        return escape_controls(super().format(record), keep_newlines=True)
