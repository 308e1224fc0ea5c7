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


class StoreUnusable(SwitchboardError):
    """The database file cannot be used by this version (too new, or foreign)."""

    code = "store_unusable"
