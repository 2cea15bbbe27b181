"""Compaction prepared in the background, so the agent does not wait for its summary.

With ``ContextConfig.background``, once usage passes ``start_ratio`` the engine plans a
compaction of a snapshot and lets its tiers run (the summarizer call, the offload) in a
task of its own while the agent goes on from the full context. The outcome is not
committed there: at the first step it is ready (the engine's; the gateway's at the
trigger), :meth:`Prefetch.take` hands it to the caller's one commit point if the state it
was made from is still the state (the same
summary layer, the same messages where it folds and keeps), with everything appended
since kept after it. At most one is in flight per engine; every phase is an event.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from .._logging import logger
from ..message import Msg
from ._clock import Clock, SystemClock
from ._compaction import Outcome
from ._config import BackgroundConfig, ContextConfig
from ._latency import SummaryLatencies, SummaryLatencyModel
from ._plan import CompactionPlan
from ._types import BackgroundCompactionEvent, ContextEvent

__all__ = ["Prefetch", "Prepared"]

P = TypeVar("P")
"""What a job prepares: the engine's :class:`Prepared`, or another caller's own value
(the gateway's transparent mode prepares a conversation's next state)."""

_MARGIN = 1.25
"""How many of the next summary's expected latencies (:meth:`Prefetch.expected_latency`)
ahead of the deadline it starts: room for the growth rate to rise meanwhile."""
_STEPS_SEEN = 5
"""Steps whose growth :attr:`Prefetch.step` is the largest of."""


def _floor(config: ContextConfig, background: BackgroundConfig, size: int) -> int:
    """Usage at or below which no summary starts once a growth rate is known: halfway
    between ``reserve_ratio`` and ``start_ratio``."""
    return int((background.start_ratio + config.reserve_ratio) / 2 * size)


@dataclass(frozen=True)
class Prepared:
    """A compaction executed in the background and not yet committed."""

    plan: CompactionPlan
    outcome: Outcome
    seen: tuple[Msg, ...]
    """The messages the outcome replaces (``outcome.consumed`` of them), as they were."""

    def applies_to(self, layer: object, context: list[Msg]) -> bool:
        """Whether the engine's state is still the one this was made from, plus messages
        appended since: the same layer, and ``seen`` at the head of ``context``."""
        return (
            layer is self.plan.previous
            and len(context) >= len(self.seen)
            and all(a is b for a, b in zip(self.seen, context, strict=False))
        )


class Prefetch(Generic[P]):
    """At most one background compaction of one conversation, from start to commit or
    discard: when one is due, its task, the wait for it at the trigger, and its phases as
    :class:`~contextfold.context.BackgroundCompactionEvent` s. The engine keeps one
    (``ContextEngine.background``, of its ``Prepared`` outcomes); ``contextfold serve``
    keeps one per conversation in transparent mode. ``P`` is what a job prepares; the
    caller decides at :meth:`take` whether it still applies."""

    def __init__(
        self, emit: Callable[[ContextEvent], Awaitable[None]], clock: Clock | None = None
    ) -> None:
        self._emit = emit
        self.clock: Clock = clock or SystemClock()
        """Where the time is read (growth rate, latency, waits) and the task waited for."""
        self._task: asyncio.Task[P | None] | None = None
        self._cause: Literal["usage", "idle"] = "usage"
        self._started = 0.0
        self._tried: Hashable = None
        self._seen: tuple[float, int] | None = None  # (when, tokens) at the last check
        # The last few steps that grew usage: (seconds they took, tokens they added).
        self._steps: deque[tuple[float, int]] = deque(maxlen=_STEPS_SEEN)
        self._replies: deque[int] = deque(maxlen=_STEPS_SEEN)
        self._answer: asyncio.Event | None = None  # set once the step's request is answered
        self.answer_wait = 0.0
        """Seconds the last job that waited for its step's answer waited."""
        self._answered_after = 0.0  # the job in flight's own wait for its step's answer
        self._tokens: int | None = None  # usage the job in flight started from, if it is timed
        self.latency: float | None = None
        """Seconds the last prepared compaction took, from start to ready."""
        self.latencies = SummaryLatencies()
        """The summaries timed in this conversation (background and blocking), which
        :meth:`expected_latency` reads."""
        self.latency_model: SummaryLatencyModel | None = None
        """The summarizer's own measure of its latency (:meth:`measure`), used until a
        summary is timed."""
        self._measuring: asyncio.Task[None] | None = None
        self.applied = 0
        """Prepared compactions swapped in at the trigger."""
        self.discarded = 0
        """Prepared compactions dropped: stale, failed, nothing to fold, or cancelled."""

    @property
    def busy(self) -> bool:
        """Whether one is in flight or waits for the trigger."""
        return self._task is not None

    @property
    def finished(self) -> bool:
        """Whether one ran to its end and waits to be taken (or to be found stale)."""
        return self._task is not None and self._task.done()

    def observe(self, tokens: int) -> None:
        """Note the usage at a step: how fast it grows, and by how much a step (a step
        that compacted tells neither)."""
        self.answered()  # a new step: the last request was answered (or given up)
        now = self.clock.now()
        if self._seen is not None and tokens > self._seen[1]:
            self._steps.append((max(0.0, now - self._seen[0]), tokens - self._seen[1]))
        self._seen = (now, tokens)

    @property
    def rate(self) -> float | None:
        """Tokens a second usage grew by over the last few steps; ``None`` until two steps
        grew it. One step is not a rate: the first step of a run often reads a large file
        in a second, and with the latency assumed for a first summary that one burst
        would start a summary at a third of the window, whose snapshot folds little and
        keeps all that arrives after it (three of the 44 SWE-bench replays)."""
        if len(self._steps) < 2:
            return None
        seconds = sum(t for t, _ in self._steps)
        return sum(g for _, g in self._steps) / seconds if seconds > 0 else None

    def observe_reply(self, tokens: int) -> None:
        """Note the size of one of the model's replies (an assistant message, with its
        tool calls): the request it answers is now in the provider's cache."""
        self._replies.append(tokens)
        self.answered()

    def answered(self) -> None:
        """The request of the step the job started in was answered, or the engine needs
        the job now: a job that waits for it (:meth:`answer`) goes on."""
        if self._answer is not None:
            self._answer.set()

    async def answer(self) -> None:
        """Wait, in a job started with ``after_answer``, until :meth:`answered`: its
        summary extends the request of that step, which the provider caches once it is
        answered; called at the same moment, it would write that prefix a second time."""
        if self._answer is not None:
            await self._answer.wait()
            self.answer_wait = self._answered_after = self._age()

    def has_time(self, tokens: int, config: ContextConfig, size: int) -> bool:
        """Whether a job started at ``tokens`` may wait for its step's answer before it asks
        for its summary: at the rate usage grows, the :meth:`deadline` is still further
        away than ``_MARGIN`` times the summary's expected latency plus the last such wait
        (not when a summary is started late, right after the last was swapped in)."""
        rate, latency = self.rate, self.expected_latency(tokens, config)
        if rate is None or rate <= 0 or latency is None:
            return True
        left = (self.deadline(config, size) - tokens) / rate
        return left >= _MARGIN * latency + self.answer_wait

    @property
    def typical_reply(self) -> int:
        """The median size of the model's last few replies."""
        return int(statistics.median(self._replies)) if self._replies else 0

    @property
    def typical_step(self) -> int:
        """The median growth of usage from one step to the next, of the last few."""
        return int(statistics.median(g for _, g in self._steps)) if self._steps else 0

    @property
    def step(self) -> int:
        """The largest growth of usage from one step to the next, of the last few."""
        return max((g for _, g in self._steps), default=0)

    @staticmethod
    def deadline(config: ContextConfig, size: int) -> int:
        """Usage past which the agent waits for the one in flight: ``wait_ratio`` of the
        window (the trigger, if that is higher)."""
        trigger = int(config.trigger_ratio * size)
        if config.background is None:
            return trigger
        return max(trigger, int(config.background.wait_ratio * size))

    def due(self, tokens: int, config: ContextConfig, size: int) -> bool:
        """Whether a compaction should be prepared at ``tokens`` of usage (see
        :meth:`observe`): as late as it can be and still be ready (the later the snapshot,
        the more it folds), once, at the rate usage grows, the :meth:`deadline` would come
        within ``_MARGIN`` times the summary's :meth:`expected_latency` plus one typical
        step; never below halfway between reserve and start mark. Until a rate is known
        (:attr:`rate`): past the start mark.

        Why this lead: the agent waits once usage reaches the deadline, and while the
        summary is written usage grows by the rate times its latency; a start later than
        that lead is waited for, one earlier folds less (everything after the snapshot is
        kept at the swap). The latency is the slowest recent one scaled to this input (a
        summary slower than the last was the embedded model's common case, and timed on
        the last one it was waited for); ``_MARGIN`` leaves room for the rate to rise
        while it runs; the step, because this is checked once a step."""
        background = config.background
        if background is None:
            return False
        rate = self.rate
        if rate is None:
            return tokens > int(background.start_ratio * size)
        if tokens <= _floor(config, background, size):
            return False
        latency = self.expected_latency(tokens, config)
        assert latency is not None  # config.background is set
        lead = _MARGIN * rate * latency + self.typical_step
        return self.deadline(config, size) - tokens < lead

    def due_at_trigger(self, tokens: int, config: ContextConfig, size: int) -> bool:
        """Whether a summary started at ``tokens`` of usage should start now to be ready
        when usage crosses the trigger, not only before the wait mark (:meth:`due`): at the
        rate usage grows, the trigger comes within the summary's :meth:`expected_latency`
        plus half a typical step; never below :meth:`due`'s floor, and not until a rate
        is known.

        Why: a summary ready only past the trigger leaves the agent sending the full
        context there (a request from the cached prefix, and the step's new turn written
        to the cache twice: in it and after the swap); on the SWE-bench replays, where a
        step took 4 s at the median and a summary 5 s, summaries timed on the wait mark
        alone mostly started at the trigger and were swapped a step or two past it (+2.9%
        against blocking; this alone: +1.8%, with a ready summary swapped in at once,
        ``Ahead.before_step``: +1.1%). No ``_MARGIN`` here: late by a
        step costs a request from the full context, not a wait (the wait mark still
        bounds that), and early keeps every turn that arrives until the swap."""
        background, rate = config.background, self.rate
        if background is None or rate is None:
            return False
        if tokens <= _floor(config, background, size):
            return False
        latency = self.expected_latency(tokens, config)
        assert latency is not None  # config.background is set
        trigger = int(config.trigger_ratio * size)
        return trigger - tokens < rate * latency + self.typical_step / 2

    def expected_latency(self, tokens: int, config: ContextConfig) -> float | None:
        """Seconds a summary started at ``tokens`` of usage is expected to take: the
        conservative estimate of :attr:`latencies` (every summary timed in this
        conversation, blocking ones too); until one was timed, the summarizer's own
        measure (:attr:`latency_model`, once :meth:`measure` has it), else
        ``assumed_latency_s``; ``None`` without ``config.background``."""
        if config.background is None:
            return None
        estimate = self.latencies.estimate(tokens)
        if estimate is None and self.latency_model is not None:
            estimate = self.latency_model.seconds(tokens)
        return config.background.assumed_latency_s if estimate is None else estimate

    def measure(self, measure: Callable[[], Awaitable[SummaryLatencyModel | None]]) -> None:
        """Ask, once and in the background, for the summarizer's measure of its latency
        (``MeasuresLatency``), while none is timed: the first summary is then started on
        it, not on ``assumed_latency_s`` (the embedded model took minutes, not 10 s). The
        agent does not wait for it; a failure leaves the assumed latency. Asked again
        only if the event loop it ran on ended before it finished."""
        if self.latency_model is not None or self.latencies.last is not None:
            return
        task = self._measuring
        if (
            task is not None
            and not task.cancelled()
            and (task.done() or task.get_loop() is asyncio.get_running_loop())
        ):
            return
        self._measuring = asyncio.get_running_loop().create_task(self._measure(measure))

    async def _measure(self, measure: Callable[[], Awaitable[SummaryLatencyModel | None]]) -> None:
        try:
            self.latency_model = await measure()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the model could not load or run: assume, as before
            logger.warning("summarizer latency not measured: %s: %s", type(exc).__name__, exc)

    def note_latency(self, seconds: float, tokens: int = 0) -> None:
        """A summary took ``seconds`` from ``tokens`` of usage (one written at the trigger,
        or a background job that times itself: see :meth:`start`)."""
        self.latencies.note(seconds, tokens)

    def defers(self, tokens: int, limit: int) -> bool:
        """Whether the agent, past the trigger, goes on without waiting: one is in flight
        and not ready, and usage plus the model's typical reply (:attr:`typical_reply`)
        stays within ``limit``. Only the reply is added to the window beside the request;
        the step's tool results come after it and are checked before the next request (a
        whole step's growth made the agent wait a step early)."""
        task = self._task
        return task is not None and not task.done() and tokens + self.typical_reply <= limit

    def peek(self) -> P | None:
        """The prepared compaction, when one is ready (not taken; it may be stale)."""
        task = self._task
        if task is None or not task.done() or task.cancelled():
            return None
        if task.get_loop() is not asyncio.get_running_loop():
            return None
        return task.result()

    async def vacant(self, key: Hashable) -> bool:
        """Whether a job may start for ``key`` (the state it would start from): none is in
        flight or waiting to be taken, and none already ran for ``key`` and failed. One
        whose event loop ended is dropped first."""
        if self._task is not None and self._task.get_loop() is not asyncio.get_running_loop():
            self._task = None  # its event loop ended (``asyncio.run`` per call): it is gone
            self._tried = None  # it never finished: the same state may be prepared again
            await self._dropped("its event loop ended")
        return self._task is None and key != self._tried

    async def start(
        self,
        key: Hashable,
        job: Callable[[], Awaitable[P | None]],
        *,
        cause: Literal["usage", "idle"] = "usage",
        after_answer: bool = False,
        tokens: int | None = None,
    ) -> None:
        """Run ``job`` in the background, unless :meth:`vacant` says no; with
        ``after_answer``, :meth:`answer` waits for the step's request to be answered.
        ``tokens``: the usage it starts from; given, the job's time once ready (less its
        wait for the answer) is noted as a summary's latency (:meth:`note_latency`);
        ``None``: the job notes its own (the engine's: only a summary's time counts, not
        a masking's)."""
        if not await self.vacant(key):
            return
        self._answer = asyncio.Event() if after_answer else None
        self._answered_after = 0.0
        self._tokens = tokens
        self._tried = key
        self._cause = cause
        self._started = self.clock.now()
        self._task = asyncio.get_running_loop().create_task(self._run(job))

    async def _run(self, job: Callable[[], Awaitable[P | None]]) -> P | None:
        await self._emit(BackgroundCompactionEvent(phase="started", cause=self._cause))
        try:
            prepared = await job()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the summarizer's or the offloader's failure
            logger.warning("background compaction failed: %s: %s", type(exc).__name__, exc)
            await self._dropped(f"failed: {type(exc).__name__}")
            return None
        if prepared is None:
            await self._dropped("nothing to fold")
            return None
        self._tried = None  # a later state may be prepared again once this is taken
        self.latency = self._age()
        if self._tokens is not None:
            self.note_latency(self.latency - self._answered_after, self._tokens)
        await self._emit(
            BackgroundCompactionEvent(phase="ready", duration_s=self.latency, cause=self._cause)
        )
        return prepared

    async def take(self, applies: Callable[[P], bool | str]) -> tuple[P, float] | None:
        """The prepared compaction and how long this waited for it, when one was started
        and it ``applies`` to the state now; ``None`` otherwise (a stale one is
        discarded: ``applies`` returns ``False``, or the reason as a string, e.g. the
        gateway's cost guard). Cancelling the caller leaves the background task running."""
        task = self._task
        if task is None:
            return None
        if task.get_loop() is not asyncio.get_running_loop():
            self._task = None
            await self._dropped("its event loop ended")
            return None
        self.answered()  # waited for now: nothing is gained by holding it back
        began = self.clock.now()
        prepared = await self.clock.wait(task)
        self._task = None
        waited = self.clock.now() - began
        if prepared is None:
            return None
        verdict = applies(prepared)
        if verdict is not True:
            reason = verdict if isinstance(verdict, str) and verdict else "the context changed"
            await self._dropped(reason, waited=waited)
            return None
        self.applied += 1
        await self._emit(
            BackgroundCompactionEvent(
                phase="applied", duration_s=self._age(), waited_s=waited, cause=self._cause
            )
        )
        return prepared, waited

    async def ready(self) -> bool:
        """Wait, without taking it, until the one in flight is ready; whether one is."""
        task = self._task
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            return False
        self.answered()
        try:
            prepared = await self.clock.wait(task)
        except asyncio.CancelledError:
            if task.cancelled():  # discarded meanwhile; the caller itself goes on
                return False
            raise
        return prepared is not None and self._task is task

    async def discard(self, reason: str = "dropped") -> None:
        """Drop what is in flight or prepared (the run ended, or the caller asks)."""
        task, self._task = self._task, None
        if task is None:
            return
        if not task.done():
            task.cancel()
            await asyncio.wait([task])  # its own outcome (cancelled) is not ours to raise
        elif task.cancelled() or task.result() is None:
            return  # already reported as discarded
        await self._dropped(reason)

    async def _dropped(self, reason: str, *, waited: float = 0.0) -> None:
        self.discarded += 1
        await self._emit(
            BackgroundCompactionEvent(
                phase="discarded",
                duration_s=self._age(),
                waited_s=waited,
                reason=reason,
                cause=self._cause,
            )
        )

    def _age(self) -> float:
        return self.clock.now() - self._started
