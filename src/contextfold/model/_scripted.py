"""ScriptedModel: a public test double that answers from a script and records requests."""

from __future__ import annotations

import inspect
import itertools
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ..message import (
    ContentBlock,
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolChoice,
    ToolSpec,
    Usage,
    is_summary_request,
)
from ._base import ChatModelBase
from ._response import ChatResponse

__all__ = ["ScriptedModel", "ScriptedReply", "ScriptedRequest", "text_reply", "tool_reply"]

ScriptedReply: TypeAlias = (
    str | dict[str, Any] | ChatResponse | Msg | list[ContentBlock] | BaseException
)
"""What a script step may be:

* ``str``: a text answer;
* ``dict``: structured output, which is how a summary is scripted: the arguments of a
  call to the forced tool when ``tool_choice`` names one, else the JSON object as text
  (how a summary request that keeps the agent's own tools on offer is answered);
* ``ChatResponse``, ``Msg`` or a list of blocks: returned as they are;
* an exception instance: raised, to test error handling.
"""


@dataclass
class ScriptedRequest:
    """One request the model received."""

    messages: list[Msg]
    tools: list[ToolSpec]
    tool_choice: ToolChoice | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools offered."""
        return [t.name for t in self.tools]

    @property
    def is_summary(self) -> bool:
        """Whether this is a summary request (a forced summary tool, or the agent's own
        request ending with the engine's summary instruction)."""
        choice = self.tool_choice if isinstance(self.tool_choice, str) else None
        return is_summary_request(self.messages, choice)


_ids = itertools.count(1)


def text_reply(text: str) -> ChatResponse:
    """A plain text answer."""
    return ChatResponse(content=[TextBlock(text=text)], stop_reason="end_turn")


def tool_reply(*calls: tuple[str, dict[str, Any]] | ToolCallBlock, text: str = "") -> ChatResponse:
    """An answer that calls tools: ``tool_reply(("read", {"path": "a"}), ("ls", {}))``."""
    blocks: list[ContentBlock] = [TextBlock(text=text)] if text else []
    for call in calls:
        if isinstance(call, ToolCallBlock):
            blocks.append(call)
        else:
            name, args = call
            blocks.append(ToolCallBlock(id=f"call_{next(_ids)}", name=name, input=args))
    return ChatResponse(content=blocks, stop_reason="tool_use")


ScriptFunction: TypeAlias = Callable[[ScriptedRequest], ScriptedReply | Awaitable[ScriptedReply]]


class ScriptedModel(ChatModelBase):
    """A model that replies from a queue, or from a function of each request.

    Every request is recorded in :attr:`requests`, so tests can assert on exactly what
    an agent sent; ``keep_requests=N`` keeps only the last N (``0``: none), for long runs
    where holding every request would cost memory (each one references the whole
    context). :attr:`request_count` counts them all. When the queue runs out the model
    raises ``IndexError`` with the request count, rather than inventing an answer.

    Example::

        model = ScriptedModel([tool_reply(("search", {"q": "x"})), "done"])
    """

    def __init__(
        self,
        script: Iterable[ScriptedReply] | ScriptFunction = (),
        *,
        model_name: str = "scripted",
        context_size: int = 128_000,
        report_usage: bool = True,
        keep_requests: int | None = None,
        cache_lifetime: float | None = None,
        **kwargs: Any,
    ) -> None:
        if keep_requests is not None and keep_requests < 0:
            raise ValueError(
                f"keep_requests must be None (keep all) or at least 0, got {keep_requests}"
            )
        kwargs.setdefault("max_retries", 0)
        super().__init__(model_name, context_size=context_size, **kwargs)
        self._function: ScriptFunction | None = None
        self._queue: list[ScriptedReply] = []
        if callable(script):
            self._function = script
        else:
            self._queue = list(script)
        self.report_usage = report_usage
        self.keep_requests = keep_requests
        self._cache_lifetime = cache_lifetime
        self.requests: list[ScriptedRequest] = []
        """The requests received, oldest first (the last ``keep_requests`` if set)."""
        self.request_count = 0
        """Requests received so far, including those no longer kept."""

    def add(self, *replies: ScriptedReply) -> None:
        """Append replies to the queue."""
        self._queue.extend(replies)

    @property
    def cache_lifetime(self) -> float | None:
        """As given: a provider's prompt-cache lifetime to act out (idle compaction)."""
        return self._cache_lifetime

    @property
    def remaining(self) -> int:
        """Replies still queued."""
        return len(self._queue)

    async def _generate(
        self,
        messages: Sequence[Msg],
        *,
        tools: Sequence[ToolSpec],
        tool_choice: ToolChoice | None,
    ) -> ChatResponse:
        request = ScriptedRequest(list(messages), list(tools), tool_choice)
        self.request_count += 1
        self.requests.append(request)
        if self.keep_requests is not None and len(self.requests) > self.keep_requests:
            del self.requests[: len(self.requests) - self.keep_requests]
        if self._function is not None:
            reply = self._function(request)
            if inspect.isawaitable(reply):
                reply = await reply
        elif self._queue:
            reply = self._queue.pop(0)
        else:
            raise IndexError(f"ScriptedModel: script exhausted at request {self.request_count}")
        response = self._to_response(reply, tool_choice)
        if self.report_usage and response.usage is None:
            counter = self.token_counter
            response.usage = Usage(
                input_tokens=counter.count_request(messages, tools),
                output_tokens=counter.count_message(Msg("m", list(response.content), "assistant")),
            )
        return response

    @staticmethod
    def _to_response(reply: ScriptedReply, tool_choice: ToolChoice | None) -> ChatResponse:
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, ChatResponse):
            return reply.model_copy(deep=True)
        if isinstance(reply, str):
            return text_reply(reply)
        if isinstance(reply, Msg):
            return ChatResponse(content=reply.blocks())
        if isinstance(reply, dict):
            if tool_choice in (None, "auto", "none", "required"):
                return text_reply(json.dumps(reply, ensure_ascii=False))
            return tool_reply((str(tool_choice), reply))
        return ChatResponse(content=list(reply))
