"""Agents SDK input items (the Responses format) to ``Msg`` and back.

A user or system item is one message; consecutive assistant-side items (reasoning, an
assistant message, function calls) are one assistant message; consecutive
``function_call_output`` items are one message of tool results.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from typing import Any

from ..._exceptions import MessageFormatError
from ...context import SummaryLayer, is_summary
from ...message import (
    ContentBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)

__all__ = ["AgentsCodec"]

Item = Any  # TResponseInputItem: a dict (or a model of one) in the Responses input format
_ASSISTANT_SIDE = ("reasoning", "function_call")


def _as_dict(item: Item) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    if dump is None:
        raise MessageFormatError(f"expected a Responses input item, got {type(item).__name__}")
    result: dict[str, Any] = dump(exclude_unset=True)
    return result


def _kind(d: dict[str, Any]) -> str:
    kind = d.get("type")
    if kind == "message" or (kind is None and "role" in d):
        return "assistant" if d.get("role") == "assistant" else "message"
    return str(kind)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") or p.get("refusal") or "" for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if p)
    return ""


class AgentsCodec:
    """Responses input items as messages; items it did not make are kept as they are.

    The summary layer is a user message (one ``input_text`` part per part of the layer,
    so an appended part follows the parts the provider cached); Responses items have no
    field of ours to carry the layer's structure, so the codec remembers the layers it
    wrote, by content, and reads them back as layers.
    """

    def __init__(self) -> None:
        self._layers: dict[str, SummaryLayer] = {}

    def key(self, item: Item) -> Hashable:
        d = _as_dict(item)
        body = d.get("content", d.get("output", d.get("arguments")))
        return (d.get("type"), d.get("role"), d.get("call_id"), json.dumps(body, default=str))

    def to_msgs(self, items: Sequence[Item]) -> list[tuple[Msg, list[Item]]]:
        out: list[tuple[Msg, list[Item]]] = []
        group: list[Item] = []
        group_kind = ""
        for item in items:
            kind = _kind(_as_dict(item))
            side = "assistant" if kind in ("assistant", *_ASSISTANT_SIDE) else kind
            if group and (side != group_kind or side == "message"):
                out.append((self._msg(group), group))
                group = []
            group.append(item)
            group_kind = side
        if group:
            out.append((self._msg(group), group))
        return out

    def _msg(self, items: list[Item]) -> Msg:
        dicts = [_as_dict(i) for i in items]
        kind = _kind(dicts[0])
        if kind == "message":
            d = dicts[0]
            role = d.get("role")
            if role in ("system", "developer"):
                return Msg("system", _text(d.get("content")), "system")
            layer = self._layers.get(json.dumps(d.get("content"), default=str))
            if layer is not None:
                return layer.msg
            return Msg("user", _text(d.get("content")), "user")
        if kind == "function_call_output":
            results = [
                ToolResultBlock(id=str(d.get("call_id")), name="", output=_text(d.get("output")))
                for d in dicts
            ]
            return Msg("tool", list[ContentBlock](results), "user")
        if kind in ("assistant", *_ASSISTANT_SIDE):
            blocks: list[ContentBlock] = []
            for d in dicts:
                k = _kind(d)
                if k == "reasoning":
                    summary = _text(d.get("summary"))
                    if summary:
                        blocks.append(ThinkingBlock(thinking=summary))
                elif k == "assistant":
                    text = _text(d.get("content"))
                    if text:
                        blocks.append(TextBlock(text=text))
                else:
                    blocks.append(_call(d))
            return Msg("assistant", blocks, "assistant")
        raise MessageFormatError(
            f"cannot fold a Responses item of type {kind!r}: expected messages, function "
            "calls, their outputs and reasoning"
        )

    def from_msg(self, msg: Msg) -> list[Item]:
        if msg.role == "assistant":
            items: list[Item] = []
            if msg.text:
                items.append({"role": "assistant", "content": msg.text})
            for call in msg.tool_calls:
                arguments = call.raw_input or json.dumps(call.input)
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": arguments,
                    }
                )
            return items
        if msg.role == "system":
            return [{"role": "system", "content": msg.text}]
        if is_summary(msg):
            layer = SummaryLayer.from_msg(msg)
            content: str | list[dict[str, str]] = (
                layer.parts[0]
                if len(layer.parts) == 1
                else [{"type": "input_text", "text": p} for p in layer.parts]
            )
            self._layers[json.dumps(content)] = layer
            return [{"role": "user", "content": content}]
        items = [
            {"type": "function_call_output", "call_id": r.id, "output": r.text()}
            for r in msg.tool_results
        ]
        if msg.text:
            items.append({"role": "user", "content": msg.text})
        return items


def _call(d: dict[str, Any]) -> ToolCallBlock:
    raw = d.get("arguments") or "{}"
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return ToolCallBlock(
            id=str(d.get("call_id")),
            name=str(d.get("name")),
            raw_input=raw,
            input_error="arguments are not a JSON object",
        )
    return ToolCallBlock(
        id=str(d.get("call_id")), name=str(d.get("name")), input=value, raw_input=raw
    )
