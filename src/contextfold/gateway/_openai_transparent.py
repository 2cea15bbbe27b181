"""Transparent mode on the OpenAI routes (``/v1/chat/completions``, ``/v1/responses``):
oversized tool results cut and offloaded, and the read-back tool added after the
client's tools. No compaction here (the Responses route has OpenAI's own, emulated
when asked: :mod:`._responses`).

What is forwarded is a pure function of the request: a tool result resent every turn
is cut to the same bytes, and the tool definition is constant, so the provider's prompt
cache keeps matching. Counting uses o200k_base, as OpenAI's models do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..token import OpenAITokenCounter, TokenCounter
from ._retrieval import Offload, chat_read_tool, responses_read_tool
from ._sessions import SESSION_HEADER, content_digest
from ._transparent import ResultCut, TransparentPolicy, offloading_tools

__all__ = ["OpenAIForwarded", "chat_forward", "openai_counter", "openai_key", "responses_forward"]


@lru_cache(maxsize=1)
def openai_counter() -> TokenCounter:
    """The counter of the OpenAI routes (o200k_base)."""
    return OpenAITokenCounter("o200k_base")


@dataclass(frozen=True)
class OpenAIForwarded:
    """The body to send, the results to keep whole first, and whether it carries the
    read-back tool."""

    body: dict[str, Any]
    offloads: tuple[Offload, ...]
    reads: bool


def openai_key(headers: Mapping[str, str], body: Mapping[str, Any]) -> str:
    """The conversation of an OpenAI request: ``x-contextfold-session``, else
    ``prompt_cache_key`` (Codex sends its conversation id there), else a hash of the
    system prompt (``instructions`` or the system and developer messages) and the first
    user message."""
    explicit = headers.get(SESSION_HEADER)
    if explicit:
        return f"h:{explicit}"
    cache_key = body.get("prompt_cache_key")
    if isinstance(cache_key, str) and cache_key:
        return f"p:{cache_key}"
    items = body.get("messages")
    if not isinstance(items, list):
        raw = body.get("input")
        items = raw if isinstance(raw, list) else [{"role": "user", "content": raw}]
    system = [body.get("instructions")]
    first = None
    for item in items:
        if not isinstance(item, dict):
            continue
        role = item.get("role")
        if role in ("system", "developer"):
            system.append(item.get("content"))
        elif role == "user" and first is None:
            first = item.get("content")
            break
    return "o:" + content_digest("", [system, first])[:32]


def _cut_content(content: Any, cut: ResultCut) -> Any:
    """A tool output (a string, or a list of text parts) cut as ``cut`` says."""
    if isinstance(content, str):
        return cut.text(content)
    if not isinstance(content, list):
        return content
    parts = []
    for part in content:
        text = part.get("text") if isinstance(part, dict) else None
        if isinstance(text, str) and part.get("type") in ("text", "input_text", "output_text"):
            done = cut.text(text)
            parts.append(part if done is text else {**part, "text": done})
        else:
            parts.append(part)
    changed = any(a is not b for a, b in zip(parts, content, strict=True))
    return parts if changed else content


def _names(tools: Any, *, nested: bool) -> list[Any]:
    out: list[Any] = []
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict):
            function = tool.get("function") if nested else tool
            out.append(function.get("name") if isinstance(function, dict) else None)
    return out


def chat_forward(body: dict[str, Any], policy: TransparentPolicy) -> OpenAIForwarded:
    """A Chat Completions request as transparent mode forwards it."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ValueError("messages: expected a list of messages")
    tools = body.get("tools")
    offload = offloading_tools(tools, _names(tools, nested=True), policy)
    cut = ResultCut(policy.tool_result_limit, openai_counter(), offload, {})
    out_messages = messages
    if policy.tool_result_limit is not None:
        out_messages = []
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "tool":
                content = _cut_content(message.get("content"), cut)
                if content is not message.get("content"):
                    message = {**message, "content": content}
            out_messages.append(message)
    out = {**body, "messages": out_messages}
    if offload:
        out["tools"] = [*tools, chat_read_tool()]  # type: ignore[misc]
    return OpenAIForwarded(out, tuple(cut.offloads.values()), offload)


def responses_forward(body: dict[str, Any], policy: TransparentPolicy) -> OpenAIForwarded:
    """A Responses request (its ``input`` a list of items) as transparent mode forwards it."""
    items = body.get("input")
    if not isinstance(items, list):
        raise ValueError("input: expected a list of items")
    tools = body.get("tools")
    offload = offloading_tools(tools, _names(tools, nested=False), policy)
    cut = ResultCut(policy.tool_result_limit, openai_counter(), offload, {})
    out_items = items
    if policy.tool_result_limit is not None:
        out_items = []
        for item in items:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                output = _cut_content(item.get("output"), cut)
                if output is not item.get("output"):
                    item = {**item, "output": output}
            out_items.append(item)
    out = {**body, "input": out_items}
    if offload:
        out["tools"] = [*tools, responses_read_tool()]  # type: ignore[misc]
    return OpenAIForwarded(out, tuple(cut.offloads.values()), offload)
