"""The named statements of queries.sql, loaded once.

``Q.claim_by_id`` is the text under ``-- name: claim_by_id``; an unknown name
fails at attribute access, not at run time inside a transaction.
"""

from __future__ import annotations

from importlib import resources


def _parse(text: str) -> dict[str, str]:
    statements: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("-- name:"):
            if name is not None:
                statements[name] = "\n".join(lines).strip().rstrip(";")
            name = line.removeprefix("-- name:").strip()
            if name in statements:
                raise ValueError(f"queries.sql names {name!r} twice")
            lines = []
        elif name is not None:
            lines.append(line)
    if name is not None:
        statements[name] = "\n".join(lines).strip().rstrip(";")
    return statements


class _Queries:
    def __init__(self, statements: dict[str, str]) -> None:
        self.__dict__.update(statements)

    def __getattr__(self, name: str) -> str:
        raise AttributeError(f"queries.sql has no statement named {name!r}")


Q = _Queries(_parse(resources.files(__package__).joinpath("queries.sql").read_text("utf-8")))
