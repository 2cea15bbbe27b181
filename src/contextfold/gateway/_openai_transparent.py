"""Transparent mode on the OpenAI routes (``/v1/chat/completions``, ``/v1/responses``):
oversized tool results cut and offloaded, the read-back tool added after the client's
tools, and compaction by the rules of ``/v1/messages`` on these routes' wire shapes
(:data:`CHAT_SHAPE`, :data:`RESPONSES_SHAPE`; the Responses route also has OpenAI's own
compaction, emulated when asked: :mod:`._responses`).

What is forwarded is a pure function of the request: a tool result resent every turn
is cut to the same bytes, and the tool definition is constant, so the provider's prompt
cache keeps matching. Counting uses o200k_base, as OpenAI's models do.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from .._exceptions import MessageFormatError
from ..context import Summarizer
from ..message import Msg, Usage, from_openai_messages
from ..token import OpenAITokenCounter, TokenCounter
from ._compaction import SUMMARY_PREFIX
from ._count import CountCache, message_of
from ._responses_items import messages_of, summary_message
from ._retrieval import READ_TOOL, Offload, chat_read_tool, responses_read_tool
from ._sessions import SESSION_HEADER, SessionState, content_digest
from ._transparent import (
    Forwarded,
    ResultCut,
    TransparentPolicy,
    WireShape,
    forward,
    offloading_tools,
)
from ._transparent_ahead import Ahead

__all__ = [
    "CHAT_SHAPE",
    "RESPONSES_SHAPE",
    "OpenAIForwarded",
    "compacting_forward",
    "dumps",
    "openai_counter",
    "openai_key",
    "reads_tool",
]


def dumps(value: Any) -> bytes:
    """A body as the OpenAI routes send it (compact JSON, UTF-8)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


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


# -- Compaction on the OpenAI routes: the rules of /v1/messages on their wire shapes ------


def _cut_chat_message(message: Any, cut: ResultCut) -> Any:
    if cut.limit is None or not isinstance(message, dict) or message.get("role") != "tool":
        return message
    content = _cut_content(message.get("content"), cut)
    return message if content is message.get("content") else {**message, "content": content}


def _chat_summary(summary: str) -> dict[str, Any]:
    # Plain string content: local servers' chat templates often accept nothing else.
    return {"role": "user", "content": SUMMARY_PREFIX + summary}


def _as_json(raw: Any) -> Msg:
    return message_of({"role": "user", "content": json.dumps(raw, ensure_ascii=False)})


def _chat_msgs(messages: Sequence[Any]) -> list[Msg]:
    try:
        return from_openai_messages(list(messages), strict=False)
    except MessageFormatError:  # a shape the decoder does not know: read as JSON
        return [_as_json(m) for m in messages]


def _chat_msg(message: Any) -> Msg:
    found = _chat_msgs([message])
    return found[0] if len(found) == 1 else _as_json(message)


def _chat_offloading(body: dict[str, Any], policy: TransparentPolicy) -> bool:
    tools = body.get("tools")
    return offloading_tools(tools, _names(tools, nested=True), policy)


def _chat_tool(out: dict[str, Any], cut: ResultCut) -> dict[str, Any]:
    if cut.offload:
        out["tools"] = [*out["tools"], chat_read_tool()]
    return out


CHAT_SHAPE = WireShape(
    _cut_chat_message,
    _chat_summary,
    breakpoints=False,
    decode=_chat_msgs,
    count_as=_chat_msg,
    offloading=_chat_offloading,
    with_tool=_chat_tool,
)
"""Chat Completions: ``tool`` messages cut, the summary as a plain user message, kept
messages starting on an assistant message (its ``tool_calls`` stay with their results)."""

_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output"})


def _model_item(item: Any) -> bool:
    """Reasoning, a call or an assistant message: what the model produced."""
    if not isinstance(item, dict):
        return False
    kind = str(item.get("type", "message"))
    if kind == "message":
        return item.get("role") == "assistant"
    return kind == "reasoning" or (kind.endswith("_call") and kind not in _OUTPUTS)


def _turn_start(items: Sequence[Any], k: int) -> bool:
    """A model turn's first item: no call is parted from its output, no reasoning item
    from the call it led to."""
    return _model_item(items[k]) and not _model_item(items[k - 1])


def _cut_item(item: Any, cut: ResultCut) -> Any:
    if cut.limit is None or not isinstance(item, dict) or item.get("type") not in _OUTPUTS:
        return item
    output = _cut_content(item.get("output"), cut)
    return item if output is item.get("output") else {**item, "output": output}


def _item_msgs(items: Sequence[Any]) -> list[Msg]:
    return messages_of(list(items))


def _item_msg(item: Any) -> Msg:
    found = messages_of([item])
    return found[0] if len(found) == 1 else _as_json(item)


def _responses_offloading(body: dict[str, Any], policy: TransparentPolicy) -> bool:
    tools = body.get("tools")
    return offloading_tools(tools, _names(tools, nested=False), policy)


def _responses_tool(out: dict[str, Any], cut: ResultCut) -> dict[str, Any]:
    if cut.offload:
        out["tools"] = [*out["tools"], responses_read_tool()]
    return out


RESPONSES_SHAPE = WireShape(
    _cut_item,
    summary_message,
    breakpoints=False,
    decode=_item_msgs,
    turn_start=_turn_start,
    count_as=_item_msg,
    offloading=_responses_offloading,
    with_tool=_responses_tool,
)
"""Responses: call outputs cut, the summary as a user message item, kept items starting
on a model turn."""

_HEAD_ROLES = frozenset({"system", "developer"})


def _split(body: dict[str, Any], field: str) -> tuple[list[Any], dict[str, Any]]:
    """The leading system and developer messages (forwarded as sent, never summarized),
    and the rest as the body the shared rules work on (the head's text as its
    ``system``, for counting)."""
    items = body[field]
    n = 0
    while n < len(items) and isinstance(items[n], dict):
        item = items[n]
        if item.get("type", "message") != "message" or item.get("role") not in _HEAD_ROLES:
            break
        n += 1
    head = items[:n]
    parts = [body.get("instructions"), *(i.get("content") for i in head)]
    texts = [p if isinstance(p, str) else json.dumps(p, ensure_ascii=False) for p in parts if p]
    inner = {
        "system": "\n\n".join(texts) or None,
        "tools": body.get("tools"),
        "messages": items[n:],
    }
    return head, inner


async def compacting_forward(
    body: dict[str, Any],
    state: SessionState,
    policy: TransparentPolicy,
    *,
    field: str,
    summarizer: Summarizer,
    counts: CountCache | None = None,
    compaction: bool = True,
    ahead: tuple[Ahead, str, Callable[[], Usage] | None] | None = None,
) -> Forwarded:
    """An OpenAI request (``field``: ``messages`` for Chat Completions, ``input`` for
    Responses) as transparent mode forwards it, compaction included, counted with
    o200k_base; :func:`~._transparent.forward` does the work, or with ``ahead`` (the
    app's background compactions, the conversation's key and what the summarizer's
    model spent),
    :meth:`~._transparent_ahead.Ahead.forward`."""
    shape = CHAT_SHAPE if field == "messages" else RESPONSES_SHAPE
    head, inner = _split(body, field)
    common: dict[str, Any] = {"counter": openai_counter(), "counts": counts, "shape": shape}
    if ahead is not None and compaction:
        background, key, spent = ahead
        done = await background.forward(
            key, inner, state, policy, summarizer=summarizer, spent=spent, **common
        )
    else:
        done = await forward(
            inner, state, policy, summarizer=summarizer, compaction=compaction, **common
        )
    out = {**body, field: [*head, *done.body["messages"]]}
    if isinstance(done.body.get("tools"), list):
        out["tools"] = done.body["tools"]
    return replace(done, body=out)


def reads_tool(forwarded: Forwarded) -> bool:
    """Whether an OpenAI body carries the read-back tool (Chat nests its name)."""
    tools = forwarded.body.get("tools")
    names = _names(tools, nested=False) + _names(tools, nested=True)
    return READ_TOOL in names
