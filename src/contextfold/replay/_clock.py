"""Simulated time for a replay: how long the agent would have waited for its summaries.

A replay runs in a fraction of the recorded run's time, so a summary written in the
background would always look ready. With :class:`ReplayTiming` the engine reads a
:class:`SimulatedClock` instead of the system's: between two recorded calls it moves on
by the recorded gap (or a stated latency per call), and every summary takes the stated
summarizer latency. A summary in flight becomes ready when the simulated time reaches
its end; an agent that must wait for one moves the time to that end.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ..context import Summarizer, SummaryRequest, SummaryResult

__all__ = ["LatentSummarizer", "ReplayTiming", "SimulatedClock"]

T = TypeVar("T")

_SETTLE_YIELDS = 20
"""Loop turns given to background work after each step: enough for a summary job to
reach its simulated latency (it awaits nothing in a thread before it)."""
_SETTLE_LIMIT_S = 30.0
"""Real seconds :meth:`SimulatedClock.settle` waits at most for work a woken task does in
a thread (the workspace's writes); past it the replay goes on, and its timing may then
depend on the machine's load."""
_SETTLE_POLL_S = 0.001


class ReplayTiming(BaseModel):
    """How long things take in a timed replay (``contextfold replay --background``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    summary_latency_s: float = Field(default=5.0, ge=0)
    """Seconds each summarizer call takes."""
    step_latency_s: float = Field(default=5.0, ge=0)
    """Seconds from one recorded call to the next (the call and its tools) when the
    recording has no timestamps for them."""
    timestamps: bool = True
    """Use the recording's own timestamps between calls when it has them."""


class SimulatedClock:
    """Time that moves only when the replay says: :meth:`advance` (the agent works),
    :meth:`sleep` (a summary being written) and :meth:`wait` (the agent waits for a
    task). The task that owns the clock (``main``) is the agent: its sleeps move the
    time; any other task's sleep waits until the time reaches its end."""

    def __init__(self) -> None:
        self._now = 0.0
        self._order = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._new_sleeper: asyncio.Future[None] | None = None
        self._awake: set[asyncio.Task[Any]] = set()  # woken by the clock, not asleep again
        self.main: asyncio.Task[object] | None = None

    def now(self) -> float:
        return self._now

    async def advance(self, seconds: float) -> None:
        """Move the time on by ``seconds``, waking each sleeper at its own time."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"time moves forward by a finite amount, not {seconds}")
        # Work that became ready now (a background job the agent's last message let go
        # on) starts now, not once the time has moved on.
        await self.settle()
        target = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            when, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, when)
            if not future.done():
                future.set_result(None)
            await self.settle()  # it runs on at its own time, up to its next wait
        self._now = target

    async def sleep(self, seconds: float) -> None:
        """``seconds`` of simulated time: the agent's own (the time moves), or a
        background task's (it resumes once the time has moved that far)."""
        if asyncio.current_task() is self.main:
            await self.advance(seconds)
            return
        task = asyncio.current_task()
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._order), future))
        if self._new_sleeper is not None and not self._new_sleeper.done():
            self._new_sleeper.set_result(None)
        if task is not None:
            self._awake.discard(task)
        try:
            await future
        finally:
            if task is not None:
                self._awake.add(task)

    async def wait(self, task: asyncio.Task[T]) -> T:
        """The agent waits for ``task``: while it sleeps, the time moves to its end;
        while it works, the agent waits for it. Cancelling the agent leaves the task."""
        while not task.done():
            if self._sleepers:
                await self.advance(self._sleepers[0][0] - self._now)
                continue
            self._new_sleeper = asyncio.get_running_loop().create_future()
            either: list[asyncio.Future[Any]] = [task, self._new_sleeper]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        return task.result()

    async def settle(self) -> None:
        """Let background work run up to its next wait before the agent goes on: a few
        loop turns, then, for each task this clock woke, until it ends or sleeps on the
        clock again (what it does in a thread meanwhile takes real time, and must not
        move into a later simulated step)."""
        for _ in range(_SETTLE_YIELDS):
            await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        limit = loop.time() + _SETTLE_LIMIT_S
        while True:
            self._awake = {t for t in self._awake if not t.done()}
            if not self._awake or loop.time() > limit:
                return
            await asyncio.sleep(_SETTLE_POLL_S)


class LatentSummarizer:
    """``inner``'s summary, which takes ``latency`` seconds of the clock's time."""

    def __init__(self, inner: Summarizer, clock: SimulatedClock, latency: float) -> None:
        self.inner = inner
        self.clock = clock
        self.latency = latency

    def __repr__(self) -> str:
        return repr(self.inner)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """``inner``'s answer, returned once the latency has passed."""
        result = await self.inner.summarize(request)
        await self.clock.sleep(self.latency)
        return result
