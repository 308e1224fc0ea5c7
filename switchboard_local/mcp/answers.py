"""What a tool call answers: its structured content once, and a text beside it.

MCP asks a tool with an output schema to send its JSON as text too, for
clients that read only text. Claude Code shows the model the structured
content when there is one, so a second copy of a large answer (a batch of
claimed payloads) is only bytes on the wire and memory on both ends: the text
repeats the JSON while it is small (TEXT_COPY_LIMIT), and past that says in
one line what the answer holds and that it is in structuredContent only.

A refusal is text that starts with its code (what Claude Code shows the model
of an error) and the same code and message as structured content.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic_core
from mcp import types
from pydantic import BaseModel

TEXT_COPY_LIMIT = 64 * 1024  # bytes of JSON an answer's text repeats whole
MAX_SUMMARY_IDS = 100
MAX_SUMMARY_VALUE = 80  # characters of a short scalar a summary quotes


def answer(tool: str, result: BaseModel) -> types.CallToolResult:
    """A tool's answer: ``result`` as structured content, with its JSON as text while that is small."""
    structured = result.model_dump(mode="json")
    json_bytes = pydantic_core.to_json(structured)
    text = json_bytes.decode() if len(json_bytes) <= TEXT_COPY_LIMIT else summary(tool, structured, len(json_bytes))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=structured)


def refusal(code: str, message: str) -> types.CallToolResult:
    """A refused call: ``code: message`` as text, and ``{"error": {code, message}}`` as structured content."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")],
        structured_content={"error": {"code": code, "message": message}},
        is_error=True,
    )


def summary(tool: str, structured: dict[str, Any], size: int) -> str:
    """One line on a large answer: its size, where it is, and its lists, ids and short values."""
    facts = []
    for key, value in structured.items():
        if isinstance(value, list):
            ids = [str(item["id"]) for item in value if isinstance(item, dict) and "id" in item]
            more = ", …" if len(ids) > MAX_SUMMARY_IDS else ""
            facts.append(f"{key}: {len(value)}" + (f" (ids {', '.join(ids[:MAX_SUMMARY_IDS])}{more})" if ids else ""))
        elif isinstance(value, dict):
            if "id" in value:
                facts.append(f"{key}: id {value['id']}")
        elif value is None or isinstance(value, bool | int | float):
            facts.append(f"{key}: {json.dumps(value)}")
        elif isinstance(value, str) and len(value) <= MAX_SUMMARY_VALUE and "\n" not in value:
            facts.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    return (
        f"{tool} answered {size:,} bytes of JSON, sent once, in structuredContent (too large to repeat here); "
        + "; ".join(facts)
    )
