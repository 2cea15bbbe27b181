"""Streaming: where an agent's events go while a stream listens, and the model's answer
streamed into them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import assert_never

from .._exceptions import EmptyResponseError
from ..message import Msg
from ..middleware import ModelCallContext
from ..model import (
    ChatModelBase,
    ChatResponse,
    ResponseCompleted,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
)
from ._events import AgentEvent, ReplyEvent, TextDeltaEvent, ThinkingDeltaEvent

__all__ = ["EventSink", "Sink", "generate"]

Sink = Callable[[AgentEvent], None]

# The event sinks of the streams running in this context, by agent: set by
# ``Agent.stream`` and inherited by the tasks it spawns (parallel tool calls), so an agent
# run inside another agent's stream (as a tool, say) finds no sink of its own there.
_SINKS: ContextVar[Mapping[object, Sink] | None] = ContextVar(
    "contextfold_agent_sinks", default=None
)


class EventSink:
    """One agent's events: delivered to the stream listening in this context, if any."""

    def __init__(self) -> None:
        self._key = object()

    def get(self) -> Sink | None:
        """Where this agent's events go here, or None when no stream of its listens."""
        sinks = _SINKS.get()
        return None if sinks is None else sinks.get(self._key)

    def emit(self, event: AgentEvent) -> None:
        sink = self.get()
        if sink is not None:
            sink(event)

    async def stream(
        self, agent: str, reply: Callable[[], Awaitable[Msg]]
    ) -> AsyncGenerator[AgentEvent, None]:
        """The events of ``reply()`` as they happen, then a ``ReplyEvent``; closing the
        iterator early cancels the reply."""
        queue: asyncio.Queue[AgentEvent | None] = asyncio.Queue()

        async def run() -> None:
            _SINKS.set({**(_SINKS.get() or {}), self._key: queue.put_nowait})
            try:
                final = await reply()
                queue.put_nowait(ReplyEvent(agent=agent, msg=final))
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(run())
        try:
            while (event := await queue.get()) is not None:
                yield event
            await task
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def generate(
    model: ChatModelBase, ctx: ModelCallContext, events: EventSink, agent: str
) -> ChatResponse:
    """The model's answer to ``ctx``: streamed, its text and thinking emitted as events,
    when a stream listens; else in one call."""
    if events.get() is None:
        return await model.generate(ctx.messages, tools=ctx.tools, tool_choice=ctx.tool_choice)
    response: ChatResponse | None = None
    async for event in model.stream(ctx.messages, tools=ctx.tools, tool_choice=ctx.tool_choice):
        if isinstance(event, TextDelta):
            events.emit(TextDeltaEvent(agent=agent, text=event.text, step=ctx.step))
        elif isinstance(event, ThinkingDelta):
            events.emit(ThinkingDeltaEvent(agent=agent, thinking=event.thinking, step=ctx.step))
        elif isinstance(event, ResponseCompleted):
            response = event.response
        elif isinstance(event, ToolCallDelta):
            pass  # the calls are read whole from the completed response
        else:
            assert_never(event)
    if response is None or not response.content:
        raise EmptyResponseError(f"{model.model_name} returned an empty response")
    return response
