"""A message as OpenAI Chat Completions messages, from its blocks, for counting.

The fallback for messages the library's converter (``to_openai_messages``) refuses, e.g.
an image in an assistant message: the request would fail, but counting must not.
Images stay as their ``DataBlock`` in a private ``{"type": "data"}`` part, because the
wire form (a data URL) loses ``width``/``height``; the counter also reads ``image_url``
parts, from the data URL's header. Thinking is left out (the counter adds its text).
"""

from __future__ import annotations

import json
from typing import Any

from ..message import (
    DataBlock,
    HintBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

__all__ = ["render_openai"]

OpenAIMessage = dict[str, Any]


def _arguments(call: ToolCallBlock) -> str:
    # raw_input is what the provider sent and what goes back; input is only re-serialized
    # when there is no raw text (calls built by us, or from providers sending objects).
    if call.raw_input is not None:
        return call.raw_input
    return json.dumps(call.input, ensure_ascii=False, separators=(",", ":"))


def _data_part(block: DataBlock) -> dict[str, Any]:
    return {"type": "data", "block": block}


def _parts(blocks: list[Any]) -> str | list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, HintBlock):
            parts.append({"type": "text", "text": block.hint})
        elif isinstance(block, DataBlock):
            parts.append(_data_part(block))
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def render_openai(msg: Msg) -> list[OpenAIMessage]:
    """The Chat Completions messages ``msg`` becomes (tool results are ``tool`` messages)."""
    if isinstance(msg.content, str):
        return [{"role": msg.role, "content": msg.content}]
    out: list[OpenAIMessage] = []
    rest: list[Any] = []
    calls: list[dict[str, Any]] = []
    for block in msg.content:
        if isinstance(block, ToolResultBlock):
            output = block.output if isinstance(block.output, str) else _parts(block.output)
            out.append({"role": "tool", "tool_call_id": block.id, "content": output})
        elif isinstance(block, ToolCallBlock):
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": _arguments(block)},
                }
            )
        elif not isinstance(block, ThinkingBlock):
            rest.append(block)
    if rest or calls or not out:
        message: OpenAIMessage = {"role": msg.role, "content": _parts(rest) if rest else None}
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    return out
