"""OpenAIChatModel: the Chat Completions API, for OpenAI and any compatible server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType
from typing import Any, ClassVar

from ..message import (
    Msg,
    TextBlock,
    ToolChoice,
    ToolSpec,
    Usage,
    from_openai_message,
    openai_request,
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

with sdk_import("openai"):
    import openai

__all__ = ["OPENAI_CONTEXT_SIZES", "OpenAIChatModel"]

OPENAI_CONTEXT_SIZES: dict[str, int] = {
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1-mini": 128_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
}
"""Context windows of OpenAI models, matched by the longest name prefix."""

_STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}


def known_context_size(model_name: str) -> int | None:
    """The context window of a known OpenAI model, by longest matching prefix."""
    matches = [p for p in OPENAI_CONTEXT_SIZES if model_name.startswith(p)]
    return OPENAI_CONTEXT_SIZES[max(matches, key=len)] if matches else None


class OpenAIChatModel(SDKChatModel[openai.AsyncOpenAI]):
    """A model behind the OpenAI Chat Completions API.

    Works with OpenAI itself and with any compatible server (llama.cpp, vLLM, Ollama, ...)
    through ``base_url``. ``context_size`` is required for models not in
    :data:`OPENAI_CONTEXT_SIZES`. Extra keyword arguments (``top_p``, ``seed``,
    ``extra_body``, ...) are sent with every request.

    Usage is normalised so that ``input_tokens`` is the whole prompt, cached part included.
    """

    _sdk_module: ClassVar[ModuleType] = openai
    _client_class = openai.AsyncOpenAI
    _provider = "OpenAI"
    _key_variable = "OPENAI_API_KEY"

    @property
    def cache_lifetime(self) -> float | None:
        """Five minutes on OpenAI itself (its prompt caching guide: cached prefixes stay
        active for 5 to 10 minutes of inactivity); ``None`` for other servers, whose
        cache, if any, has no lifetime this knows of."""
        return 300.0 if self._client.base_url.host == "api.openai.com" else None

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model_name!r}, base_url={str(self._client.base_url)!r})"

    def _default_context_size(self, model_name: str) -> int:
        context_size = known_context_size(model_name)
        if context_size is None:
            raise ValueError(
                f"unknown context window for model {model_name!r}: pass "
                "context_size=<tokens> (e.g. the server's --n_ctx)"
            )
        return context_size

    def _no_key(self, base_url: str | None) -> str:
        if base_url is None:
            return super()._no_key(base_url)
        return "no-key"  # local OpenAI-compatible servers ignore it

    def _where(self) -> str:
        return f"OpenAI-compatible model {self.model_name!r} at {self._client.base_url}"

    @property
    def _official(self) -> bool:
        """Whether this is OpenAI's own API (compatible servers get some workarounds)."""
        return self._base_url is None and "api.openai.com" in str(self._client.base_url)

    def _params(
        self, messages: Sequence[Msg], tools: Sequence[ToolSpec], tool_choice: ToolChoice | None
    ) -> dict[str, Any]:
        if tools:
            tool_choice = self._tool_choice(tool_choice or "auto", tools)
        # Some compatible servers (llama-cpp-python) reject the ``content: null`` of an
        # assistant turn that only calls tools.
        body = openai_request(messages, tools, tool_choice, null_content=self._official)
        params: dict[str, Any] = {"model": self.model_name, **body}
        if self.max_tokens is not None:
            # OpenAI's reasoning models only accept the newer name; compatible servers
            # generally only know the older one.
            key = "max_completion_tokens" if self._official else "max_tokens"
            params[key] = self.max_tokens
        if self.temperature is not None:
            params["temperature"] = self.temperature
        params.update(self.extra_params)
        return params

    def _tool_choice(self, choice: ToolChoice, tools: Sequence[ToolSpec]) -> ToolChoice:
        check_tool_choice(choice, tools)
        if choice == "required" and len(tools) == 1 and not self._official:
            # Compatible servers often lack "required" (llama-cpp-python answers HTTP 500);
            # with one tool, naming it forces the same call.
            return tools[0].name
        return choice

    def _hint(self, params: dict[str, Any]) -> str:
        """What to tell the user if a compatible server fails a request with this choice."""
        if params.get("tool_choice") == "required" and not self._official:
            return (
                "tool_choice='required' with several tools may be unsupported by this "
                "server: offer one tool, or name the tool to call"
            )
        return ""

    async def _generate(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> ChatResponse:
        params = self._params(messages, tools, tool_choice)
        completion = await self._sdk.call(
            self._client.chat.completions.create(**params), hint=self._hint(params)
        )
        data = completion.model_dump()
        draft = _Draft(model=data.get("model"), usage=_usage(data.get("usage")))
        if data.get("choices"):
            choice = data["choices"][0]
            message = choice.get("message") or {}
            draft.reasoning = message.get("reasoning_content") or ""
            draft.text = message.get("content") or message.get("refusal") or ""
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                draft.calls.append(
                    [call.get("id") or "", function.get("name") or "", function.get("arguments")]
                )
            draft.finish_reason = choice.get("finish_reason")
        return draft.response()

    async def _stream(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> AsyncIterator[ModelStreamEvent]:
        params = self._params(messages, tools, tool_choice)
        params["stream"] = True
        params["stream_options"] = {"include_usage": True}
        draft = _Draft()
        chunks = self._sdk.stream(
            partial(self._client.chat.completions.create, **params), hint=self._hint(params)
        )
        async with aclosing(chunks):
            async for chunk in chunks:
                data = chunk.model_dump()
                draft.model = draft.model or data.get("model")
                if data.get("usage"):
                    draft.usage = _usage(data["usage"])
                for choice in data.get("choices") or []:
                    if choice.get("index", 0) != 0:
                        continue
                    for event in draft.feed(choice):
                        yield event
        if draft.finish_reason is None:
            raise self._sdk.stream_cut()
        yield ResponseCompleted(response=draft.response())


def _usage(data: dict[str, Any] | None) -> Usage | None:
    if not data:
        return None
    details = data.get("prompt_tokens_details") or {}
    return Usage(
        input_tokens=data.get("prompt_tokens") or 0,
        output_tokens=data.get("completion_tokens") or 0,
        cache_read_tokens=details.get("cached_tokens") or 0,
    )


@dataclass
class _Draft:
    """An answer being assembled, from a whole completion or from stream chunks."""

    model: str | None = None
    usage: Usage | None = None
    text: str = ""
    reasoning: str = ""
    calls: list[list[Any]] = field(default_factory=list)  # [id, name, arguments]
    finish_reason: str | None = None
    _call_slots: dict[int, int] = field(default_factory=dict)

    def feed(self, choice: dict[str, Any]) -> Iterator[ModelStreamEvent]:
        delta = choice.get("delta") or {}
        if reasoning := delta.get("reasoning_content"):
            self.reasoning += reasoning
            yield ThinkingDelta(thinking=reasoning)
        if text := delta.get("content") or delta.get("refusal"):
            self.text += text
            yield TextDelta(text=text)
        for part in delta.get("tool_calls") or []:
            index = part.get("index", len(self._call_slots))
            if index not in self._call_slots:
                self._call_slots[index] = len(self.calls)
                self.calls.append(["", "", ""])
            slot = self.calls[self._call_slots[index]]
            function = part.get("function") or {}
            slot[0] = slot[0] or part.get("id") or ""
            slot[1] = slot[1] or function.get("name") or ""
            slot[2] += function.get("arguments") or ""
            yield ToolCallDelta(
                index=self._call_slots[index],
                id=part.get("id"),
                name=function.get("name"),
                arguments=function.get("arguments") or "",
            )
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def response(self) -> ChatResponse:
        """The answer, parsed by the same converter that reads stored OpenAI messages."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": call_id or f"call_{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments or ""},
                }
                for call_id, name, arguments in self.calls
            ]
        content = [
            b
            for b in from_openai_message(message).blocks()
            if not (isinstance(b, TextBlock) and not b.text)
        ]
        stop = _STOP_REASONS.get(self.finish_reason or "", self.finish_reason)
        # A forced call ends with finish_reason "stop"; it is still a tool-use turn.
        if stop == "end_turn" and self.calls:
            stop = "tool_use"
        return ChatResponse(content=content, usage=self.usage, stop_reason=stop, model=self.model)
