"""ContextEngine: owns one session's summary and context and keeps it in the window."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal, overload

from .._exceptions import CompressionError
from .._logging import logger
from ..message import ContentBlock, DataBlock, HintBlock, Msg, ToolResultBlock, ToolSpec
from ..model import ChatModelBase
from ..token import TokenCounter
from ..workspace import DataOffloader, Offloader
from ._compose import cap_summary, compose_summary, ledger_of, summary_msg
from ._config import ContextConfig
from ._escalate import escalate, truncation_event
from ._events import (
    CompressionEvent,
    ContextEvent,
    ContextEventHandler,
    ImageRemovalEvent,
    TruncationEvent,
    UsageHintEvent,
)
from ._fallback import truncation_note
from ._hint import usage_hint
from ._images import count_images, remove_images
from ._input import ContextUsage, ModelInput
from ._ledger import extract_ledger
from ._replace import replace_content
from ._split import choose_split, safe_boundaries
from ._summary import SummaryWriter
from ._truncate import ToolResultTruncator, is_readback

__all__ = ["ContextEngine"]

Trigger = Literal["auto", "manual", "tool", "overflow"]


class ContextEngine:
    """The summary and context of one session, and the policies that keep them in budget.

    The agent calls :meth:`append` / :meth:`add_tool_results` as messages arrive,
    :meth:`prepare` before each reasoning step, :meth:`compress` for manual or
    agent-initiated compression and :meth:`recover_overflow` when the provider still
    reports the window exceeded. Token counts are cached per message and the running
    total is kept incrementally, so a step tokenizes only new messages; the one O(n) left
    is the pointer copy of the context into ``ModelInput.context`` (a tuple).

    Changes are transactional: a compression computes the new summary and context and
    swaps them in at once; an error or cancellation leaves the state unchanged, and
    messages appended while a summary is being written are kept.
    """

    def __init__(
        self,
        *,
        config: ContextConfig,
        model: ChatModelBase,
        session_id: str,
        summarizer: ChatModelBase | None = None,
        offloader: Offloader | None = None,
        on_event: ContextEventHandler | None = None,
    ) -> None:
        self.config = config
        self.model = model
        self.summarizer = summarizer or model
        self.session_id = session_id
        self.offloader = offloader
        self.on_event = on_event
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

    @property
    def counter(self) -> TokenCounter:
        """The model's token counter."""
        return self.model.token_counter

    @property
    def context_size(self) -> int:
        """The model's window."""
        return self.model.context_size

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
        ``truncation_keep``) ending with the spec's marker, all within the limit. With an
        offloader the *whole* original is offloaded and the marker names the reference,
        except for read-back results (``metadata["contextfold_readback"]``): their content
        is already in the workspace, so they get the marker without a path.

        Atomic under cancellation: every offload is awaited first and the message is then
        stored in one synchronous step, so a cancelled call stored nothing (if it was
        cancelled before that step) or the whole message (if cancelled while events were
        being emitted); :attr:`last` tells which.
        """
        truncator = self._truncator(self.config)
        blocks = msg.blocks()
        events: list[TruncationEvent] = []
        new_blocks: list[ContentBlock] = []
        for block in blocks:
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
        tools: Sequence[ToolSpec],
        *,
        task_in_progress: bool = False,
    ) -> ModelInput:
        """Build the model input for the next reasoning step, compressing first if needed.

        Applies the image limit, then compresses at most once if the input is over
        ``trigger_ratio x context_size``, then adds the context-usage note when usage is
        past ``trigger_ratio - context_buffer_ratio`` and no task is in progress. The note
        is a trailing user message in ``ModelInput.context`` only, never stored, so the
        history and the cached prompt prefix stay stable. It is added whether or not the
        ``CompressContext`` tool is enabled (the spec ties usage injection to the buffer);
        only with the tool enabled does it invite the model to call it.

        Raises :class:`CompressionError` only when summary generation failed and
        ``compression_fallback_to_truncation`` is off; the state is then unchanged.
        """
        async with self._lock:
            await self._limit_images()
            usage = self._usage(system_prompt, tools)
            if usage.total > self._trigger_tokens(self.config):
                await self._compress(
                    system_prompt,
                    tools,
                    config=self.config,
                    instructions=None,
                    force=False,
                    threshold_ratio=None,
                    trigger="auto",
                )
            return await self._build(system_prompt, tools, task_in_progress=task_in_progress)

    async def compress(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        *,
        config: ContextConfig | None = None,
        instructions: HintBlock | None = None,
        force: bool = False,
        threshold_ratio: float | None = None,
        trigger: Trigger = "manual",
    ) -> CompressionEvent | None:
        """Compress now if usage is over the threshold (or ``force``); None if nothing done.

        ``config`` overrides the engine's for this call; ``threshold_ratio`` defaults to
        its ``trigger_ratio`` (the ``CompressContext`` tool passes ``config.hint_ratio``).
        With ``trigger="tool"`` a failed summary never falls back to truncation: it raises
        :class:`CompressionError` with the context unchanged, for the tool to report.
        """
        async with self._lock:
            return await self._compress(
                system_prompt,
                tools,
                config=config or self.config,
                instructions=instructions,
                force=force,
                threshold_ratio=threshold_ratio,
                trigger=trigger,
            )

    async def recover_overflow(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        *,
        task_in_progress: bool = False,
    ) -> ModelInput | None:
        """After a ``ContextWindowExceededError``: one forced compression, a new input.

        Returns None when nothing could be compressed; the agent should then re-raise the
        provider's error rather than drop anything silently. Call it once per failure.
        """
        async with self._lock:
            event = await self._compress(
                system_prompt,
                tools,
                config=self.config,
                instructions=None,
                force=True,
                threshold_ratio=None,
                trigger="overflow",
            )
            if event is None:
                return None
            return await self._build(system_prompt, tools, task_in_progress=task_in_progress)

    def usage(self, system_prompt: str, tools: Sequence[ToolSpec]) -> ContextUsage:
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
        return ContextUsage(
            system=self._system_msg(system_prompt)[1],
            summary=self.counter.count_message(self._summary) if self._summary else 0,
            context=self._context_tokens,
            tools=self._tool_tokens(tools),
            overhead=self._overhead + self._calibration(system_prompt, tools),
            context_size=self.context_size,
        )

    def _calibration(self, system_prompt: str, tools: Sequence[ToolSpec]) -> int:
        # Counters without a tokenizer (CalibratedCounter) correct their estimate by the
        # usage the provider reported for the request this one extends. Exact counters
        # have no ``correction`` and cost nothing here.
        correction = getattr(self.counter, "correction", None)
        if not callable(correction):
            return 0
        head = [self._system_msg(system_prompt)[0]]
        if self._summary is not None:
            head.append(self._summary)
        return int(correction(_Joined(head, self._context), tools))

    def _trigger_tokens(self, config: ContextConfig) -> int:
        return int(config.trigger_ratio * self.context_size)

    def _truncator(self, config: ContextConfig) -> ToolResultTruncator:
        return ToolResultTruncator(
            self.counter, limit=config.tool_result_limit, keep=config.truncation_keep
        )

    # -- model input --------------------------------------------------------------

    async def _build(
        self, system_prompt: str, tools: Sequence[ToolSpec], *, task_in_progress: bool
    ) -> ModelInput:
        usage = self._usage(system_prompt, tools)
        system = self._system_msg(system_prompt)[0]
        context = tuple(self._context)
        if not task_in_progress and usage.total > self.config.hint_ratio * self.context_size:
            hint = usage_hint(
                tokens=usage.total,
                context_size=self.context_size,
                trigger_ratio=self.config.trigger_ratio,
                tool_enabled=self.config.compression_tool_enabled,
            )
            context = (*context, hint)
            usage = replace(usage, context=usage.context + self.counter.count_message(hint))
            await self._emit(UsageHintEvent(tokens=usage.total, context_size=self.context_size))
        return ModelInput(system, self._summary, context, tuple(tools), usage)

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
        if isinstance(self.offloader, DataOffloader):
            return await self.offloader.offload_data(self.session_id, block)
        return None

    # -- compression ----------------------------------------------------------------

    async def _compress(
        self,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        *,
        config: ContextConfig,
        instructions: HintBlock | None,
        force: bool,
        threshold_ratio: float | None,
        trigger: Trigger,
    ) -> CompressionEvent | None:
        started = time.monotonic()
        usage = self._usage(system_prompt, tools)
        threshold = config.trigger_ratio if threshold_ratio is None else threshold_ratio
        if not force and usage.total <= threshold * self.context_size:
            return None
        snapshot = list(self._context)
        tokens = [self.counter.count_message(m) for m in snapshot]
        safe = safe_boundaries(snapshot)
        k = choose_split(tokens, safe, int(config.reserve_ratio * self.context_size))
        if k == 0 and force:
            k = choose_split(tokens, safe, sum(tokens) // 2)
        if k == 0:
            logger.warning(
                "context over its threshold (%d tokens) but nothing can be compressed: the "
                "recent messages already fit reserve_ratio or are one pending tool exchange",
                usage.total,
            )
            return None
        compressed = snapshot[:k]
        previous = self._summary
        ledger = ledger_of(previous).merge(extract_ledger(compressed))
        writer = SummaryWriter(self.summarizer)
        draft = writer.draft(
            compressed, previous=previous, config=config, instructions=instructions
        )
        error: Exception | None = None
        fields: dict[str, Any] | None = None
        attempts = config.summary_attempts
        try:
            fields, attempts = await writer.write(draft, config=config)
        except Exception as exc:  # the summarizer's failure, whatever it was
            error = exc
            if trigger == "tool" or not config.compression_fallback_to_truncation:
                advice = (
                    "the agent can keep working and try again later"
                    if trigger == "tool"
                    else "enable compression_fallback_to_truncation to drop the oldest "
                    "messages instead, or check the summarizer model"
                )
                raise CompressionError(
                    f"summary generation failed after {config.summary_attempts} attempt(s) "
                    f"({type(exc).__name__}: {exc}); the context is unchanged: {advice}"
                ) from exc
        # Messages may have been appended while the summary was written; keep them.
        appended = self._context[len(snapshot) :]
        ref = await self._offload_context(compressed)
        if fields is not None:
            text = compose_summary(
                fields,
                config=config,
                ledger=ledger,
                draft=draft,
                ref=ref,
                compressed=len(compressed),
            )
        else:
            assert error is not None
            note = truncation_note(
                removed=len(compressed),
                ref=ref,
                error=error,
                previous=previous.text if previous is not None else None,
            )
            text = "\n\n".join(p for p in (note, ledger.render()) if p)
        text = cap_summary(text, counter=self.counter, config=config, size=self.context_size)
        summary = summary_msg(text, ledger, fields)
        escalation = await escalate(
            [*snapshot[k:], *appended],
            summary,
            fixed=usage.system + usage.tools + usage.overhead,
            target=self._trigger_tokens(config),
            counter=self.counter,
            truncator=self._truncator(config),
            offload_result=self._offload_result,
            offload_context=self._offload_context,
        )
        summary, dropped, events = escalation.summary, escalation.dropped, escalation.truncations
        # Messages appended during the offload calls above are kept too.
        late = self._context[len(snapshot) + len(appended) :]
        new_context = [*escalation.context, *late]
        # Swap: nothing above changed the engine's state.
        self._summary = summary
        self._context = new_context
        self._start += k + dropped
        self._context_tokens = sum(self.counter.count_message(m) for m in new_context)
        self._prune_image_index()
        self.compressions += 1
        after = self._usage(system_prompt, tools).total
        event = CompressionEvent(
            trigger=trigger,
            method="summary" if fields is not None else "truncation",
            tokens_before=usage.total,
            tokens_after=after,
            messages_removed=k + dropped,
            messages_kept=len(new_context),
            duration_s=time.monotonic() - started,
            offload_ref=ref,
            attempts=attempts,
            error=None if error is None else f"{type(error).__name__}: {error}",
        )
        for truncation in events:
            await self._emit(truncation)
        await self._emit(event)
        return event

    # -- offload and events ---------------------------------------------------------

    async def _offload_context(self, msgs: list[Msg]) -> str | None:
        if self.offloader is None or not msgs:
            return None
        return await self.offloader.offload_context(self.session_id, msgs)

    async def _offload_result(self, block: ToolResultBlock) -> str | None:
        # A read-back result is workspace content already: offloading it would copy it
        # again, and each later Read of the copy could be copied once more.
        if self.offloader is None or is_readback(block):
            return None
        return await self.offloader.offload_tool_result(self.session_id, block)

    async def _emit(self, event: ContextEvent) -> None:
        logger.info("context event: %s", event.model_dump_json())
        if self.on_event is not None:
            result = self.on_event(event)
            if inspect.isawaitable(result):
                await result


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
