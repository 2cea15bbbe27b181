"""The ReAct loop: reason (a model call), act (the calls it made), observe, repeat."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from .._logging import logger
from ..context import ContextEngine
from ..message import Msg, TextBlock, ToolCallBlock, ToolResultBlock
from ..model import ChatResponse
from ._events import ToolCallEvent, ToolResultEvent
from ._session import Checkpoints
from ._stream import EventSink
from ._tools import answers, interrupted

__all__ = ["Loop", "as_msgs"]


@dataclass(frozen=True)
class Loop:
    """One agent's loop over the parts it runs: its context engine, a reasoning step, the
    execution of a step's calls, the session's checkpoints and its events."""

    engine: ContextEngine
    reason: Callable[[int], Awaitable[ChatResponse]]
    act: Callable[[list[ToolCallBlock], int], Awaitable[list[ToolResultBlock]]]
    checkpoints: Checkpoints
    events: EventSink

    async def run(self, incoming: list[Msg], *, name: str, max_iters: int) -> Msg:
        """Add ``incoming``, then reason and act until the model stops calling tools, or
        answer that ``max_iters`` steps were not enough."""
        engine = self.engine
        for msg in incoming:
            engine.append(msg)
        if incoming:
            await self.checkpoints.save()
        for step in range(max_iters):
            response = await self.reason(step)
            assistant = response.to_msg(name)
            engine.append(assistant)
            calls = assistant.tool_calls
            if not calls:
                await self.checkpoints.save()
                return assistant
            # Events are built only for a stream listening: a plain reply skips them.
            sink = self.events.get()
            if sink is not None:
                for call in calls:
                    sink(ToolCallEvent(agent=name, call=call, step=step))
            try:
                self.checkpoints.check_lease()  # a worker whose lease lapsed must not act
                results = await self.act(calls, step)
                # Stores the results in one synchronous step after any offload, so a
                # cancellation lands either before (nothing stored) or after (all stored).
                stored = await engine.add_tool_results(Msg.of_blocks("tool", results, "user"))
            except BaseException:
                # Keep the context provider-valid: every call gets exactly one result.
                if not answers(engine.last, calls):
                    engine.append(Msg("tool", [interrupted(c) for c in calls], "user"))
                raise
            await self.checkpoints.save()
            sink = self.events.get()
            if sink is not None:
                for result in stored.tool_results:
                    sink(ToolResultEvent(agent=name, result=result, step=step))
        logger.info("agent %s stopped at max_iters=%d", name, max_iters)
        final = Msg(
            name,
            [
                TextBlock(
                    text=f"I stopped after {max_iters} reasoning steps (the max_iters "
                    "limit) before finishing the task. Ask me to continue, or raise max_iters."
                )
            ],
            "assistant",
            metadata={"stop_reason": "max_iters"},
        )
        engine.append(final)
        await self.checkpoints.save()
        return final


def as_msgs(msg: Msg | Sequence[Msg] | str | None) -> list[Msg] | None:
    """What a reply was given, as messages (None for nothing)."""
    if msg is None:
        return None
    if isinstance(msg, str):
        return [Msg("user", msg, "user")]
    if isinstance(msg, Msg):
        return [msg]
    return list(msg)
