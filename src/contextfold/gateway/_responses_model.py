"""The request's own model behind an OpenAI Responses upstream, as a library chat model,
so a ``ModelSummarizer`` writes a Responses compaction's summary with it (as OpenAI
compacts with the request's model) when the gateway runs with ``--summarizer model``.

Each call is a ``POST /v1/responses`` through the gateway's upstream client with the
client's own headers (credentials included, forwarded and not kept), ``store: false``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._exceptions import ModelConnectionError
from ..message import (
    HintBlock,
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolChoice,
    ToolResultBlock,
    ToolSpec,
    Usage,
)
from ..model import ChatResponse
from ._request_model import RequestModel

__all__ = ["ResponsesRequestModel", "responses_request"]


def _items(msg: Msg) -> list[dict[str, Any]]:
    if isinstance(msg.content, str):
        return [{"role": msg.role, "content": msg.content}]
    items: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in msg.content:
        if isinstance(block, TextBlock | HintBlock):
            texts.append(block.text if isinstance(block, TextBlock) else block.hint)
        elif isinstance(block, ToolCallBlock):
            arguments = block.raw_input or json.dumps(block.input, ensure_ascii=False)
            items.append(
                {
                    "type": "function_call",
                    "call_id": block.id,
                    "name": block.name,
                    "arguments": arguments,
                }
            )
        elif isinstance(block, ToolResultBlock):
            output = block.output if isinstance(block.output, str) else str(block.output)
            items.append({"type": "function_call_output", "call_id": block.id, "output": output})
    if texts:
        items.insert(0, {"role": msg.role, "content": "\n".join(texts)})
    return items


def responses_request(
    messages: Sequence[Msg], tools: Sequence[ToolSpec], tool_choice: ToolChoice | None
) -> dict[str, Any]:
    """``instructions`` (the system messages), ``input``, ``tools`` and ``tool_choice`` of
    a Responses request."""
    system = [m.text for m in messages if m.role == "system"]
    body: dict[str, Any] = {
        "input": [item for m in messages if m.role != "system" for item in _items(m)]
    }
    if system:
        body["instructions"] = "\n\n".join(system)
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            }
            for t in tools
        ]
        choice = tool_choice or "auto"
        body["tool_choice"] = (
            choice
            if choice in ("auto", "none", "required")
            else {"type": "function", "name": choice}
        )
    return body


def _content(output: Any) -> list[TextBlock | ToolCallBlock]:
    blocks: list[TextBlock | ToolCallBlock] = []
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    blocks.append(TextBlock(text=part["text"]))
        elif item.get("type") == "function_call":
            raw = item.get("arguments")
            try:
                value = json.loads(raw) if isinstance(raw, str) else None
            except json.JSONDecodeError:
                value = None
            blocks.append(
                ToolCallBlock(
                    id=str(item.get("call_id", "")),
                    name=str(item.get("name", "")),
                    input=value if isinstance(value, dict) else {},
                    raw_input=None if isinstance(value, dict) else str(raw),
                )
            )
    return blocks


class ResponsesRequestModel(RequestModel):
    """``model_name`` behind the gateway's Responses upstream, called with ``headers``."""

    path = "/v1/responses"

    def _request(
        self,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> dict[str, Any]:
        return {
            "max_output_tokens": self.max_tokens,
            "store": False,
            **responses_request(messages, tools, tool_choice),
        }

    def _response(self, answer: Any) -> ChatResponse:
        if not isinstance(answer, dict):
            raise ModelConnectionError("the upstream's answer is not a response")
        usage = None
        reported = answer.get("usage")
        if isinstance(reported, dict):
            details = reported.get("input_tokens_details") or {}
            usage = Usage(
                input_tokens=int(reported.get("input_tokens") or 0),
                output_tokens=int(reported.get("output_tokens") or 0),
                cache_read_tokens=int(details.get("cached_tokens") or 0),
            )
        content = _content(answer.get("output"))
        stop = "tool_use" if any(isinstance(b, ToolCallBlock) for b in content) else "end_turn"
        return ChatResponse(
            content=list(content), usage=usage, stop_reason=stop, model=self.model_name
        )
