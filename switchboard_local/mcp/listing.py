"""What tools/list shows: lean input schemas, and output schemas that admit a refusal.

A client puts every tool's name, description and input schema before the
model on every turn, so what pydantic adds that says nothing (a ``title``
repeating each name, ``anyOf`` with null and ``default: null`` for every
optional argument, the bounds of a 64-bit integer, ``$defs`` used once) is
taken out here. Validation is pydantic's, on the full model: an argument
left out, or given as null, is still accepted where it was.

A refused call answers ``{"error": {"code", "message"}}`` as its structured
content. The TypeScript SDK's client checks structured content against the
tool's output schema even on an error, so each output schema admits that
shape beside the tool's own.
"""

from __future__ import annotations

import copy
from typing import Any

from ..core.todo_model import INT64_MAX, INT64_MIN

CODES = "not_found, conflict, invalid_argument, forbidden, busy, unavailable, store_unusable or internal_error"
REFUSAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": CODES}, "message": {"type": "string"}},
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}


def lean_input(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (an argument model's) as the model needs it: the same arguments, less noise."""
    schema = copy.deepcopy(schema)
    defs = schema.pop("$defs", {})
    schema.pop("title", None)
    for name, prop in list(schema.get("properties", {}).items()):
        schema["properties"][name] = _lean(prop, defs)
    return schema


def _lean(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        node = {**copy.deepcopy(defs[ref.removeprefix("#/$defs/")]), **{k: v for k, v in node.items() if k != "$ref"}}
    branches = node.get("anyOf")
    if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
        # An optional argument: omitting it says null; the other branch is what it takes.
        taken = next(b for b in branches if b != {"type": "null"})
        node = {**{k: v for k, v in node.items() if k != "anyOf"}, **{k: v for k, v in taken.items() if k not in node}}
    node = {k: v for k, v in node.items() if k != "title" and not (k == "default" and v is None)}
    if node.get("maximum") == INT64_MAX:
        del node["maximum"]
    if node.get("minimum") == INT64_MIN:
        del node["minimum"]
    if isinstance(node.get("items"), dict):
        node["items"] = _lean(node["items"], defs)
    if isinstance(node.get("properties"), dict):
        node["properties"] = {name: _lean(prop, defs) for name, prop in node["properties"].items()}
    return node


def admitting_refusal(schema: dict[str, Any]) -> dict[str, Any]:
    """An output schema that also admits a refusal's structured content."""
    answer = {k: v for k, v in schema.items() if k != "$defs"}
    admitting: dict[str, Any] = {"type": "object", "anyOf": [answer, REFUSAL_SCHEMA]}
    if "$defs" in schema:
        admitting["$defs"] = schema["$defs"]
    return admitting
