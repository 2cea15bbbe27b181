"""Request bodies in the providers' wire forms: the part that carries the conversation.

The model adapters send exactly these (adding only the model name and sampling options),
and ``contextfold replay --dump-requests`` writes them, so a dumped request is what the
model would have been sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._anthropic_encode import to_anthropic_counted, to_anthropic_tool_choice, to_anthropic_tools
from ._markers import CACHE_POINT_KEY, Marker, marker_of
from ._msg import Msg
from ._openai_encode import to_openai_messages, to_openai_tool_choice, to_openai_tools
from ._toolspec import ToolChoice, ToolSpec

__all__ = ["anthropic_request", "openai_request"]


def openai_request(
    messages: Sequence[Msg],
    tools: Sequence[ToolSpec] = (),
    tool_choice: ToolChoice | None = None,
    *,
    null_content: bool = True,
) -> dict[str, Any]:
    """``messages``, ``tools`` and ``tool_choice`` of a Chat Completions request.

    With tools, ``tool_choice`` is always sent (``auto`` by default): some compatible
    servers (llama-cpp-python) leave the tools out of the prompt without it.
    ``null_content=False`` sends ``""`` instead of ``null`` as the content of an assistant
    turn that only calls tools, which some compatible servers require.
    """
    wire = to_openai_messages(list(messages))
    if not null_content:
        wire = [m | {"content": ""} if m.get("content", "") is None else m for m in wire]
    body: dict[str, Any] = {"messages": wire}
    if tools:
        body["tools"] = to_openai_tools(list(tools))
        body["tool_choice"] = to_openai_tool_choice(tool_choice or "auto")
    return body


def anthropic_request(
    messages: Sequence[Msg],
    tools: Sequence[ToolSpec] = (),
    tool_choice: ToolChoice | None = None,
    *,
    cache: bool = False,
) -> dict[str, Any]:
    """``system`` (when there is one), ``messages``, ``tools`` and ``tool_choice`` of a
    Messages API request.

    With ``cache``, prompt-cache breakpoints (``cache_control``) mark the end of the
    system prompt (covering the tools before it), the end of the summary (the engine's
    :data:`~contextfold.message.Marker.SUMMARY` message), the last message an
    observation masking left unchanged (:data:`CACHE_POINT_KEY`) and the end of the last
    stored message (before a trailing usage note, which is never resent): the stable
    layers are read back at every step, and each step writes only what it added.
    """
    msgs = list(messages)
    system, wire, counts = to_anthropic_counted(msgs)
    body: dict[str, Any] = {"messages": wire}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = to_anthropic_tools(list(tools))
        if tool_choice is not None:
            body["tool_choice"] = to_anthropic_tool_choice(tool_choice)
    if cache:
        _mark_breakpoints(body, msgs, counts)
    return body


def _ephemeral() -> dict[str, str]:
    # A new dict per breakpoint: a caller editing one request must not edit every other.
    return {"type": "ephemeral"}


def _mark_breakpoints(body: dict[str, Any], msgs: list[Msg], counts: list[int]) -> None:
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": _ephemeral()}]
    elif isinstance(system, list) and system:
        system[-1] = {**system[-1], "cache_control": _ephemeral()}
    ends: list[int] = []
    summary = next((i for i, m in enumerate(msgs) if marker_of(m) is Marker.SUMMARY), None)
    if summary is not None:
        ends.append(sum(counts[: summary + 1]))
    points = [i for i, m in enumerate(msgs) if m.metadata.get(CACHE_POINT_KEY) is True]
    if points:
        ends.append(sum(counts[: points[-1] + 1]))
    stored = len(msgs)
    while stored and marker_of(msgs[stored - 1]) is Marker.USAGE_HINT:
        stored -= 1
    ends.append(sum(counts[:stored]))
    # Each end is a count of blocks: the breakpoint goes on the block before it.
    position = 0
    targets = {end - 1 for end in ends if end > 0}
    for message in body["messages"]:
        content = message["content"]
        size = 1 if isinstance(content, str) else len(content)
        marked = [k for k in range(size) if position + k in targets]
        if marked and isinstance(content, str):
            content = message["content"] = [{"type": "text", "text": content}]
        for k in marked:
            content[k] = {**content[k], "cache_control": _ephemeral()}
        position += size
