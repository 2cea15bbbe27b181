"""Replaying a recorded run through the context engine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from .._logging import logger
from ..context import (
    BackgroundCompactionEvent,
    CompressionEvent,
    ContextConfig,
    ContextEngine,
    ContextEvent,
    ExtractiveSummarizer,
    Summarizer,
    TruncationEvent,
)
from ..message import DataBlock, Marker, Msg, ToolResultBlock, ToolSpec, marker_of
from ..token import TokenCounter, counter_for_model
from ..workspace import BaseWorkspace, DataOffloader, MemoryWorkspace
from ._cache import CacheKind
from ._clock import LatentSummarizer, ReplayTiming, SimulatedClock
from ._cost import CostLedger, load_prices
from ._dump import ObservedSummarizer, RequestDump, SummaryCall
from ._metrics import PreparedSummary, ReplayResult, RunResult, RunTiming, StepUsage
from ._trajectory import Trajectory

__all__ = ["replay_run", "replay_runs", "tools_of"]

RunCallback = Callable[[RunResult], Awaitable[None] | None]


class _CountingOffloader:
    """Delegates to a workspace and counts the tokens and items written to it."""

    def __init__(self, workspace: BaseWorkspace, counter: TokenCounter) -> None:
        self.workspace = workspace
        self.counter = counter
        self.tokens = 0
        self.items = 0

    async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
        ref = await self.workspace.offload_context(session_id, msgs, **kwargs)
        self.tokens += sum(self.counter.count_message(m) for m in msgs)
        self.items += len(msgs)
        return ref

    async def offload_tool_result(
        self, session_id: str, tool_result: ToolResultBlock, **kwargs: Any
    ) -> str:
        ref = await self.workspace.offload_tool_result(session_id, tool_result, **kwargs)
        self.tokens += self.counter.count_text(tool_result.text())
        self.items += 1
        return ref

    async def offload_data(self, session_id: str, data: DataBlock, **kwargs: Any) -> str:
        assert isinstance(self.workspace, DataOffloader)
        ref = await self.workspace.offload_data(session_id, data, **kwargs)
        self.items += 1
        return ref


def tools_of(run: Trajectory) -> list[ToolSpec]:
    """Tool definitions for a replay: one per tool name the run called, in first-use order.

    Recordings rarely keep their tool schemas, so these carry names only; they cost the
    same at every step and so shift every request total by the same few tokens.
    """
    names: dict[str, None] = {}
    for msg in run.messages:
        for call in msg.tool_calls:
            names.setdefault(call.name, None)
    return [ToolSpec(name=name) for name in names]


def _output_tokens(msg: Msg, counter: TokenCounter) -> int:
    """What the recorded answer cost in output: the provider's count when recorded."""
    if msg.usage is not None and msg.usage.output_tokens:
        return msg.usage.output_tokens
    return counter.count_message(msg)


class _Timer:
    """A timed replay's clock, the gaps between recorded calls, and what it saw."""

    def __init__(self, run: Trajectory, timing: ReplayTiming) -> None:
        self.timing = timing
        self.clock = SimulatedClock()
        times = run.times if timing.timestamps else []
        self.times = times if len(times) == len(run.messages) else []
        self.last: int | None = None  # the previous assistant message's index
        self.sources: set[str] = set()
        self.result = RunTiming(summary_latency_s=timing.summary_latency_s)

    def gap(self, index: int) -> float:
        """Seconds from the previous recorded call to the one at ``index``."""
        last, self.last = self.last, index
        if last is None:
            return 0.0
        if self.times:
            before, now = self.times[last], self.times[index]
            if before is not None and now is not None and now >= before:
                self.sources.add("timestamps")
                return now - before
        self.sources.add("stated")
        return self.timing.step_latency_s

    def observe(self, event: ContextEvent, step: int) -> None:
        if not isinstance(event, BackgroundCompactionEvent):
            return
        prepared = self.result.prepared
        if event.phase == "started":
            prepared.append(PreparedSummary(step=step, started_s=self.clock.now()))
            return
        if not prepared:
            return
        last = prepared[-1]
        if event.phase == "ready":
            last.latency_s = event.duration_s
        else:
            last.outcome = "applied" if event.phase == "applied" else "discarded"
            last.waited_s = event.waited_s
            last.reason = event.reason


def _shared_prefix(previous: Sequence[Msg], current: Sequence[Msg], counter: TokenCounter) -> int:
    shared = 0
    for old, new in zip(previous, current, strict=False):
        if old is not new:
            break
        shared += counter.count_message(new)
    return shared


def _new_tail(messages: Sequence[Msg], fresh: Mapping[int, Msg]) -> int:
    """How many trailing messages of a request are sent for the first time: those stored
    since the previous call (``fresh``, by identity; it holds them, so no id is reused)
    and a trailing usage note."""
    count = 0
    for m in reversed(messages):
        if id(m) not in fresh and marker_of(m) is not Marker.USAGE_HINT:
            break
        count += 1
    return count


async def replay_run(
    run: Trajectory,
    *,
    context_size: int,
    config: ContextConfig | None = None,
    summarizer: Summarizer | None = None,
    workspace: BaseWorkspace | None = None,
    counter: TokenCounter | None = None,
    session_id: str | None = None,
    source: str = "",
    dump: RequestDump | None = None,
    cache: CacheKind | None = None,
    prices: Mapping[str, Mapping[str, Any]] | None = None,
    timing: ReplayTiming | None = None,
) -> RunResult:
    """Replay one recorded run as if its agent had been running with contextfold.

    For each recorded assistant turn the engine prepares the request the model would have
    seen (measured per layer), then the recorded answer is appended and the recorded tool
    results are added (truncated and offloaded as the engine decides). The summarizer
    defaults to :class:`ExtractiveSummarizer`; the workspace to a fresh
    :class:`MemoryWorkspace` (an initialized one may be shared between runs). An error
    stops the run and is kept in :attr:`RunResult.error` with the steps measured so far.
    See :mod:`contextfold.replay._metrics` for what each metric means. With ``dump``,
    every request (reasoning and summary calls) is written as it would be sent (through
    ``config.redact`` when the dump has no redactor of its own). With
    ``cache`` (``anthropic``, ``openai`` or ``none``), every call is priced under that
    provider's prompt-cache rules (``prices``: :func:`load_prices` by default) in
    :attr:`RunResult.cost`. With ``timing``, the run is timed on a simulated clock (see
    :class:`ReplayTiming`) and :attr:`RunResult.timing` says how long the agent waited
    per compaction and what became of each summary prepared in the background
    (``config.background``); a summary still in flight when the run ends is discarded.
    """
    counter = counter or counter_for_model("gpt-4o")
    run_dump = None
    if dump is not None:
        redact = config.redact if config is not None else None
        run_dump = dump.run(session_id or run.instance_id, redact=redact)
    ledger = None
    if cache is not None:
        ledger = CostLedger(cache, prices if prices is not None else load_prices(), counter)
    steps_seen = [0]

    def on_summary(call: SummaryCall) -> None:
        if run_dump is not None:
            run_dump.summary(call)
        if ledger is not None:
            ledger.record(
                "summary",
                steps_seen[0],
                call.messages,
                call.tools,
                tool_choice=call.tool_choice,
                output_tokens=call.output_tokens,
            )

    summarizer = summarizer or ExtractiveSummarizer()
    if run_dump is not None or ledger is not None:
        summarizer = ObservedSummarizer(summarizer, on_summary, counter, context_size)
    timer = _Timer(run, timing) if timing is not None else None
    if timer is not None:
        timer.clock.main = asyncio.current_task()
        summarizer = LatentSummarizer(summarizer, timer.clock, timer.timing.summary_latency_s)
    if workspace is None:
        workspace = MemoryWorkspace()
        await workspace.initialize()
    offloader = _CountingOffloader(workspace, counter)
    events: list[ContextEvent] = []

    def on_event(event: ContextEvent) -> None:
        events.append(event)
        if timer is not None:
            timer.observe(event, steps_seen[0])

    engine = ContextEngine(
        counter=counter,
        context_size=context_size,
        summarizer=summarizer,
        config=config or ContextConfig(),
        offloader=offloader,
        session_id=session_id or run.instance_id,
        on_event=on_event,
        clock=timer.clock if timer is not None else None,
    )
    result = RunResult(
        run_id=run.instance_id, source=source, format=run.format, context_size=context_size
    )
    system = run.system or ""
    tools = tools_of(run)
    started = time.perf_counter()
    raw_context = 0
    previous: list[Msg] = []
    previous_raw = 0
    seen = 0
    fresh: dict[int, Msg] = {}  # the messages stored since the last reasoning call
    try:
        for index, msg in enumerate(run.messages):
            if msg.role == "assistant":
                steps_seen[0] = len(result.steps)
                if run_dump is not None:
                    run_dump.step = len(result.steps)
                began = waited = 0.0
                if timer is not None:
                    await timer.clock.advance(timer.gap(index))
                    began = timer.clock.now()
                model_input = await engine.prepare(system, tools)
                if timer is not None:
                    waited = timer.clock.now() - began
                    await timer.clock.settle()
                usage = model_input.usage
                messages = model_input.messages()
                if ledger is not None:
                    ledger.record(
                        "reasoning",
                        len(result.steps),
                        messages,
                        model_input.tools,
                        output_tokens=_output_tokens(msg, counter),
                        new_messages=None if not result.steps else _new_tail(messages, fresh),
                    )
                fresh.clear()
                if run_dump is not None:
                    run_dump.write(
                        "reasoning",
                        messages,
                        model_input.tools,
                        tokens=usage.total,
                        model_input=model_input,
                    )
                fixed = usage.system + usage.tools + usage.overhead
                new_events = events[seen:]
                seen = len(events)
                first = not result.steps
                shared = 0 if first else usage.tools + _shared_prefix(previous, messages, counter)
                result.steps.append(
                    StepUsage(
                        step=len(result.steps),
                        message_index=index,
                        system=usage.system,
                        tools=usage.tools,
                        overhead=usage.overhead,
                        summary=usage.summary,
                        context=usage.context,
                        total=usage.total,
                        raw=fixed + raw_context,
                        shared_prefix=shared,
                        raw_shared_prefix=0 if first else previous_raw - usage.overhead,
                        compressions=sum(isinstance(e, CompressionEvent) for e in new_events),
                        truncations=sum(isinstance(e, TruncationEvent) for e in new_events),
                    )
                )
                previous, previous_raw = messages, fixed + raw_context
                if timer is not None and any(
                    isinstance(e, CompressionEvent) and e.trigger == "auto" for e in new_events
                ):
                    timer.result.waits.append(waited)
            if msg.tool_results:
                stored = await engine.add_tool_results(msg)
            else:
                engine.append(msg)
                stored = msg
            fresh[id(stored)] = stored
            raw_context += counter.count_message(msg)
        if timer is not None:
            await engine.background.discard("the run ended")
            timer.result.seconds = timer.clock.now()
            if len(timer.sources) == 1:
                timer.result.steps_timed = "stated" if "stated" in timer.sources else "timestamps"
            elif timer.sources:
                timer.result.steps_timed = "mixed"
            result.timing = timer.result
    except Exception as exc:  # one broken run must not stop a batch; it is reported
        logger.warning("replay of %s stopped: %s: %s", run.instance_id, type(exc).__name__, exc)
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if run_dump is not None:
            run_dump.close()
    compressions = [e for e in events if isinstance(e, CompressionEvent)]
    result.compressions = len(compressions)
    result.compression_fallbacks = sum(e.method == "truncation" for e in compressions)
    result.truncations = sum(isinstance(e, TruncationEvent) for e in events)
    result.cost = ledger.cost if ledger is not None else None
    result.tokens_offloaded = offloader.tokens
    result.items_offloaded = offloader.items
    result.seconds = time.perf_counter() - started
    return result


async def replay_runs(
    runs: Sequence[tuple[Trajectory, str]],
    *,
    context_size: int,
    config: ContextConfig | None = None,
    summarizer: Summarizer | None = None,
    summarizer_name: str | None = None,
    workspace: BaseWorkspace | None = None,
    counter: TokenCounter | None = None,
    on_run: RunCallback | None = None,
    dump: RequestDump | None = None,
    cache: CacheKind | None = None,
    prices: Mapping[str, Mapping[str, Any]] | None = None,
    timing: ReplayTiming | None = None,
) -> ReplayResult:
    """Replay ``(run, source)`` pairs one after another; ``on_run`` sees each result.

    Session ids are the runs' ``instance_id``, made unique with a ``-2``, ``-3``... suffix,
    so runs sharing a workspace never share a session. ``summarizer_name`` names the
    summarizer in the result (default: its ``repr``).
    """
    counter = counter or counter_for_model("gpt-4o")
    summarizer = summarizer or ExtractiveSummarizer()
    results: list[RunResult] = []
    used: dict[str, int] = {}
    for run, source in runs:
        n = used[run.instance_id] = used.get(run.instance_id, 0) + 1
        session = run.instance_id if n == 1 else f"{run.instance_id}-{n}"
        result = await replay_run(
            run,
            context_size=context_size,
            config=config,
            summarizer=summarizer,
            workspace=workspace,
            counter=counter,
            session_id=session,
            source=source,
            dump=dump,
            cache=cache,
            prices=prices,
            timing=timing,
        )
        results.append(result)
        if on_run is not None:
            outcome = on_run(result)
            if outcome is not None:
                await outcome
    return ReplayResult(
        context_size=context_size,
        summarizer=summarizer_name or repr(summarizer),
        counter=counter.name,
        runs=results,
    )
