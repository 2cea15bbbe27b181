"""ContextEngine: owns one session's summary layer and context and keeps them in the window.

The engine holds the state and commits changes; the decisions live in small parts it runs
in order: the image limit (:mod:`._images`), the accounts (:mod:`._accounting`), the
compaction planner (:mod:`._plan`), the tiers that execute a plan (:mod:`._compaction`:
masking, the newest-turn cut, the summary with escalation) and the usage note
(:mod:`._hint`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from .._logging import logger
from ..message import HintBlock, Msg, ToolSpec
from ..token import TokenCounter
from ..workspace import Offloader
from ._accounting import Accounts
from ._ahead import Ahead
from ._clock import Clock
from ._compaction import CompactionTier, Execution, Outcome, default_tiers
from ._config import MIN_TOOL_RESULT_LIMIT, ContextConfig
from ._extractive import ExtractiveSummarizer
from ._hint import HINT_NAME, usage_hint
from ._images import ImageLimit
from ._layer import SummaryLayer
from ._offload import SessionOffload
from ._plan import CompactionPlan, plan_compaction
from ._prefetch import Prefetch, Prepared
from ._state import EngineState
from ._summarizer import Summarizer
from ._trim import ToolResultTruncator, truncate_results
from ._types import (
    CompressionEvent,
    CompressionHook,
    CompressionRequest,
    CompressionTrigger,
    ContextEvent,
    ContextEventHandler,
    ContextUsage,
    ModelInput,
    UsageHintEvent,
)

__all__ = ["HINT_NAME", "ContextEngine"]

_CALL_ROOM = 64
"""Tokens left beside a fresh result for the call that asked for it."""


class ContextEngine:
    """The summary and context of one session, and the policies that keep them in budget.

    Feed it messages (:meth:`append`, :meth:`add_tool_results` for tool results, which it
    truncates), ask it for the next model input (:meth:`prepare`, which compresses first
    when usage is over the trigger) and send that; :meth:`compress` compresses on demand.
    It needs a token ``counter`` and the ``context_size`` it counts against; a
    :class:`~contextfold.context.Summarizer` (default: :class:`ExtractiveSummarizer`, no
    model) and an :class:`~contextfold.workspace.Offloader` (default: none) are optional.
    Every change is reported to ``on_event``; every compression, automatic ones included,
    runs through ``compression_hook`` when one is given. ``readback=False`` says the model
    has no tools to read offloaded content back, so no note in its input names them.

    Token counts are cached per message and the running total is kept incrementally, so a
    step tokenizes only new messages. Changes are transactional: a compression is planned
    from a snapshot, executed by the first tier that applies (in the background, before the
    trigger, with ``ContextConfig.background``), and committed at one point; an error or
    cancellation leaves the state unchanged, and messages appended meanwhile are kept.
    """

    def __init__(
        self,
        *,
        counter: TokenCounter,
        context_size: int,
        summarizer: Summarizer | None = None,
        config: ContextConfig | None = None,
        offloader: Offloader | None = None,
        session_id: str = "default",
        on_event: ContextEventHandler | None = None,
        compression_hook: CompressionHook | None = None,
        tiers: Sequence[CompactionTier] | None = None,
        readback: bool = True,
        clock: Clock | None = None,
    ) -> None:
        if context_size <= 0:
            raise ValueError(f"context_size must be positive, got {context_size}")
        self.counter = counter
        self.context_size = context_size
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer()
        self.config = config or ContextConfig()
        self.offloader = offloader
        self.session_id = session_id
        self.on_event = on_event
        self.compression_hook = compression_hook
        self.readback = readback
        """Whether the model has tools to read offloaded content back (``Read``, ``Grep``,
        ``Glob``, ``Search``); without, no note the engine writes names them: a truncated
        result ends with the marker that names no file, the summary and placeholders say
        the content was saved outside the conversation or omitted."""
        self.tiers: tuple[CompactionTier, ...] = tuple(tiers or default_tiers())
        """How a compaction makes the context smaller, tried in order until one acts."""
        self.compressions = 0
        """Compressions performed so far (summary, masking or fallback)."""
        self._layer: SummaryLayer | None = None
        self._context: list[Msg] = []
        self._context_tokens = 0
        self._start = 0  # absolute position of _context[0] in everything ever appended
        self._images = ImageLimit()
        self._accounts = Accounts(counter, context_size)
        self._offload = SessionOffload(self)
        self._lock = asyncio.Lock()
        self._last_sent: ModelInput | None = None  # the last input built (without a note)
        self.background = Prefetch[Prepared](self._emit, clock)
        """The compaction prepared in the background (``ContextConfig.background``), timed
        by ``clock`` (the system's; a replay passes a simulated one)."""
        self._ahead = Ahead(self)

    @property
    def summary(self) -> Msg | None:
        """The summary message, once a compression happened."""
        return self._layer.msg if self._layer is not None else None

    @property
    def summary_layer(self) -> SummaryLayer | None:
        """The summary layer, once a compression happened."""
        return self._layer

    @property
    def context(self) -> tuple[Msg, ...]:
        """Recent, uncompressed messages."""
        return tuple(self._context)

    @property
    def last(self) -> Msg | None:
        """The most recent message of the context (without copying it)."""
        return self._context[-1] if self._context else None

    @property
    def context_tokens(self) -> int:
        """Tokens of the stored context (the running total)."""
        return self._context_tokens

    def state(self) -> EngineState:
        """The summary layer, the kept context and what was offloaded, as one value."""
        offloads = dict(self._offload.known)
        return EngineState(self._layer, tuple(self._context), offloads)

    def load(
        self,
        *,
        summary: Msg | SummaryLayer | None,
        context: Sequence[Msg],
        offloads: Mapping[str, str] | None = None,
    ) -> None:
        """Replace the state (a session restored, or :meth:`state` read back); a summary
        message is read through :class:`SummaryLayer`; ``offloads`` are those done before
        (``None`` keeps the engine's)."""
        if offloads is not None:
            self._offload.known = dict(offloads)
        self._layer = SummaryLayer.from_msg(summary) if isinstance(summary, Msg) else summary
        self._context = []
        self._context_tokens = 0
        self._start = 0
        self._images.clear()
        for msg in context:
            self.append(msg)

    def append(self, msg: Msg) -> None:
        """Add a message to the context (not truncated; see :meth:`add_tool_results`)."""
        self._images.note(self._start + len(self._context), msg)
        self._context.append(msg)
        tokens = self.counter.count_message(msg)
        self._context_tokens += tokens
        if msg.role == "assistant":
            self.background.observe_reply(tokens)

    async def add_tool_results(self, msg: Msg) -> Msg:
        """Add a message of tool results, truncating oversized ones; return what was stored.

        A result over ``tool_result_limit`` tokens keeps its head and tail (or head, per
        ``truncation_keep``) ending with the truncation marker, all within the limit. With
        an offloader the *whole* original is offloaded and the marker names the reference,
        except for read-back results (:func:`~contextfold.message.is_readback`): their
        content is already in the workspace, so they get the marker without a path.

        Atomic under cancellation: every offload is awaited first and the message is then
        stored in one synchronous step, so a cancelled call stored nothing (if it was
        cancelled before that step) or the whole message (if cancelled while events were
        being emitted); :attr:`last` tells which.
        """
        truncator = ToolResultTruncator(
            self.counter,
            limit=self.result_limit(),
            keep=self.config.truncation_keep,
            readback=self.readback,
            redact=self.config.redact,
        )
        stored, events = await truncate_results(msg, truncator, self._offload.redacted_result)
        self.append(stored)
        for event in events:
            await self._emit(event)
        return stored

    async def prepare(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec] = (),
        *,
        task_in_progress: bool = False,
    ) -> ModelInput:
        """Build the model input for the next reasoning step, compressing first if needed.

        Applies the image limit, then compresses at most once if the input is over
        ``trigger_ratio x context_size`` (compress-context.zh, section 自动压缩, Automatic
        compression), then adds the context-usage note when usage is past
        ``trigger_ratio - context_buffer_ratio`` and no task is in progress (section 自主压缩,
        Agent-initiated compression). The note is a trailing user message in
        ``ModelInput.context`` only, never stored, so the history and the cached prompt
        prefix stay stable. Only with the ``CompressContext`` tool enabled does it invite
        the model to call it.

        Raises :class:`CompressionError` only when summary generation failed and
        ``compression_fallback_to_truncation`` is off; the state is then unchanged.
        """
        async with self._lock:
            await self._limit_images()
            usage = self.usage(system_prompt, tools)
            if self.config.background is not None:
                going = await self._ahead.before_step(system_prompt, tools, usage)
                if going is not None:
                    return await self._build(system_prompt, tools, task_in_progress, going)
            elif usage.total <= self._accounts.trigger(self.config):
                return await self._build(system_prompt, tools, task_in_progress, usage)
            prefix = self._input(system_prompt, tools, usage)
            request = CompressionRequest(trigger="auto", config=self.config)
            await self._run_compression(system_prompt, tools, request, prefix=prefix)
            if self.config.background is not None:  # the next one may be due at once
                now = self.usage(system_prompt, tools)
                await self._ahead.before_step(system_prompt, tools, now)
            return await self._build(system_prompt, tools, task_in_progress)

    async def compress(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec] = (),
        *,
        config: ContextConfig | None = None,
        instructions: HintBlock | None = None,
        force: bool = False,
        threshold_ratio: float | None = None,
        trigger: CompressionTrigger = "manual",
    ) -> CompressionEvent | None:
        """Compress now if usage is over the threshold (or ``force``); None if nothing done.

        ``config`` overrides the engine's for this call; ``threshold_ratio`` defaults to
        its ``trigger_ratio`` (the ``CompressContext`` tool passes ``config.hint_ratio``).
        With ``trigger="tool"`` a failed summary never falls back to truncation: it raises
        :class:`CompressionError` with the context unchanged, for the tool to report. After
        a ``ContextWindowExceededError`` from the provider, call it once with
        ``force=True, trigger="overflow"`` and :meth:`prepare` again.
        """
        request = CompressionRequest(
            trigger=trigger,
            config=config or self.config,
            instructions=instructions,
            force=force,
            threshold_ratio=threshold_ratio,
        )
        async with self._lock:
            prefix = self._input(system_prompt, tools, self.usage(system_prompt, tools))
            return await self._run_compression(system_prompt, tools, request, prefix=prefix)

    async def prepare_ahead(
        self, system_prompt: str, tools: Sequence[ToolSpec] = (), *, growth: int
    ) -> bool:
        """Between turns: start preparing a compaction now if the next turn, growing the
        context by ``growth`` tokens, would cross the trigger; whether one is in flight.
        Commit it with :meth:`apply_prepared`, or let the trigger take it."""
        async with self._lock:
            return await self._ahead.between_turns(system_prompt, tools, growth)

    async def apply_prepared(
        self, system_prompt: str, tools: Sequence[ToolSpec] = ()
    ) -> CompressionEvent | None:
        """Swap in the compaction prepared in the background now, if it is ready (see
        ``background.ready()``) and still applies; ``None`` otherwise."""
        async with self._lock:
            return await self._ahead.apply(system_prompt, tools)

    def usage(self, system_prompt: str, tools: Sequence[ToolSpec] = ()) -> ContextUsage:
        """Token usage of the stored state with this system prompt and tools."""
        return self._accounts.usage(
            system_prompt,
            tools,
            summary=self.summary,
            context=self._context,
            context_tokens=self._context_tokens,
        )

    def result_limit(self) -> int:
        """The largest tool result kept as it arrives: ``tool_result_limit``, bounded by
        what ``trigger_ratio x context_size`` leaves after the system prompt, the tools and
        the summary of the last step (never below ``MIN_TOOL_RESULT_LIMIT``)."""
        room = (
            self._accounts.trigger(self.config)
            - self._accounts.fixed
            - self._accounts.summary_tokens(self.summary)
        )
        return max(MIN_TOOL_RESULT_LIMIT, min(self.config.tool_result_limit, room - _CALL_ROOM))

    # -- model input --------------------------------------------------------------

    def _input(
        self, system_prompt: str, tools: Sequence[ToolSpec], usage: ContextUsage
    ) -> ModelInput:
        system = self._accounts.system(system_prompt)[0]
        return ModelInput(system, self.summary, tuple(self._context), tuple(tools), usage)

    async def _build(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        task_in_progress: bool,
        usage: ContextUsage | None = None,
    ) -> ModelInput:
        """The model input; ``usage`` is the state's, when the caller just computed it."""
        if usage is None:
            usage = self.usage(system_prompt, tools)
        model_input = self._input(system_prompt, tools, usage)
        self._last_sent = model_input
        if task_in_progress or usage.total <= self.config.hint_ratio * self.context_size:
            return model_input
        hint = usage_hint(
            tokens=usage.total,
            context_size=self.context_size,
            trigger_ratio=self.config.trigger_ratio,
            tool_enabled=self.config.compression_tool_enabled,
            readback=self.readback,
        )
        hint_tokens = self.counter.count_message(hint)
        if usage.total + hint_tokens > self.context_size:
            return model_input  # advice only: it never pushes the request past the window
        usage = replace(usage, context=usage.context + hint_tokens)
        await self._emit(UsageHintEvent(tokens=usage.total, context_size=self.context_size))
        return replace(model_input, context=(*model_input.context, hint), usage=usage)

    async def _limit_images(self) -> None:
        before = self._context_tokens

        def adjust(delta: int) -> None:
            self._context_tokens += delta

        event = await self._images.apply(
            self._context,
            start=self._start,
            limit=self.config.max_image_num,
            counter=self.counter,
            persist=self._offload.image,
            adjust=adjust,
            readback=self.readback,
        )
        if event is not None:
            event.tokens_before, event.tokens_after = before, self._context_tokens
            await self._emit(event)

    # -- compaction -----------------------------------------------------------------

    async def _run_compression(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        request: CompressionRequest,
        *,
        prefix: ModelInput | None,
    ) -> CompressionEvent | None:
        async def core(current: CompressionRequest) -> CompressionEvent | None:
            return await self._compact(system_prompt, tools, current, prefix=prefix)

        if self.compression_hook is None:
            return await core(request)
        return await self.compression_hook(request, core)

    async def _compact(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        request: CompressionRequest,
        *,
        prefix: ModelInput | None,
    ) -> CompressionEvent | None:
        """Commit the compaction prepared in the background, if it applies; else (or if
        still over the trigger) plan, let the first tier that applies execute, commit."""
        if request.trigger == "auto" and self.background.busy:
            taken = await self.background.take(lambda p: p.applies_to(self._layer, self._context))
            if taken is not None:
                event = await self._commit(
                    taken[0].plan, taken[0].outcome, system_prompt, tools, prepared=True
                )
                if self.usage(system_prompt, tools).total <= self._accounts.trigger(self.config):
                    return event
                prefix = None  # still over: compact again, from the state as it is now
        plan = self._plan(request, self.usage(system_prompt, tools), prefix)
        outcome = None if plan is None else await self._run_tiers(plan)
        if plan is None or outcome is None:
            return None
        return await self._commit(plan, outcome, system_prompt, tools)

    def _plan(
        self, request: CompressionRequest, usage: ContextUsage, prefix: ModelInput | None
    ) -> CompactionPlan | None:
        """The plan of the state now (see :func:`plan_compaction`)."""
        return plan_compaction(
            request,
            usage=usage,
            context=self._context,
            previous=self._layer,
            last_sent=self._last_sent,
            prefix=prefix,
            redact=self.config.redact,
            counter=self.counter,
            started=time.monotonic(),
        )

    async def _run_tiers(self, plan: CompactionPlan) -> Outcome | None:
        """``plan`` executed by the first tier that applies; a summary's time (blocking ones
        too: they tell the next prepared one's latency) noted for the background's schedule."""
        execution = Execution(
            counter=self.counter,
            context_size=self.context_size,
            summarizer=self.summarizer,
            offload_result=self._offload.result,
            offload_context=self._offload.context,
            live=lambda: self._context,
            readback=self.readback,
        )
        began = self.background.clock.now()
        for tier in self.tiers:
            outcome = await tier.run(plan, execution)
            if outcome is not None:
                if outcome.method == "summary":
                    seconds = self.background.clock.now() - began
                    self.background.note_latency(seconds, plan.usage.total)
                return outcome
        return None

    async def _commit(
        self,
        plan: CompactionPlan,
        outcome: Outcome,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        *,
        prepared: bool = False,
    ) -> CompressionEvent | None:
        """Swap the outcome in (the one place a compaction changes the state); report it.
        A ``prepared`` one reports the usage it is committed at, not its snapshot's."""
        if outcome.method == "cut" and not outcome.truncations:
            return None
        before = self.usage(system_prompt, tools).total if prepared else None
        self._context = [*outcome.context, *self._context[outcome.consumed :]]
        self._context_tokens = sum(self.counter.count_message(m) for m in self._context)
        if outcome.layer is not None:
            self._layer = outcome.layer
        self._start += outcome.removed
        if plan.kept_request is not None:
            self._images.reindex(self._start, self._context)
        self._images.prune(self._start)
        event: CompressionEvent | None = None
        if outcome.method != "cut":
            self.compressions += 1
            after = (
                self._accounts.total(self.summary, self._context_tokens)
                if outcome.method == "masking"
                else self.usage(system_prompt, tools).total
            )
            event = outcome.event(
                plan, tokens_after=after, kept=len(self._context), tokens_before=before
            )
        for truncation in outcome.truncations:
            await self._emit(truncation)
        if event is not None:
            await self._emit(event)
        return event

    # -- events -------------------------------------------------------------------

    async def _emit(self, event: ContextEvent) -> None:
        # The JSON is built only when it is logged: a usage hint is emitted every step.
        if logger.isEnabledFor(logging.INFO):
            logger.info("context event: %s", event.model_dump_json())
        if self.on_event is not None:
            result = self.on_event(event)
            if inspect.isawaitable(result):
                await result
