"""How the pages show values: counts, sizes, ages, badges, the sparkline, a body's views.

Pure functions of the read API's dicts (the field names of the CLI's --json),
used by the templates as Jinja globals. ``now_ms`` is the time of the page's
render: the page's script keeps the relative times current after that.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote as _quote

LARGE_JSON_CHARS = 8000  # a payload longer than this starts collapsed
LARGE_JSON_LINES = 120
HEX_LIMIT = 64 * 1024  # bytes shown in the hex view
SPARK_WIDTH, SPARK_HEIGHT, SPARK_PAD = 180, 30, 1.5
OUTCOME = {"completed": "done", "failed": "failed", "lease_expired": "warn", "released": "pending",
           "released_by_operator": "pending", "cancelled": ""}  # fmt: skip
VIEW_LABELS = {"pretty": "JSON", "text": "Text", "hex": "Hex", "base64": "Base64"}


def ms_of(iso: str) -> int:
    """An RFC 3339 time as the API gives it (``…Z``), in ms since the epoch."""
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def span(seconds: float) -> str:
    s = abs(seconds)
    if s < 1:
        return "now"
    if s < 60:
        return f"{int(s)}s"
    if s < 3600:
        return f"{int(s // 60)}m"
    if s < 86400:
        return f"{int(s // 3600)}h {int(s % 3600 // 60)}m"
    return f"{int(s // 86400)}d {int(s % 86400 // 3600)}h"


def ago(iso: str, now_ms: int) -> str:
    seconds = (now_ms - ms_of(iso)) / 1000
    if abs(seconds) < 1:
        return "just now"
    return span(seconds) + (" ago" if seconds >= 0 else " from now")


def utc(iso: str) -> str:
    """A time's tooltip before the script puts it in the reader's own zone."""
    return datetime.fromtimestamp(ms_of(iso) / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def count(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def size(n: int | None) -> str:
    if n is None:
        return "—"
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / 1024 / 1024:.1f} MB"


def plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def state_badge(todo: dict[str, Any], now_ms: int) -> tuple[str, str, str | None]:
    """(text, class, tooltip) of a todo's state: a pending todo not claimable yet is blocked (waiting
    for todos not done), delayed or retrying."""
    if todo["state"] == "failed":
        return "dead", "failed", None
    if todo.get("blocked"):
        n = todo.get("blocked_by", 0)
        return "blocked", "warn", f"waits for {n} {plural(n, 'todo', 'todos')} not done"
    visible = todo.get("visible_at")
    if todo["state"] == "pending" and visible and ms_of(visible) > now_ms:
        return ("retrying" if todo.get("attempt") else "delayed"), "warn", "claimable " + ago(visible, now_ms)
    return todo["state"], todo["state"], None


def verified_badge(event: dict[str, Any]) -> tuple[str, str]:
    """(text, class) of an event's verification."""
    mode = event.get("trust_mode")
    if mode == "queue":
        return "trusted", ""  # read from a broker: trusted by the connection
    if event.get("verified"):
        return "verified", "ok"
    if mode in ("none", "trusted"):
        return mode, ""
    return "unverified", "warn"


def outcome_badges(deliveries: dict[str, int]) -> list[tuple[str, str]]:
    """(text, class) per delivery outcome: only a non-zero failure is an alarm; a zero is quiet."""
    out = []
    for name, n in deliveries.items():
        kind = "zero" if not n else "ok" if name == "stored" else "" if name == "duplicate" else "bad"
        out.append((f"{name} {count(n)}", kind))
    return out


def attempt_badge(outcome: str | None) -> tuple[str, str]:
    if not outcome:
        return "in progress", "claimed"
    return outcome.replace("_", " "), OUTCOME.get(outcome, "")


def pretty(value: Any) -> str | None:
    """A payload or a result as shown: text as it is, anything else as indented JSON; None when absent."""
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


def quote(value: str) -> str:
    """A name as one component of a URL (a path segment or a query value)."""
    return _quote(value, safe="")


def json_text(value: Any) -> str:
    """A value as JSON text for an attribute (autoescaped there like any text)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def is_large(text: str) -> bool:
    return len(text) > LARGE_JSON_CHARS or text.count("\n") + 1 > LARGE_JSON_LINES


def lines(text: str) -> int:
    return text.count("\n") + 1


def sparkline(created: list[int], finished: list[int]) -> dict[str, Any]:
    """The last hour as SVG paths: created per minute as bars, finished per minute as a line."""
    w, h, pad = SPARK_WIDTH, SPARK_HEIGHT, SPARK_PAD
    n = max(len(created), len(finished), 2)
    top = max([1, *created, *finished])
    step = w / n

    def y(v: int) -> str:
        return f"{h - pad - (v / top) * (h - 2 * pad):.1f}"

    bars = "".join(
        f"M{i * step + 0.5:.1f} {h - pad}V{y(v)}h{max(1, step - 1):.1f}V{h - pad}Z" for i, v in enumerate(created) if v
    )
    line = "".join(f"{'L' if i else 'M'}{i * step + step / 2:.1f} {y(v)}" for i, v in enumerate(finished))
    made, done = sum(created), sum(finished)
    return {
        "viewbox": f"0 0 {w} {h}",
        "base_y": h - pad + 0.5,
        "width": w,
        "bars": bars,
        "line": line,
        "made": made,
        "done": done,
        "label": f"Last hour: {made} created, {done} finished (per minute)",
    }


def hexdump(data: bytes) -> str:
    """The first HEX_LIMIT bytes as offset, hex and printable text, 16 a line."""
    out = []
    shown = data[:HEX_LIMIT]
    for off in range(0, len(shown), 16):
        chunk = shown[off : off + 16]
        hexes = ""
        for i in range(16):
            if i < len(chunk):
                hexes += f"{chunk[i]:02x}" + ("  " if i == 7 else " ")
            else:
                hexes += "    " if i == 7 else "   "
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        out.append(f"{off:08x}  {hexes} {text}")
    if len(data) > len(shown):
        out.append(f"… {len(data) - len(shown)} more bytes")
    return "\n".join(out)


def body_views(event: dict[str, Any]) -> dict[str, str]:
    """The views of an event's body the page offers, in order: pretty JSON, text, hex, base64."""
    raw = base64.b64decode(event["body_base64"])
    views: dict[str, str] = {}
    if event.get("body_view") == "json":
        views["pretty"] = json.dumps(event["body_json"], indent=2, ensure_ascii=False)
    if event.get("body_text") is not None:
        views["text"] = event["body_text"]
    views["hex"] = hexdump(raw)
    views["base64"] = event["body_base64"]
    return views


GLOBALS = {
    "quote": quote,
    "ago": ago,
    "utc": utc,
    "count": count,
    "size": size,
    "span": span,
    "plural": plural,
    "state_badge": state_badge,
    "verified_badge": verified_badge,
    "outcome_badges": outcome_badges,
    "attempt_badge": attempt_badge,
    "pretty": pretty,
    "is_large": is_large,
    "lines": lines,
    "sparkline_of": sparkline,
    "json_text": json_text,
    "utf8_size": utf8_size,
    "body_views": body_views,
    "view_labels": VIEW_LABELS,
}
