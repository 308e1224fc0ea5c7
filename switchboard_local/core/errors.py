"""The core's one exception family.

Each edge maps these once: the CLI to exit codes, HTTP to statuses, MCP to
tool errors whose text starts with ``code``.
"""

from __future__ import annotations


class SwitchboardError(Exception):
    """Base of every error the core raises on purpose."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class NotFound(SwitchboardError):
    """The id names nothing (or nothing the caller may see)."""

    code = "not_found"


class Conflict(SwitchboardError):
    """The thing exists but is not in a state that allows the request."""

    code = "conflict"


class InvalidArgument(SwitchboardError):
    """An argument is malformed or out of range; nothing was written."""

    code = "invalid_argument"


class Forbidden(SwitchboardError):
    """The caller may not do this (an assignee or an agent's scope says no)."""

    code = "forbidden"


class StoreFault(SwitchboardError):
    """The database, not the request, is the problem: nothing was written.

    Edges treat every subclass alike: an HTTP sender gets 503 and retries, a
    broker consumer backs off and acks nothing, the CLI exits 3 or 4.
    """

    code = "store_fault"


class StoreUnusable(StoreFault):
    """The database file cannot be used: too new, foreign, corrupt, or not a file."""

    code = "store_unusable"


class Unavailable(StoreFault):
    """The database cannot be read or written right now: disk full, read-only,
    an I/O error, a folder that cannot be created. Nothing was written."""

    code = "unavailable"


class Busy(StoreFault):
    """Another process held the database's write lock longer than the busy
    timeout. Nothing was written; trying again later may succeed."""

    code = "busy"
