"""Request bodies in the providers' wire forms: the part that carries the conversation.

The model adapters send exactly these (adding only the model name and sampling options),
and ``contextfold replay --dump-requests`` writes them, so a dumped request is what the
model would have been sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._anthropic import to_anthropic_request, to_anthropic_tool_choice, to_anthropic_tools
from ._msg import Msg
from ._openai import to_openai_messages, to_openai_tool_choice, to_openai_tools
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
) -> dict[str, Any]:
    """``system`` (when there is one), ``messages``, ``tools`` and ``tool_choice`` of a
    Messages API request."""
    system, wire = to_anthropic_request(list(messages))
    body: dict[str, Any] = {"messages": wire}
    if system:
        body["system"] = system
    if tools:
        body["tools"] = to_anthropic_tools(list(tools))
        if tool_choice is not None:
            body["tool_choice"] = to_anthropic_tool_choice(tool_choice)
    return body
