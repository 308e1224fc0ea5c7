"""The audit trail: every operator action is an event of family ``operator``.

Who did what, to which thing, recorded in the transaction that does it (an
action that fails leaves no record, and no action goes unrecorded). The
events are listed like any other (`events list --source operator`); their
body is JSON: ``{"by", "action", "subject", ...}``, never a secret (a
secret's reference kind at most). No source may be named ``operator``, so no
delivery can pass for one.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from .store.interface import Transaction
from .store.queries import Q

OPERATOR = "operator"  # the source and the family of audit events


def record(tx: Transaction, now: int, *, by: str, action: str, subject: str | int | None, **detail: Any) -> int:
    """Record one action (``source.add``, ``todo.redrive``…) by ``by`` (an OS user, an agent); its event id."""
    body = json.dumps({"by": by, "action": action, "subject": subject, **detail}, ensure_ascii=False).encode()
    row = tx.one(
        Q.insert_operator_event,
        {
            "source": OPERATOR,
            "type": action,
            "external_id": f"{action}:{now}:{secrets.token_hex(6)}",
            "headers": json.dumps({"by": by}, ensure_ascii=False),
            "body": body,
            "size": len(body),
            "now": now,
        },
    )
    assert row is not None
    return int(row["id"])
