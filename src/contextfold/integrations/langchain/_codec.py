"""LangChain messages to ``Msg`` and back: one message each way, ids kept stable."""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Sequence
from typing import Any, cast

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_messages,
)
from langchain_core.utils.function_calling import convert_to_openai_tool

from ...context import SummaryLayer, is_summary
from ...message import (
    ContentBlock,
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    Usage,
    from_openai_message,
    to_openai_messages,
)

__all__ = ["LangChainCodec", "tool_specs"]

_KEY = "contextfold"  # additional_kwargs key: the summary layer's JSON


class LangChainCodec:
    """One LangChain message is one ``Msg``; the summary is a ``HumanMessage`` marked in
    ``additional_kwargs``, so a restored state (a checkpointer) is read as a summary."""

    def key(self, item: AnyMessage) -> Hashable:
        if item.id is None:
            item.id = str(uuid.uuid4())  # the add_messages reducer wants ids as well
        return item.id

    def to_msgs(self, items: Sequence[AnyMessage]) -> list[tuple[Msg, list[AnyMessage]]]:
        return [(to_msg(item), [item]) for item in items]

    def from_msg(self, msg: Msg) -> list[AnyMessage]:
        out = cast(list[AnyMessage], convert_to_messages(to_openai_messages([msg])))
        for item in out:
            item.id = str(uuid.uuid4())
        if is_summary(msg):
            out[0].additional_kwargs[_KEY] = SummaryLayer.from_msg(msg).to_json()
        return out


def to_msg(item: BaseMessage) -> Msg:
    """One LangChain message as a ``Msg`` (tool messages as a user message of one result)."""
    if isinstance(item, ToolMessage):
        block = ToolResultBlock(
            id=item.tool_call_id,
            name=item.name or "",
            output=item.content if isinstance(item.content, str) else item.text,
            is_error=item.status == "error",
        )
        return Msg("tool", [block], "user")
    if isinstance(item, AIMessage):
        blocks: list[ContentBlock] = [TextBlock(text=item.text)] if item.text else []
        blocks.extend(
            ToolCallBlock(id=call["id"] or "", name=call["name"], input=call["args"])
            for call in item.tool_calls
        )
        msg = Msg(item.name or "assistant", blocks, "assistant")
        if item.usage_metadata:
            msg.usage = _usage(item.usage_metadata)
        return msg
    if isinstance(item, SystemMessage):
        return Msg("system", item.text, "system")
    if isinstance(item, HumanMessage):
        saved = item.additional_kwargs.get(_KEY)
        if isinstance(saved, dict):
            # Written by an earlier version: {"metadata": the summary message's metadata}.
            legacy = saved.get("metadata")
            return SummaryLayer.restore(
                legacy if isinstance(legacy, dict) else saved, _summary_parts(item)
            ).msg
        if isinstance(item.content, str):
            return Msg(item.name or "user", item.content, "user")
        return from_openai_message({"role": "user", "content": item.content})
    raise TypeError(f"cannot fold a {type(item).__name__}: expected a LangChain chat message")


def _summary_parts(item: HumanMessage) -> list[str]:
    """The summary's text parts as they were written: one per part, since ``item.text``
    joins them without a separator and the next appended part would then follow one
    merged block, not the blocks the provider cached."""
    if isinstance(item.content, str):
        return [item.content]
    parts: list[str] = []
    for part in item.content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
    return parts or [item.text]


def _usage(meta: Any) -> Usage:
    details = meta.get("input_token_details") or {}
    return Usage(
        input_tokens=meta.get("input_tokens", 0),
        output_tokens=meta.get("output_tokens", 0),
        cache_read_tokens=details.get("cache_read", 0) or 0,
        cache_write_tokens=details.get("cache_creation", 0) or 0,
    )


def tool_specs(tools: Sequence[Any]) -> list[ToolSpec]:
    """LangChain tools (or OpenAI tool dicts) as ``ToolSpec``s, for counting."""
    specs = []
    for tool in tools:
        fn = convert_to_openai_tool(tool).get("function", {})
        specs.append(
            ToolSpec(
                name=fn.get("name", ""),
                description=fn.get("description", ""),
                parameters=fn.get("parameters") or {"type": "object", "properties": {}},
            )
        )
    return specs
