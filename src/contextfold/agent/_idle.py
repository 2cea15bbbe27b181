"""Idle compaction: between turns, compact before the provider's prompt cache expires.

A summary written while the provider still caches the conversation's prefix is mostly a
cache read; one written after the user comes back from a pause longer than the cache's
lifetime writes the whole prefix again. So after each reply, when the next turn would
likely cross the trigger (the context plus the median growth of recent turns), a timer
starts the compaction ``idle_margin_s`` before the summarizer model's cache lifetime runs
out, and applies it once ready if no turn has begun; a turn that begins first cancels a
timer still waiting and leaves a compaction already started to the trigger.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from ..context import CompressionEvent, ContextEngine
from ..message import ToolSpec

__all__ = ["IdleCompaction"]

Inputs = Callable[[], Awaitable[tuple[str, Sequence[ToolSpec]]]]


class IdleCompaction:
    """The idle-compaction timer of one agent."""

    def __init__(
        self,
        engine: ContextEngine,
        *,
        lifetime: Callable[[], float | None],
        inputs: Inputs,
        in_turn: Callable[[], bool],
        applied: Callable[[CompressionEvent], Awaitable[None]],
    ) -> None:
        self._engine = engine
        self._lifetime = lifetime
        self._inputs = inputs
        self._in_turn = in_turn
        self._applied = applied
        self._growth: deque[int] = deque(maxlen=5)
        self._before: int | None = None
        self._timer: asyncio.Task[None] | None = None
        self._waiting = False

    def turn_started(self) -> None:
        """Cancel a timer still waiting; note the context's size the turn starts from."""
        if self._timer is not None and self._waiting:
            self._timer.cancel()
        self._timer = None
        self._before = self._engine.context_tokens

    def turn_ended(self) -> None:
        """Record the turn's growth and, when idle compaction applies, start the timer."""
        after = self._engine.context_tokens
        if self._before is not None and after >= self._before:
            self._growth.append(after - self._before)  # a turn that compacted is not growth
        self._before = None
        config = self._engine.config.background
        lifetime = self._lifetime()
        if config is None or not config.idle or lifetime is None or not self._growth:
            return
        delay = max(0.0, lifetime - config.idle_margin_s)
        growth = int(statistics.median(self._growth))
        self._waiting = True
        self._timer = asyncio.get_running_loop().create_task(self._run(delay, growth))

    @property
    def pending(self) -> bool:
        """Whether a timer waits or an idle compaction is under way."""
        return self._timer is not None and not self._timer.done()

    async def _run(self, delay: float, growth: int) -> None:
        try:
            await asyncio.sleep(delay)
        finally:
            self._waiting = False
        engine = self._engine
        system_prompt, tools = await self._inputs()
        if not await engine.prepare_ahead(system_prompt, tools, growth=growth):
            return
        if not await engine.background.ready() or self._in_turn():
            return  # failed or stale (already reported), or the turn's trigger takes it
        event = await engine.apply_prepared(system_prompt, tools)
        if event is not None:
            await self._applied(event)
