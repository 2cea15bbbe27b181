"""The engine's steps for compaction prepared in the background (``ContextConfig.background``).

:class:`~._prefetch.Prefetch` holds the one compaction in flight and decides when one is
due; these steps read and change the engine's state for it, each under the engine's lock
(its caller holds it): before a step, swap one in early or start one, and say whether the
step goes on from the full context; between turns, start one and swap it in. What they
commit goes through the engine's one commit point.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Literal

from ..message import ToolSpec
from ._latency import MeasuresLatency, SummaryLatencyModel
from ._plan import CompactionPlan, plan_compaction
from ._prefetch import Prepared
from ._summarizer import SummaryRequest
from ._types import (
    CompressionEvent,
    CompressionRequest,
    CompressionTrigger,
    ContextUsage,
    ModelInput,
)

if TYPE_CHECKING:
    from ._engine import ContextEngine

__all__ = ["Ahead"]


class Ahead:
    """The background compaction's steps of one engine (see the module)."""

    def __init__(self, engine: ContextEngine) -> None:
        self._engine = engine

    async def before_step(
        self, system_prompt: str, tools: Sequence[ToolSpec], usage: ContextUsage
    ) -> ContextUsage | None:
        """Before the step: swap in a prepared compaction as soon as it is ready, below the
        trigger too, when it frees at least ``reserve_ratio`` of the window and a typical
        step (else it would break the cache for little); start one when due (ready by the
        trigger or, at the least, by the wait mark), or past the trigger when none is in
        flight (a step jumped past it). The usage the step goes on from, or ``None`` when
        it must compact now.

        Why not hold a ready one until the trigger: the swap keeps every turn that arrived
        after its snapshot, so each step held is a turn kept beside the summary that a
        blocking compaction would have folded (written once more, read at every step
        until the next compaction, which it brings closer); swapping a step or two early
        costs less (on the SWE-bench replays against blocking: held, +2.9%; swapped when
        ready, +2.6%; that and started to be ready by the trigger, +1.1%)."""
        engine = self._engine
        config, size = engine.config, engine.context_size
        prefetch, trigger = engine.background, engine._accounts.trigger(config)
        deadline = prefetch.deadline(config, size)
        prefetch.observe(usage.total)
        self._measure(system_prompt, tools)
        prepared = prefetch.peek()
        after = None
        if prepared is not None and prepared.applies_to(engine._layer, engine._context):
            after = self._usage_after(prepared, usage)
        worth = max(int(config.reserve_ratio * size), prefetch.typical_step)
        if usage.total <= trigger and after is not None and usage.total - after >= worth:
            taken = await prefetch.take(lambda p: p.applies_to(engine._layer, engine._context))
            if taken is not None:
                plan, outcome = taken[0].plan, taken[0].outcome
                await engine._commit(plan, outcome, system_prompt, tools, prepared=True)
                usage = engine.usage(system_prompt, tools)
        over = usage.total > trigger
        due = prefetch.due(usage.total, config, size) or prefetch.due_at_trigger(
            usage.total, config, size
        )
        if (over and not prefetch.busy) or (not over and due):
            key = (engine._start, id(engine._layer), engine.compressions)
            prefix = engine._input(system_prompt, tools, usage)
            await self._start(key, prefix, "auto", seen=not over)
        return usage if not over or prefetch.defers(usage.total, deadline) else None

    def _measure(self, system_prompt: str, tools: Sequence[ToolSpec]) -> None:
        """Once the context has grown over two steps (a rate is known, and the sample holds
        what the agent reads, not only its instructions), ask a summarizer that can
        measure its latency to do so (:meth:`Prefetch.measure`), on a summary request of
        the conversation as it is then (never sent)."""
        engine = self._engine
        summarizer = engine.summarizer
        if engine.background.rate is None or not isinstance(summarizer, MeasuresLatency):
            return

        def measure() -> Awaitable[SummaryLatencyModel | None]:
            config = engine.config
            usage = engine.usage(system_prompt, tools)
            sample = SummaryRequest(
                messages=tuple(engine._context),
                previous=engine.summary,
                instructions=config.compression_prompt,
                hints=(),
                schema=config.summary_schema,
                prefix=engine._input(system_prompt, tools, usage),
            )
            tokens = sum(engine.counter.count_message(m) for m in sample.messages)
            return summarizer.measure_latency(sample, tokens)

        engine.background.measure(measure)

    async def between_turns(
        self, system_prompt: str, tools: Sequence[ToolSpec], growth: int
    ) -> bool:
        """Start one now if the next turn, growing the context by ``growth`` tokens, would
        cross the trigger; whether one is in flight."""
        engine = self._engine
        usage = engine.usage(system_prompt, tools)
        if usage.total + growth > engine._accounts.trigger(engine.config):
            prefix = engine._input(system_prompt, tools, usage)
            key = ("idle", engine._start, id(engine._layer), engine.compressions)
            await self._start(key, prefix, "idle")
        return engine.background.busy

    async def apply(self, system_prompt: str, tools: Sequence[ToolSpec]) -> CompressionEvent | None:
        """Swap in the prepared one now, if it is ready and still applies."""
        engine = self._engine
        if not engine.background.finished:
            return None
        taken = await engine.background.take(lambda p: p.applies_to(engine._layer, engine._context))
        if taken is None:
            return None
        plan, outcome = taken[0].plan, taken[0].outcome
        return await engine._commit(plan, outcome, system_prompt, tools, prepared=True)

    def _usage_after(self, prepared: Prepared, usage: ContextUsage) -> int:
        """The usage once ``prepared`` is swapped in (it applies to the state now)."""
        engine = self._engine
        outcome, count = prepared.outcome, engine.counter.count_message
        layer = outcome.layer.msg if outcome.layer is not None else engine.summary
        return (
            usage.total
            - usage.summary
            + engine._accounts.summary_tokens(layer)
            - sum(count(m) for m in engine._context[: outcome.consumed])
            + sum(count(m) for m in outcome.context)
        )

    async def _start(
        self,
        key: tuple[object, ...],
        prefix: ModelInput,
        trigger: CompressionTrigger,
        *,
        seen: bool = False,
    ) -> None:
        """Plan a compaction of the state now and run its tiers in the background, unless
        one is in flight (or ran for ``key``) or the plan folds nothing. Planned here,
        under the lock, from the snapshot and the request last sent.

        ``seen``: started below the trigger, so the step goes on from the full context and
        the swap comes at a later step: the snapshot's newest turn is folded too (the
        model reads it first; kept, it would sit beside everything that arrives until the
        swap, one turn more than a blocking compaction keeps). Past the trigger a blocking
        compaction would keep it, and so does this one. Its summary then extends the
        request of this step, which the provider caches only once it is answered: the
        summary is asked after the model's reply (sent beside it, both calls would write
        that prefix) when there is time for it (``Prefetch.has_time``)."""
        engine = self._engine
        if not await engine.background.vacant(key):
            return
        config = engine.config.model_copy(update={"compression_fallback_to_truncation": False})
        request = CompressionRequest(trigger, config, threshold_ratio=engine.config.reserve_ratio)
        # Swapped in at the trigger, it keeps what arrives until then beside the snapshot's
        # own kept part; an idle one may be swapped in with nothing arrived.
        arriving = 0
        if trigger == "auto":
            arriving = max(0, engine._accounts.trigger(engine.config) - prefix.usage.total)
        plan = plan_compaction(
            request,
            usage=prefix.usage,
            context=engine._context,
            previous=engine._layer,
            last_sent=engine._last_sent,
            prefix=prefix,
            redact=config.redact,
            counter=engine.counter,
            started=time.monotonic(),
            arriving=arriving,
            seen=seen,
        )
        # A split past nothing but the kept request folds nothing: a summary of nothing
        # would be swapped in, counted, and followed by a compaction at the trigger.
        if plan is None or (plan.split > 0 and plan.masking is None and not plan.folded):
            return
        cause: Literal["usage", "idle"] = "idle" if trigger == "idle" else "usage"
        job = functools.partial(self._job, plan)
        # Its summary extends this step's request: it is sent once that one is answered.
        after = (
            plan.unsent
            and trigger == "auto"
            and engine.background.has_time(prefix.usage.total, engine.config, engine.context_size)
        )
        # tokens=None: the job times its own summary (``_run_tiers``), not a masking.
        await engine.background.start(key, job, cause=cause, after_answer=after, tokens=None)

    async def _job(self, plan: CompactionPlan) -> Prepared | None:
        """The background job: ``plan`` executed, not committed; a failed summary fails
        it (whether to drop messages instead is decided at the trigger). Its summary's
        time, from after the wait for the step's answer, is noted as a latency."""
        engine = self._engine
        await engine.background.answer()
        outcome = await engine._run_tiers(plan)
        if outcome is None:
            return None
        return Prepared(plan, outcome, tuple(engine._context[: outcome.consumed]))
