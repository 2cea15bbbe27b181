"""Reading the loosely typed fields other agents record: tool-call arguments, text parts,
numbers, and tool results named after their calls."""

from __future__ import annotations

import json
from typing import Any

from ...message import Msg, ToolCallBlock, ToolResultBlock

__all__ = ["as_dict", "as_int", "call", "name_results", "text_of"]


def _parse_args(raw: Any) -> tuple[dict[str, Any], str | None, str | None]:
    """``(input, raw_input, input_error)`` of recorded tool-call arguments."""
    if isinstance(raw, dict):
        return raw, None, None
    if not isinstance(raw, str):
        return {}, None, f"arguments are {type(raw).__name__}, not a JSON object"
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return {}, raw, "arguments are not valid JSON"
    except RecursionError:
        return {}, raw, "arguments are nested too deeply to parse"
    if not isinstance(value, dict):
        return {}, raw, "arguments are not a JSON object"
    return value, raw, None


def call(call_id: str, name: str, raw: Any) -> ToolCallBlock:
    """A tool call with recorded arguments (an object, JSON text or anything else)."""
    value, raw_input, error = _parse_args(raw)
    return ToolCallBlock(id=call_id, name=name, input=value, raw_input=raw_input, input_error=error)


def text_of(content: Any) -> str:
    """Text of a string or a list of text parts (``text``, ``input_text``, ``output_text``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def name_results(msgs: list[Msg]) -> list[Msg]:
    """Tool results named after their calls (formats that name only the call)."""
    names: dict[str, str] = {}
    out: list[Msg] = []
    for msg in msgs:
        for tool_call in msg.tool_calls:
            names[tool_call.id] = tool_call.name
        if any(isinstance(b, ToolResultBlock) and not b.name for b in msg.blocks()):
            blocks = [
                b.model_copy(update={"name": names.get(b.id, "")})
                if isinstance(b, ToolResultBlock) and not b.name
                else b
                for b in msg.blocks()
            ]
            msg = msg.model_copy(update={"content": blocks})
        out.append(msg)
    return out
