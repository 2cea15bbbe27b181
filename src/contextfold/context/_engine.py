"""ContextEngine: owns one session's summary and context and keeps it in the window."""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import cast, overload

from .._exceptions import CompressionError, StructuredOutputError
from .._logging import logger
from .._structural import implements
from ..message import (
    CACHE_POINT_KEY,
    MARKER_KEY,
    MASKED_KEY,
    ContentBlock,
    DataBlock,
    HintBlock,
    Marker,
    Msg,
    ToolResultBlock,
    ToolSpec,
    is_readback,
    runtime_note,
)
from ..token import TokenCounter, UsageCalibration
from ..workspace import DataOffloader, Offloader
from ._config import MIN_TOOL_RESULT_LIMIT, ContextConfig
from ._extractive import ExtractiveSummarizer
from ._ledger import ArtifactLedger, extract_ledger
from ._redact import redact_messages, redact_tool_result
from ._summarizer import Summarizer, SummaryRequest, SummaryResult
from ._summary import (
    PartBudget,
    append_budget,
    compose_summary,
    fallback_summary,
    ledger_budget,
    ledger_of,
    part_fields,
    part_ledger,
    safe_format,
    summary_budget,
    summary_msg,
    summary_parts,
    with_note,
)
from ._trim import (
    MIN_KEPT_RESULT,
    Escalation,
    ToolResultTruncator,
    choose_split,
    count_images,
    escalate,
    remove_images,
    replace_content,
    safe_boundaries,
    truncation_event,
)
from ._types import (
    CompressionEvent,
    CompressionHook,
    CompressionRequest,
    CompressionTrigger,
    ContextEvent,
    ContextEventHandler,
    ContextUsage,
    ImageRemovalEvent,
    ModelInput,
    TruncationEvent,
    UsageHintEvent,
)

__all__ = ["HINT_NAME", "ContextEngine", "mask_message", "mask_plan", "newest_turn"]

_CALL_ROOM = 64
"""Tokens left beside a fresh result for the call that asked for it."""

HINT_NAME = "runtime"
"""``Msg.name`` of the context-usage note, which is never stored in the context."""


class ContextEngine:
    """The summary and context of one session, and the policies that keep them in budget.

    Feed it messages (:meth:`append`, :meth:`add_tool_results` for tool results, which it
    truncates), ask it for the next model input (:meth:`prepare`, which compresses first
    when usage is over the trigger) and send that; :meth:`compress` compresses on demand.
    It needs a token ``counter`` and the ``context_size`` it counts against; a
    :class:`~contextfold.context.Summarizer` (default: :class:`ExtractiveSummarizer`, no
    model) and an :class:`~contextfold.workspace.Offloader` (default: none) are optional.
    Every change is reported to ``on_event``; every compression, automatic ones included,
    runs through ``compression_hook`` when one is given.

    Token counts are cached per message and the running total is kept incrementally, so a
    step tokenizes only new messages. Changes are transactional: a compression computes the
    new summary and context and swaps them in at once; an error or cancellation leaves the
    state unchanged, and messages appended while a summary is being written are kept.
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
        self.compressions = 0
        """Compressions performed so far (summary or fallback)."""
        self._summary: Msg | None = None
        self._context: list[Msg] = []
        self._context_tokens = 0
        self._start = 0  # absolute position of _context[0] in everything ever appended
        self._images: deque[list[int]] = deque()  # [absolute position, images in it]
        self._image_total = 0
        self._lock = asyncio.Lock()
        self._system: tuple[str, Msg, int] | None = None
        self._tools: tuple[tuple[ToolSpec, ...], int] | None = None
        self._overhead: int | None = None
        self._fixed = 0  # system prompt, tools and framing of the last step
        self._last_sent: ModelInput | None = None  # the last input built (without a note)

    @property
    def summary(self) -> Msg | None:
        """The summary message, once a compression happened."""
        return self._summary

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

    def load(self, *, summary: Msg | None, context: Sequence[Msg]) -> None:
        """Replace the state (used when a session is restored)."""
        self._summary = summary
        self._context = []
        self._context_tokens = 0
        self._start = 0
        self._images.clear()
        self._image_total = 0
        for msg in context:
            self.append(msg)

    def append(self, msg: Msg) -> None:
        """Add a message to the context (not truncated; see :meth:`add_tool_results`)."""
        position = self._start + len(self._context)
        self._context.append(msg)
        self._context_tokens += self.counter.count_message(msg)
        images = count_images(msg)
        if images:
            self._images.append([position, images])
            self._image_total += images

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
        truncator = self._truncator(self.config, limit=self.result_limit())
        events: list[TruncationEvent] = []
        new_blocks: list[ContentBlock] = []
        for block in msg.blocks():
            if isinstance(block, ToolResultBlock):
                tokens = truncator.tokens(block)
                if tokens > truncator.limit:
                    ref = await self._offload_result(block)
                    cut = truncator.cut(block, ref=ref)
                    events.append(truncation_event(block, tokens, cut, self.counter, ref))
                    new_blocks.append(cut)
                    continue
            new_blocks.append(block)
        stored = replace_content(msg, new_blocks) if events else msg
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
            usage = self._usage(system_prompt, tools)
            if usage.total <= self._trigger_tokens(self.config):
                # Nothing changed since: the input is built from this usage.
                return await self._build(
                    system_prompt, tools, task_in_progress=task_in_progress, usage=usage
                )
            prefix = self._input(system_prompt, tools, usage)
            request = CompressionRequest(trigger="auto", config=self.config)
            await self._run_compression(system_prompt, tools, request, prefix=prefix)
            return await self._build(system_prompt, tools, task_in_progress=task_in_progress)

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
            prefix = self._input(system_prompt, tools, self._usage(system_prompt, tools))
            return await self._run_compression(system_prompt, tools, request, prefix=prefix)

    def usage(self, system_prompt: str, tools: Sequence[ToolSpec] = ()) -> ContextUsage:
        """Token usage of the stored state with this system prompt and tools."""
        return self._usage(system_prompt, tools)

    # -- accounting ---------------------------------------------------------------

    def _system_msg(self, system_prompt: str) -> tuple[Msg, int]:
        if self._system is None or self._system[0] != system_prompt:
            msg = Msg("system", system_prompt, "system")
            self._system = (system_prompt, msg, self.counter.count_message(msg))
        return self._system[1], self._system[2]

    def _tool_tokens(self, tools: Sequence[ToolSpec]) -> int:
        key = tuple(tools)
        if self._tools is None or self._tools[0] != key:
            self._tools = (key, self.counter.count_tools(key))
        return self._tools[1]

    def _usage(self, system_prompt: str, tools: Sequence[ToolSpec]) -> ContextUsage:
        if self._overhead is None:
            self._overhead = self.counter.count_request([], ())
        usage = ContextUsage(
            system=self._system_msg(system_prompt)[1],
            summary=self._summary_tokens(),
            context=self._context_tokens,
            tools=self._tool_tokens(tools),
            overhead=self._overhead + self._calibration(system_prompt, tools),
            context_size=self.context_size,
        )
        self._fixed = usage.system + usage.tools + usage.overhead
        return usage

    def _calibration(self, system_prompt: str, tools: Sequence[ToolSpec]) -> int:
        # Counters without a tokenizer correct their estimate by the usage the provider
        # reported for the request this one extends; exact counters cost nothing here.
        if not implements(self.counter, UsageCalibration):
            return 0
        head = [self._system_msg(system_prompt)[0]]
        if self._summary is not None:
            head.append(self._summary)
        estimate = (
            self._system_msg(system_prompt)[1]
            + self._summary_tokens()
            + self._context_tokens
            + self._tool_tokens(tools)
            + (self._overhead or 0)
        )
        calibration = cast(UsageCalibration, self.counter)
        return calibration.correction(_Joined(head, self._context), tools, estimate=estimate)

    def _trigger_tokens(self, config: ContextConfig) -> int:
        return int(config.trigger_ratio * self.context_size)

    def result_limit(self) -> int:
        """The largest tool result kept as it arrives: ``tool_result_limit``, bounded by
        what ``trigger_ratio x context_size`` leaves after the system prompt, the tools and
        the summary of the last step (never below ``MIN_TOOL_RESULT_LIMIT``)."""
        room = self._trigger_tokens(self.config) - self._fixed - self._summary_tokens()
        return max(MIN_TOOL_RESULT_LIMIT, min(self.config.tool_result_limit, room - _CALL_ROOM))

    def _summary_tokens(self) -> int:
        return self.counter.count_message(self._summary) if self._summary else 0

    def _truncator(self, config: ContextConfig, *, limit: int | None = None) -> ToolResultTruncator:
        return ToolResultTruncator(
            self.counter,
            limit=config.tool_result_limit if limit is None else limit,
            keep=config.truncation_keep,
        )

    # -- model input --------------------------------------------------------------

    def _input(
        self, system_prompt: str, tools: Sequence[ToolSpec], usage: ContextUsage
    ) -> ModelInput:
        system = self._system_msg(system_prompt)[0]
        return ModelInput(system, self._summary, tuple(self._context), tuple(tools), usage)

    async def _build(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        *,
        task_in_progress: bool,
        usage: ContextUsage | None = None,
    ) -> ModelInput:
        """The model input; ``usage`` is the state's, when the caller just computed it."""
        if usage is None:
            usage = self._usage(system_prompt, tools)
        model_input = self._input(system_prompt, tools, usage)
        self._last_sent = model_input
        usage = model_input.usage
        if task_in_progress or usage.total <= self.config.hint_ratio * self.context_size:
            return model_input
        hint = usage_hint(
            tokens=usage.total,
            context_size=self.context_size,
            trigger_ratio=self.config.trigger_ratio,
            tool_enabled=self.config.compression_tool_enabled,
        )
        usage = replace(usage, context=usage.context + self.counter.count_message(hint))
        await self._emit(UsageHintEvent(tokens=usage.total, context_size=self.context_size))
        return replace(model_input, context=(*model_input.context, hint), usage=usage)

    # -- image limit --------------------------------------------------------------

    async def _limit_images(self) -> None:
        self._prune_image_index()
        excess = self._image_total - self.config.max_image_num
        if excess <= 0:
            return
        removed, refs, before = 0, [], self._context_tokens
        while excess > 0 and self._images:
            position, count = self._images[0]
            take = min(count, excess)
            index = position - self._start
            old = self._context[index]
            new, new_refs = await remove_images(
                old, take, limit=self.config.max_image_num, persist=self._persist_image
            )
            self._context[index] = new
            self._context_tokens += self.counter.count_message(new) - self.counter.count_message(
                old
            )
            refs.extend(new_refs)
            removed += take
            excess -= take
            self._image_total -= take
            if take == count:
                self._images.popleft()
            else:
                self._images[0][1] = count - take
        await self._emit(
            ImageRemovalEvent(
                images_removed=removed,
                offload_refs=refs,
                tokens_before=before,
                tokens_after=self._context_tokens,
            )
        )

    def _prune_image_index(self) -> None:
        while self._images and self._images[0][0] < self._start:
            self._image_total -= self._images.popleft()[1]

    async def _persist_image(self, block: DataBlock) -> str | None:
        if implements(self.offloader, DataOffloader):
            return await cast(DataOffloader, self.offloader).offload_data(self.session_id, block)
        return None

    # -- compression ----------------------------------------------------------------

    async def _run_compression(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        request: CompressionRequest,
        *,
        prefix: ModelInput | None,
    ) -> CompressionEvent | None:
        async def core(current: CompressionRequest) -> CompressionEvent | None:
            return await self._compress(system_prompt, tools, current, prefix=prefix)

        if self.compression_hook is None:
            return await core(request)
        return await self.compression_hook(request, core)

    async def _compress(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        request: CompressionRequest,
        *,
        prefix: ModelInput | None,
    ) -> CompressionEvent | None:
        started = time.monotonic()
        config, trigger = request.config, request.trigger
        usage = self._usage(system_prompt, tools)
        ratio = config.trigger_ratio if request.threshold_ratio is None else request.threshold_ratio
        if not request.force and usage.total <= ratio * self.context_size:
            return None
        snapshot = list(self._context)
        tokens = [self.counter.count_message(m) for m in snapshot]
        safe = safe_boundaries(snapshot)
        # The newest assistant turn and what answers it are kept whenever cutting its tool
        # results can make it fit: a fresh result is not summarized before it was seen.
        protect = self._protected(snapshot, tokens, usage, config)
        k = choose_split(tokens, safe, int(config.reserve_ratio * self.context_size))
        if k == 0 and request.force:
            k = choose_split(tokens, safe, sum(tokens) // 2)
        k = min(k, protect)
        if config.observation_masking and trigger != "tool":
            masked = await self._mask(snapshot, k=k, protect=protect, usage=usage, config=config)
            if masked is not None:
                masked.duration_s = time.monotonic() - started
                masked.trigger = trigger
                await self._emit(masked)
                return masked
        if k == 0:
            await self._cut_kept(snapshot, usage, config)
            return None
        if trigger == "auto" and self._too_little_freed(tokens[:k], usage, config):
            return None
        compressed = snapshot[:k]
        previous = self._summary
        # The request to extend is chosen first, then redacted with the messages to fold.
        base = self._summary_prefix(prefix, k) if config.summary_request == "prefix" else None
        folded, base = self._redacted(compressed, base)
        found = extract_ledger(folded)
        # The layer's whole ledger, as a rewrite (or a fallback) lists it.
        ledger = ledger_of(previous).merge(found)
        ledger = ledger.select(self.counter, ledger_budget(config, self.context_size))
        part = append_budget(config, self.context_size, self.counter, previous)
        plan = (
            None
            if part is None
            else part_ledger(ledger_of(previous), found, self.counter, part.ledger, rewrite=ledger)
        )
        caller_hints = () if request.instructions is None else (request.instructions,)
        hints = caller_hints
        if plan is not None:
            hints = (HintBlock(hint=config.summary_update_prompt), *caller_hints)
        summary_request = SummaryRequest(
            messages=folded,
            previous=previous,
            instructions=safe_format(
                config.compression_prompt,
                {"current_time": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")},
            ),
            hints=hints,
            schema=config.summary_schema,
            max_attempts=config.summary_attempts,
            prefix=base,
            previous_stays=plan is not None,
        )

        async def ask(request: SummaryRequest) -> tuple[SummaryResult | None, Exception | None]:
            try:
                return await self.summarizer.summarize(request), None
            except Exception as exc:  # the summarizer's failure, whatever it was
                if trigger == "tool" or not config.compression_fallback_to_truncation:
                    advice = (
                        "the agent can keep working and try again later"
                        if trigger == "tool"
                        else "enable compression_fallback_to_truncation to drop the oldest "
                        "messages instead, or check the summarizer model"
                    )
                    attempts = _attempts(exc, config)
                    raise CompressionError(
                        f"summary generation failed after {attempts} attempt"
                        f"{'' if attempts == 1 else 's'} ({type(exc).__name__}: {exc}); the "
                        f"context is unchanged: {advice}"
                    ) from exc
                return None, exc

        result, error = await ask(summary_request)
        # Messages may have been appended while the summary was written; keep them.
        appended = self._context[len(snapshot) :]
        ref = await self._offload_context(compressed)
        summary: Msg | None = None
        if result is not None and part is not None and plan is not None and previous is not None:
            summary = self._appended(result, previous, plan, part, ref, len(compressed), config)
            kept_now = [*snapshot[k:], *appended]
            if summary is not None and self._crowds_out(summary, kept_now, usage, config):
                summary = None
            if summary is None:
                # The part would have to be cut to fit beside the summary in place, or the
                # longer layer would push kept messages out unsummarized: the newest facts
                # matter most, so the summary is rewritten instead.
                result, error = await ask(
                    replace(summary_request, hints=caller_hints, previous_stays=False)
                )
        if summary is None:
            summary = self._rewritten(result, error, previous, ledger, ref, len(compressed), config)
        kept = [*snapshot[k:], *appended]
        kept_tokens = [self.counter.count_message(m) for m in kept]
        escalation = await self._escalate(
            kept,
            summary_tokens=self.counter.count_message(summary),
            usage=usage,
            config=config,
            keep_from=self._protected(kept, kept_tokens, usage, config),
        )
        if escalation.note is not None:
            summary = with_note(summary, escalation.note)
        # Messages appended during the offload calls above are kept too.
        late = self._context[len(snapshot) + len(appended) :]
        new_context = [*escalation.context, *late]
        # Swap: nothing above changed the engine's state.
        self._summary = summary
        self._context = new_context
        self._start += k + escalation.dropped
        self._context_tokens = sum(self.counter.count_message(m) for m in new_context)
        self._prune_image_index()
        self.compressions += 1
        event = CompressionEvent(
            trigger=trigger,
            method="summary" if result is not None else "truncation",
            tokens_before=usage.total,
            tokens_after=self._usage(system_prompt, tools).total,
            messages_removed=k + escalation.dropped,
            messages_kept=len(new_context),
            duration_s=time.monotonic() - started,
            offload_ref=ref,
            attempts=result.attempts if result is not None else _attempts(error, config),
            error=None if error is None else f"{type(error).__name__}: {error}",
        )
        for truncation in escalation.truncations:
            await self._emit(truncation)
        await self._emit(event)
        return event

    def _crowds_out(
        self, summary: Msg, kept: Sequence[Msg], usage: ContextUsage, config: ContextConfig
    ) -> bool:
        """Whether ``summary`` and the ``kept`` messages would be over the trigger, so that
        escalation would have to cut or drop kept messages."""
        fixed = usage.system + usage.tools + usage.overhead
        total = fixed + self.counter.count_message(summary)
        total += sum(self.counter.count_message(m) for m in kept)
        return total > self._trigger_tokens(config)

    def _rewritten(
        self,
        result: SummaryResult | None,
        error: Exception | None,
        previous: Msg | None,
        ledger: ArtifactLedger,
        ref: str | None,
        compressed: int,
        config: ContextConfig,
    ) -> Msg:
        """One summary for the whole layer: the summarizer's fields, or (when it failed,
        ``error``) the fallback note with the previous summary kept below it."""
        if result is not None:
            text = compose_summary(
                result.fields,
                config=config,
                counter=self.counter,
                size=self.context_size,
                ledger=ledger,
                ref=ref,
                compressed=compressed,
                uncovered=result.uncovered,
                cut=result.cut,
            )
            return summary_msg(text, ledger, result.fields)
        assert error is not None
        text = fallback_summary(
            removed=compressed,
            ref=ref,
            error=error,
            previous=previous.text if previous is not None else None,
            ledger=ledger,
            counter=self.counter,
            budget=summary_budget(config, self.context_size),
        )
        return summary_msg(text, ledger, None)

    def _appended(
        self,
        result: SummaryResult,
        previous: Msg,
        plan: tuple[ArtifactLedger, ArtifactLedger],
        budget: PartBudget,
        ref: str | None,
        compressed: int,
        config: ContextConfig,
    ) -> Msg | None:
        """``previous`` unchanged, then a part for what this compaction folded (``plan``:
        the facts the part lists, and the layer's whole ledger); ``None`` when the part
        does not fit, uncut, in the room ``budget`` leaves."""
        shown, layer = plan
        earlier = previous.metadata.get("fields")
        fields, carried = part_fields(
            result.fields, earlier if isinstance(earlier, Mapping) else None
        )
        # Rendered uncut (no budget binds), then checked against the room the layer leaves.
        text = compose_summary(
            fields,
            config=config,
            counter=self.counter,
            size=self.context_size,
            ledger=shown,
            ref=ref,
            compressed=compressed,
            uncovered=result.uncovered,
            cut=result.cut,
            template=config.summary_update_template,
            budget=sys.maxsize,
        )
        if self.counter.count_text(text) > budget.text:
            return None
        return summary_msg(text, layer, carried, earlier=summary_parts(previous))

    async def _mask(
        self,
        snapshot: list[Msg],
        *,
        k: int,
        protect: int,
        usage: ContextUsage,
        config: ContextConfig,
    ) -> CompressionEvent | None:
        """Observation masking: old tool results replaced, in one batch, by a placeholder
        naming where the whole output is saved; ``None`` (nothing changed) when that would
        not bring usage to halfway between reserve and trigger."""
        plan = mask_plan(
            snapshot, k=min(k, protect), protect=protect, policies=config.tool_policies
        )
        if not plan:
            return None
        by_message: dict[int, dict[int, int]] = {}  # message -> block -> result tokens
        for i, j, block in plan:
            by_message.setdefault(i, {})[j] = self.counter.count_text(block.text())

        def masked(refs: Mapping[tuple[int, int], str]) -> dict[int, Msg]:
            return {
                i: mask_message(snapshot[i], {j: (refs[(i, j)], n) for j, n in blocks.items()})
                for i, blocks in by_message.items()
            }

        # Sized with a reference of typical length, before anything is offloaded.
        trial = masked({(i, j): "x" * 48 for i, j, _ in plan})
        count = self.counter.count_message
        after = usage.total - sum(count(snapshot[i]) - count(m) for i, m in trial.items())
        if after > (config.trigger_ratio + config.reserve_ratio) / 2 * self.context_size:
            return None
        refs = {
            (i, j): await self._offload_result(block) or "(not saved: no offloader)"
            for i, j, block in plan
        }
        new_context = list(snapshot)
        for i, msg in masked(refs).items():
            new_context[i] = msg
        first = min(by_message)
        if first > 0:
            before = new_context[first - 1]
            new_context[first - 1] = before.model_copy(
                update={"metadata": {**before.metadata, CACHE_POINT_KEY: True}}
            )
        late = self._context[len(snapshot) :]
        self._context = [*new_context, *late]
        self._context_tokens = sum(self.counter.count_message(m) for m in self._context)
        self.compressions += 1
        return CompressionEvent(
            trigger="auto",
            method="masking",
            tokens_before=usage.total,
            tokens_after=self._usage_total(),
            messages_removed=0,
            messages_kept=len(self._context),
            duration_s=0.0,
            attempts=0,
        )

    def _usage_total(self) -> int:
        system, tools = self._system, self._tools
        fixed = (system[2] if system else 0) + (tools[1] if tools else 0) + (self._overhead or 0)
        return fixed + self._summary_tokens() + self._context_tokens

    def _too_little_freed(
        self, folded: list[int], usage: ContextUsage, config: ContextConfig
    ) -> bool:
        """Whether an automatic compaction would free less than ``min_compaction_saving``
        of the window (folding ``folded`` into a summary about as large as the current one,
        or the ledger's budget) while the request still fits: then it waits a step."""
        if not config.min_compaction_saving:
            return False
        summary = max(self._summary_tokens(), ledger_budget(config, self.context_size))
        freed = sum(folded) - summary + usage.summary
        fits = usage.total <= self.context_size - self.context_size // 10
        if freed < config.min_compaction_saving * self.context_size and fits:
            logger.info("compaction skipped: it would free only %d tokens", freed)
            return True
        return False

    def _summary_prefix(self, current: ModelInput | None, k: int) -> ModelInput | None:
        """The request a summary request should extend: the last one sent, when it still
        holds everything to fold (the newest turn, which is kept, need not be read twice,
        and that request is what the provider's cache holds), else the current state."""
        if current is None or not safe_boundaries(self._context)[-1]:
            return None  # a call still waits for its result: no valid request to extend
        last = self._last_sent
        if (
            last is not None
            and last.system is current.system
            and last.summary is current.summary
            and last.tools == current.tools
            and k <= len(last.context) <= len(self._context)
            and all(a is b for a, b in zip(last.context, self._context, strict=False))
        ):
            return last
        return current

    def _protected(
        self, snapshot: list[Msg], tokens: list[int], usage: ContextUsage, config: ContextConfig
    ) -> int:
        """Where the kept part must start at the latest: the newest turn, unless even with
        its tool results cut it could not fit beside a full summary (then nothing)."""
        start = newest_turn(snapshot)
        cuttable = sum(
            max(0, self.counter.count_text(r.text()) - MIN_KEPT_RESULT)
            for m in snapshot[start:]
            for r in m.tool_results
        )
        fixed = usage.system + usage.tools + usage.overhead
        needed = fixed + summary_budget(config, self.context_size) + sum(tokens[start:]) - cuttable
        return start if needed <= self._trigger_tokens(config) else len(snapshot)

    async def _escalate(
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
            target=self._trigger_tokens(config),
            counter=self.counter,
            truncator=self._truncator(config),
            offload_result=self._offload_result,
            offload_context=self._offload_context,
            keep_from=keep_from,
        )

    async def _cut_kept(
        self, snapshot: list[Msg], usage: ContextUsage, config: ContextConfig
    ) -> None:
        """Nothing can be compressed (only the newest turn is left): cut its oversized
        tool results to fit the trigger instead, if that helps."""
        escalation = await self._escalate(
            snapshot, summary_tokens=usage.summary, usage=usage, config=config, keep_from=0
        )
        if not escalation.truncations:
            logger.warning(
                "context over its threshold (%d tokens) but nothing can be compressed: the "
                "recent messages already fit reserve_ratio or are the newest turn",
                usage.total,
            )
            return
        late = self._context[len(snapshot) :]
        self._context = [*escalation.context, *late]
        self._context_tokens = sum(self.counter.count_message(m) for m in self._context)
        for truncation in escalation.truncations:
            await self._emit(truncation)

    # -- offload and events ---------------------------------------------------------

    async def _offload_context(self, msgs: list[Msg]) -> str | None:
        if self.offloader is None or not msgs:
            return None
        msgs = self._redacted(msgs, None)[0]
        return await self.offloader.offload_context(self.session_id, msgs)

    async def _offload_result(self, block: ToolResultBlock) -> str | None:
        # A read-back result is workspace content already: offloading it would copy it
        # again, and each later Read of the copy could be copied once more.
        if self.offloader is None or is_readback(block):
            return None
        if self.config.redact is not None:
            block = redact_tool_result(block, self.config.redact)
        return await self.offloader.offload_tool_result(self.session_id, block)

    def _redacted(
        self, msgs: list[Msg], prefix: ModelInput | None
    ) -> tuple[list[Msg], ModelInput | None]:
        """What may leave the context: ``msgs`` (and the request prefix a summarizer may
        reuse) through ``config.redact``, when one is set."""
        redact = self.config.redact
        if redact is None:
            return msgs, prefix
        if prefix is not None:
            prefix = replace(prefix, context=tuple(redact_messages(prefix.context, redact)))
        return redact_messages(msgs, redact), prefix

    async def _emit(self, event: ContextEvent) -> None:
        # The JSON is built only when it is logged: a usage hint is emitted every step.
        if logger.isEnabledFor(logging.INFO):
            logger.info("context event: %s", event.model_dump_json())
        if self.on_event is not None:
            result = self.on_event(event)
            if inspect.isawaitable(result):
                await result


def mask_plan(
    msgs: Sequence[Msg], *, k: int, protect: int, policies: Mapping[str, str]
) -> list[tuple[int, int, ToolResultBlock]]:
    """The tool results to mask: ``(message index, block index, block)``.

    Results before ``k`` (the kept part's start) are masked unless their tool is
    ``protect``-ed; ``strip`` tools are masked up to ``protect`` (the newest turn) too.
    Already masked results and read-back results are left alone.
    """
    plan = []
    for i, msg in enumerate(msgs[:protect]):
        for j, block in enumerate(msg.blocks()):
            if not isinstance(block, ToolResultBlock) or MASKED_KEY in block.metadata:
                continue
            if is_readback(block):
                continue
            policy = policies.get(block.name, "mask")
            if policy == "protect" or (policy == "mask" and i >= k):
                continue
            plan.append((i, j, block))
    return plan


def mask_message(msg: Msg, masks: Mapping[int, tuple[str, int]]) -> Msg:
    """``msg`` with the tool results at the given block indexes replaced by placeholders
    (``ref`` of the whole output, its size in tokens)."""
    blocks = msg.blocks()
    for j, (ref, tokens) in masks.items():
        block = blocks[j]
        assert isinstance(block, ToolResultBlock)
        note = (
            f"[{block.name} output ({tokens} tokens) masked to save context; the whole "
            f"output is saved in '{ref}': Read it to see it again.]"
        )
        blocks[j] = block.model_copy(
            update={"output": note, "metadata": {**block.metadata, MASKED_KEY: ref}}
        )
    return replace_content(msg, blocks)


def newest_turn(msgs: Sequence[Msg]) -> int:
    """Where the newest turn starts: its last assistant message (with the tool results and
    messages after it), or the last message when no assistant spoke."""
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].role == "assistant":
            return i
    return max(len(msgs) - 1, 0)


def usage_hint(*, tokens: int, context_size: int, trigger_ratio: float, tool_enabled: bool) -> Msg:
    """The context-usage note: a trailing user-role message, never stored."""
    text = (
        f"Context usage: {tokens} of {context_size} tokens ({tokens / context_size:.0%}). "
        f"Older messages are summarized automatically at {trigger_ratio:.0%}; summarized messages "
        "stay readable in the workspace: find them with Search (a few words), then Read."
    )
    if tool_enabled:
        text += (
            " You may call the CompressContext tool now, at a natural break between tasks, "
            "to summarize older messages yourself before that happens."
        )
    return Msg.of_blocks(
        HINT_NAME,
        [HintBlock(hint=runtime_note(text))],
        "user",
        metadata={MARKER_KEY: Marker.USAGE_HINT.value},
    )


def _attempts(error: BaseException | None, config: ContextConfig) -> int:
    """Attempts a failed summarizer made: the count a structured-output error carries;
    any other error ends the last of ``summary_attempts``."""
    if isinstance(error, StructuredOutputError) and error.attempts:
        return error.attempts
    return config.summary_attempts


class _Joined(Sequence[Msg]):
    """``head + tail`` without copying: the calibration reads a few positions per step,
    and copying the whole context for that would make a step O(history)."""

    def __init__(self, head: list[Msg], tail: list[Msg]) -> None:
        self._head, self._tail = head, tail

    def __len__(self) -> int:
        return len(self._head) + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> Msg: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Msg]: ...
    def __getitem__(self, index: int | slice) -> Msg | Sequence[Msg]:
        if isinstance(index, slice):
            return [*self._head, *self._tail][index]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        n = len(self._head)
        return self._head[index] if index < n else self._tail[index - n]
