"""Executing a compaction plan: the tiers, in order, and what they hand back to commit.

The engine runs its tiers over a :class:`~._plan.CompactionPlan` until one acts:
:class:`MaskTier` (old tool results replaced by placeholders, no model call),
:class:`CutKeptTier` (nothing can be folded: the newest turn's results are cut instead)
and :class:`SummaryTier` (fold into the summary layer, then escalate if still over). A tier
does the I/O (summarize, offload) and returns an :class:`Outcome`; it never touches the
engine's state, which the engine swaps at one point. A new tier is a new object in the
engine's list, not a branch in one long function.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from .._exceptions import CompressionError, StructuredOutputError
from .._logging import logger
from ..message import Msg, ToolResultBlock
from ..token import TokenCounter
from ._config import ContextConfig
from ._layer import SummaryLayer, summary_budget
from ._ledger import ArtifactLedger
from ._plan import CompactionPlan, SummaryPlan, protected_start
from ._summarizer import Summarizer, SummaryRequest, SummaryResult
from ._summary import compose_summary, fallback_summary, part_fields
from ._trim import Escalation, ToolResultTruncator, escalate
from ._types import CompressionEvent, ContextUsage, TruncationEvent

__all__ = [
    "CompactionTier",
    "CutKeptTier",
    "Execution",
    "MaskTier",
    "Outcome",
    "SummaryTier",
    "default_tiers",
]


@dataclass
class Outcome:
    """What a tier did, for the engine to commit: the first ``consumed`` messages of the
    live context become ``context``; ``removed`` of them left the front for good."""

    method: Literal["summary", "truncation", "masking", "cut"]
    context: list[Msg]
    consumed: int
    layer: SummaryLayer | None = None
    """The new summary layer (``None``: the one in place stays)."""
    removed: int = 0
    truncations: list[TruncationEvent] = field(default_factory=list)
    ref: str | None = None
    attempts: int = 0
    error: str | None = None

    def event(
        self,
        plan: CompactionPlan,
        *,
        tokens_after: int,
        kept: int,
        tokens_before: int | None = None,
    ) -> CompressionEvent:
        """The event reporting this outcome of ``plan``, once committed; ``tokens_before``
        is the usage it was committed at, when that is not the plan's (prepared early)."""
        assert self.method != "cut"
        return CompressionEvent(
            trigger=plan.request.trigger,
            method=self.method,
            tokens_before=plan.usage.total if tokens_before is None else tokens_before,
            tokens_after=tokens_after,
            messages_removed=self.removed,
            messages_kept=kept,
            duration_s=time.monotonic() - plan.started,
            offload_ref=self.ref,
            attempts=self.attempts,
            error=self.error,
        )


@dataclass(frozen=True)
class Execution:
    """What tiers may use: counting, the summarizer, offload, the live context."""

    counter: TokenCounter
    context_size: int
    summarizer: Summarizer
    offload_result: Callable[[ToolResultBlock], Awaitable[str | None]]
    offload_context: Callable[[list[Msg]], Awaitable[str | None]]
    live: Callable[[], Sequence[Msg]]
    """The engine's context now: messages may arrive while a tier awaits."""
    readback: bool = True
    """Whether the model can read offloaded content back (what the notes may tell it)."""

    def truncator(self, config: ContextConfig) -> ToolResultTruncator:
        return ToolResultTruncator(
            self.counter,
            limit=config.tool_result_limit,
            keep=config.truncation_keep,
            readback=self.readback,
            redact=config.redact,
        )

    async def escalate(
        self,
        kept: list[Msg],
        *,
        summary_tokens: int,
        usage: ContextUsage,
        config: ContextConfig,
        keep_from: int,
    ) -> Escalation:
        return await escalate(
            kept,
            summary_tokens=summary_tokens,
            fixed=usage.system + usage.tools + usage.overhead,
            target=int(config.trigger_ratio * self.context_size),
            counter=self.counter,
            truncator=self.truncator(config),
            offload_result=self.offload_result,
            offload_context=self.offload_context,
            keep_from=keep_from,
        )


class CompactionTier(Protocol):
    """One way of making the context smaller; ``None`` when it does not apply."""

    async def run(self, plan: CompactionPlan, run: Execution) -> Outcome | None: ...


class MaskTier:
    """Observation masking, when the plan found it enough."""

    async def run(self, plan: CompactionPlan, run: Execution) -> Outcome | None:
        if plan.masking is None:
            return None
        refs = await plan.masking.offload(run.offload_result)
        context = plan.masking.apply(plan.snapshot, refs, readback=run.readback)
        return Outcome("masking", context, consumed=len(plan.snapshot))


class CutKeptTier:
    """Nothing can be folded (only the newest turn is left): cut its oversized tool
    results to fit the trigger instead, if that helps."""

    async def run(self, plan: CompactionPlan, run: Execution) -> Outcome | None:
        if plan.split != 0:
            return None
        usage = plan.usage
        escalation = await run.escalate(
            list(plan.snapshot),
            summary_tokens=usage.summary,
            usage=usage,
            config=plan.request.config,
            keep_from=0,
        )
        if not escalation.truncations:
            logger.warning(
                "context over its threshold (%d tokens) but nothing can be compressed: the "
                "recent messages already fit reserve_ratio or are the newest turn",
                usage.total,
            )
            return Outcome("cut", list(plan.snapshot), consumed=len(plan.snapshot))
        return Outcome(
            "cut",
            escalation.context,
            consumed=len(plan.snapshot),
            truncations=escalation.truncations,
        )


class SummaryTier:
    """Fold the split into the summary layer (append a part or rewrite it; the fallback
    note when the summarizer fails), then escalate if the result is still over."""

    async def run(self, plan: CompactionPlan, run: Execution) -> Outcome | None:
        summary_plan = plan.summary
        if summary_plan is None:
            return None
        config, usage, snapshot, k = plan.request.config, plan.usage, plan.snapshot, plan.split
        result, error = await _ask(run.summarizer, summary_plan.request, plan)
        # Messages may have been appended while the summary was written; keep them.
        appended = list(run.live()[len(snapshot) :])
        compressed = plan.folded
        ref = await run.offload_context(compressed)
        layer: SummaryLayer | None = None
        previous = plan.previous
        if result is not None and summary_plan.part_ledgers is not None and previous is not None:
            layer = _appended(result, previous, summary_plan, ref, len(compressed), config, run)
            kept_now = [*snapshot[k:], *appended]
            if layer is not None and _crowds_out(layer, kept_now, usage, config, run.counter):
                layer = None
            if layer is None:
                # The part would have to be cut to fit beside the summary in place, or the
                # longer layer would push kept messages out unsummarized: the newest facts
                # matter most, so the summary is rewritten instead.
                result, error = await _ask(run.summarizer, summary_plan.rewrite, plan)
        if layer is None:
            layer = _rewritten(
                result, error, previous, summary_plan, ref, len(compressed), config, run
            )
        kept = [*snapshot[k:], *appended]
        kept_tokens = [run.counter.count_message(m) for m in kept]
        request = plan.request_msg  # the current request stays ahead of what is kept
        escalation = await run.escalate(
            kept,
            summary_tokens=layer.tokens(run.counter)
            + sum(run.counter.count_message(m) for m in request),
            usage=usage,
            config=config,
            keep_from=protected_start(kept, kept_tokens, usage, config, run.counter),
        )
        if escalation.note is not None:
            layer = layer.with_note(escalation.note)
        count = run.counter.count_message
        over = (
            usage.system
            + usage.tools
            + usage.overhead
            + layer.tokens(run.counter)
            + sum(count(m) for m in (*request, *escalation.context))
            - run.context_size
        )
        if over > 0:  # only the summary can still give way
            layer = layer.cut_by(run.counter, over)
        return Outcome(
            "summary" if result is not None else "truncation",
            [*request, *escalation.context],
            consumed=len(snapshot) + len(appended),
            layer=layer,
            removed=k - len(request) + escalation.dropped,
            truncations=escalation.truncations,
            ref=ref,
            attempts=result.attempts
            if result is not None
            else _attempts(error, summary_plan.request),
            error=None if error is None else f"{type(error).__name__}: {error}",
        )


def default_tiers() -> tuple[CompactionTier, ...]:
    """Masking, then the newest-turn cut, then the summary."""
    return (MaskTier(), CutKeptTier(), SummaryTier())


async def _ask(
    summarizer: Summarizer, request: SummaryRequest, plan: CompactionPlan
) -> tuple[SummaryResult | None, Exception | None]:
    """The summarizer's answer, or its error when a fallback may follow; raises
    :class:`CompressionError` (the state unchanged) when none may."""
    trigger, config = plan.request.trigger, plan.request.config
    try:
        return await summarizer.summarize(request), None
    except Exception as exc:  # the summarizer's failure, whatever it was
        if trigger == "tool" or not config.compression_fallback_to_truncation:
            advice = (
                "the agent can keep working and try again later"
                if trigger == "tool"
                else "enable compression_fallback_to_truncation to drop the oldest "
                "messages instead, or check the summarizer model"
            )
            attempts = _attempts(exc, request)
            raise CompressionError(
                f"summary generation failed after {attempts} attempt"
                f"{'' if attempts == 1 else 's'} ({type(exc).__name__}: {exc}); the "
                f"context is unchanged: {advice}"
            ) from exc
        return None, exc


def _attempts(error: BaseException | None, request: SummaryRequest) -> int:
    """Attempts a failed summarizer made: the count a structured-output error carries;
    any other error ends the last of the attempts it was allowed."""
    if isinstance(error, StructuredOutputError) and error.attempts:
        return error.attempts
    return request.max_attempts


def _crowds_out(
    layer: SummaryLayer,
    kept: Sequence[Msg],
    usage: ContextUsage,
    config: ContextConfig,
    counter: TokenCounter,
) -> bool:
    """Whether ``layer`` and the ``kept`` messages would be over the trigger, so that
    escalation would have to cut or drop kept messages."""
    fixed = usage.system + usage.tools + usage.overhead
    total = fixed + layer.tokens(counter)
    total += sum(counter.count_message(m) for m in kept)
    return total > int(config.trigger_ratio * usage.context_size)


def _appended(
    result: SummaryResult,
    previous: SummaryLayer,
    plan: SummaryPlan,
    ref: str | None,
    compressed: int,
    config: ContextConfig,
    run: Execution,
) -> SummaryLayer | None:
    """``previous`` unchanged, then a part for what this compaction folded; ``None`` when
    the part does not fit, uncut, in the room the layer leaves."""
    assert plan.part is not None
    assert plan.part_ledgers is not None
    shown, ledger = plan.part_ledgers
    fields, carried = part_fields(result.fields, previous.fields)
    # Rendered uncut (no budget binds), then checked against the room the layer leaves.
    text = compose_summary(
        fields,
        config=config,
        counter=run.counter,
        size=run.context_size,
        ledger=shown,
        ref=ref,
        compressed=compressed,
        uncovered=result.uncovered,
        cut=result.cut,
        template=config.layer.update_template,
        budget=sys.maxsize,
        requests=plan.part_requests,
        readback=run.readback,
    )
    if run.counter.count_text(text) > plan.part.text:
        return None
    return previous.appended(
        text, ledger=ledger, fields=carried, ref=ref, requests=plan.part_requests
    )


_MIN_GROWTH = 32
"""Tokens of room left under the summary's budget below which the ledger is not grown."""


def _grown(
    ledger: ArtifactLedger,
    text: str,
    result: SummaryResult,
    plan: SummaryPlan,
    ref: str | None,
    compressed: int,
    config: ContextConfig,
    run: Execution,
) -> tuple[ArtifactLedger, str]:
    """The ledger and text of a rewritten summary, the ledger grown into the room the
    summarizer's fields leave under the summary's budget: a fact the ledger drops is lost
    from every later request, while the room is sent empty. The fields come first: the
    grown text is taken only when the fields fit in it uncut."""
    counter, budget = run.counter, summary_budget(config, run.context_size)
    room = budget - counter.count_text(text)
    if plan.pool is None or room < _MIN_GROWTH:
        return ledger, text
    stated = "\n".join(plan.requests)
    grown = plan.pool.select(counter, counter.count_text(ledger.render()) + room, stated)
    if grown == ledger:
        return ledger, text
    longer = compose_summary(
        result.fields,
        config=config,
        counter=counter,
        size=run.context_size,
        ledger=grown,
        ref=ref,
        compressed=compressed,
        uncovered=result.uncovered,
        cut=result.cut,
        budget=sys.maxsize,  # uncut: taken only if it fits as it is
        requests=plan.requests,
        readback=run.readback,
    )
    if counter.count_text(longer) > budget:
        return ledger, text
    return grown, longer


def _rewritten(
    result: SummaryResult | None,
    error: Exception | None,
    previous: SummaryLayer | None,
    plan: SummaryPlan,
    ref: str | None,
    compressed: int,
    config: ContextConfig,
    run: Execution,
) -> SummaryLayer:
    """One part for the whole layer: the summarizer's fields, or (when it failed,
    ``error``) the fallback note with the previous summary kept below it."""
    ledger, requests = plan.ledger, plan.requests
    refs = (*(previous.refs if previous is not None else ()), *((ref,) if ref else ()))
    if result is not None:
        text = compose_summary(
            result.fields,
            config=config,
            counter=run.counter,
            size=run.context_size,
            ledger=ledger,
            ref=ref,
            compressed=compressed,
            uncovered=result.uncovered,
            cut=result.cut,
            requests=requests,
            readback=run.readback,
        )
        ledger, text = _grown(ledger, text, result, plan, ref, compressed, config, run)
        return SummaryLayer(
            parts=(text,), ledger=ledger, fields=result.fields, refs=refs, requests=requests
        )
    assert error is not None
    text = fallback_summary(
        removed=compressed,
        ref=ref,
        error=error,
        previous="\n".join(previous.parts) if previous is not None else None,
        ledger=ledger,
        counter=run.counter,
        budget=summary_budget(config, run.context_size),
        requests=requests,
        readback=run.readback,
    )
    return SummaryLayer(parts=(text,), ledger=ledger, fields=None, refs=refs, requests=requests)
