"""AnthropicChatModel: the Anthropic Messages API through the official SDK."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import aclosing
from functools import partial
from types import ModuleType
from typing import Any, ClassVar

from ..message import (
    ContentBlock,
    Msg,
    ToolCallBlock,
    ToolChoice,
    ToolSpec,
    Usage,
    anthropic_request,
    from_anthropic_message,
)
from ._response import (
    ChatResponse,
    ModelStreamEvent,
    ResponseCompleted,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
)
from ._sdk import SDKChatModel, check_tool_choice, sdk_import

with sdk_import("anthropic"):
    import anthropic

__all__ = ["AnthropicChatModel"]

CLAUDE_CONTEXT_SIZE = 200_000
_STOP_REASONS = {"stop_sequence": "end_turn"}


def default_max_tokens(model_name: str) -> int:
    """A sensible output budget: Claude 3 (not 3.5/3.7) models cap output at 4096."""
    if model_name.startswith("claude-3-") and not model_name.startswith(
        ("claude-3-5", "claude-3-7")
    ):
        return 4096
    return 8192


class AnthropicChatModel(SDKChatModel[anthropic.AsyncAnthropic]):
    """A Claude model behind the Anthropic Messages API.

    Thinking blocks keep their signatures, so multi-turn tool use with extended thinking
    works; enable thinking with ``thinking={"type": "enabled", "budget_tokens": N}``.
    Extra keyword arguments are sent with every request. ``max_tokens`` (required by the
    API) defaults to the model's usual output limit.

    Usage is normalised so that ``input_tokens`` is the whole prompt: Anthropic's
    uncached input plus cache reads and cache writes.

    Prompt caching is on: every request marks ``cache_control`` breakpoints at the end of
    the system prompt, of the summary and of the last stored message (see
    :func:`contextfold.message.anthropic_request`), so each step reads back what the last
    one sent and writes only what it added. Set :attr:`prompt_caching` to ``False`` to
    send none.
    """

    prompt_caching: bool = True
    """Whether requests carry ``cache_control`` breakpoints."""

    @property
    def cache_lifetime(self) -> float | None:
        """Five minutes, refreshed on use, for the breakpoints sent (Anthropic's prompt
        caching page: the default ``ephemeral`` lifetime); ``None`` without caching."""
        return 300.0 if self.prompt_caching else None

    _sdk_module: ClassVar[ModuleType] = anthropic
    _client_class = anthropic.AsyncAnthropic
    _provider = "Anthropic"
    _key_variable = "ANTHROPIC_API_KEY"

    def _default_context_size(self, model_name: str) -> int:
        return CLAUDE_CONTEXT_SIZE

    def _default_max_tokens(self, model_name: str) -> int:
        return default_max_tokens(model_name)

    def _params(
        self, messages: Sequence[Msg], tools: Sequence[ToolSpec], tool_choice: ToolChoice | None
    ) -> dict[str, Any]:
        if tools and tool_choice is not None:
            check_tool_choice(tool_choice, tools)
        params: dict[str, Any] = {
            "model": self.model_name,
            "max_tokens": self.max_tokens,
            **anthropic_request(
                messages, tools, tool_choice if tools else None, cache=self.prompt_caching
            ),
        }
        if self.temperature is not None:
            params["temperature"] = self.temperature
        params.update(self.extra_params)
        return params

    async def _generate(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> ChatResponse:
        params = self._params(messages, tools, tool_choice)
        message = await self._sdk.call(self._client.messages.create(**params))
        return _response(message.model_dump(mode="json", exclude_none=True), bad_inputs={})

    async def _stream(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> AsyncIterator[ModelStreamEvent]:
        params = self._params(messages, tools, tool_choice)
        params["stream"] = True
        draft = _StreamDraft()
        events = self._sdk.stream(partial(self._client.messages.create, **params))
        async with aclosing(events):
            async for event in events:
                for out in draft.feed(event.model_dump(mode="json", exclude_none=True)):
                    yield out
        if not draft.stopped:
            raise self._sdk.stream_cut()
        yield ResponseCompleted(response=draft.response())


def _usage(data: dict[str, Any] | None) -> Usage | None:
    if not data:
        return None
    cache_read = data.get("cache_read_input_tokens") or 0
    cache_write = data.get("cache_creation_input_tokens") or 0
    return Usage(
        input_tokens=(data.get("input_tokens") or 0) + cache_read + cache_write,
        output_tokens=data.get("output_tokens") or 0,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def _response(message: dict[str, Any], *, bad_inputs: dict[str, tuple[str, str]]) -> ChatResponse:
    """A ChatResponse from a Messages API message in wire format.

    ``bad_inputs`` maps tool-use ids whose streamed JSON did not parse to (raw, error).
    """
    content: list[ContentBlock] = from_anthropic_message(message).blocks()
    for i, block in enumerate(content):
        if isinstance(block, ToolCallBlock) and block.id in bad_inputs:
            raw, error = bad_inputs[block.id]
            content[i] = block.model_copy(
                update={"input": {}, "raw_input": raw, "input_error": error}
            )
    stop = message.get("stop_reason")
    return ChatResponse(
        content=content,
        usage=_usage(message.get("usage")),
        stop_reason=_STOP_REASONS.get(stop or "", stop),
        model=message.get("model"),
    )


class _StreamDraft:
    """Rebuilds the wire-format message from stream events, yielding deltas on the way."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {"role": "assistant", "content": []}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json_parts: dict[int, list[str]] = {}
        self.tool_slots: dict[int, int] = {}
        self.bad_inputs: dict[str, tuple[str, str]] = {}
        self.stopped = False

    def feed(self, event: dict[str, Any]) -> Iterator[ModelStreamEvent]:
        kind = event.get("type")
        if kind == "message_start":
            self.message.update(event["message"])
            self.message["content"] = []
        elif kind == "content_block_start":
            index, block = event["index"], dict(event["content_block"])
            self.blocks[index] = block
            if block.get("type") == "tool_use":
                self.json_parts[index] = []
                self.tool_slots[index] = len(self.tool_slots)
                yield ToolCallDelta(
                    index=self.tool_slots[index], id=block.get("id"), name=block.get("name")
                )
        elif kind == "content_block_delta":
            yield from self._delta(event["index"], event["delta"])
        elif kind == "content_block_stop":
            self._close(event["index"])
        elif kind == "message_delta":
            self.message.update(event.get("delta") or {})
            # message_delta usage is cumulative; it completes message_start's.
            usage = dict(self.message.get("usage") or {})
            usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
            self.message["usage"] = usage
        elif kind == "message_stop":
            self.stopped = True

    def _delta(self, index: int, delta: dict[str, Any]) -> Iterator[ModelStreamEvent]:
        block = self.blocks[index]
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
            yield TextDelta(text=delta["text"])
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
            yield ThinkingDelta(thinking=delta["thinking"])
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + delta["signature"]
        elif kind == "input_json_delta":
            self.json_parts[index].append(delta["partial_json"])
            yield ToolCallDelta(index=self.tool_slots[index], arguments=delta["partial_json"])

    def _close(self, index: int) -> None:
        block = self.blocks[index]
        if block.get("type") == "tool_use":
            raw = "".join(self.json_parts[index])
            try:
                value = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as exc:
                value = None
                error = f"arguments are not valid JSON ({exc.msg} at character {exc.pos})"
            else:
                error = f"arguments are a JSON {type(value).__name__}, not an object"
            if isinstance(value, dict):
                block["input"] = value
            else:
                block["input"] = {}
                self.bad_inputs[block["id"]] = (raw, error)
        self.message["content"].append(block)

    def response(self) -> ChatResponse:
        return _response(self.message, bad_inputs=self.bad_inputs)
