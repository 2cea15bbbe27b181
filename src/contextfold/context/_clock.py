"""The time a background compaction is measured in: the system's, or a simulated one.

The engine reads the time to learn how fast the context grows and how long a summary
takes, and waits for a summary in flight. A replay has no wall clock between recorded
steps, so it passes a clock of its own (``contextfold.replay.SimulatedClock``) whose time
moves only as the recorded calls and the summarizer's stated latency say.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol, TypeVar

__all__ = ["Clock", "SystemClock"]

T = TypeVar("T")


class Clock(Protocol):
    """Where the background compaction reads the time and waits for its task."""

    def now(self) -> float:
        """Seconds, monotonic."""
        ...

    async def wait(self, task: asyncio.Task[T]) -> T:
        """The task's result, waited for without cancelling the task if the caller is
        cancelled; a simulated clock moves its time on while the caller waits."""
        ...


class SystemClock:
    """``time.monotonic()``; waiting is waiting."""

    def now(self) -> float:
        return time.monotonic()

    async def wait(self, task: asyncio.Task[T]) -> T:
        return await asyncio.shield(task)
