"""Compaction prepared in the background (issue 30): the agent does not wait for the summary.

A summarizer that holds until released stands for a slow model: each test controls when
the summary is written, so what the agent waited for is shown by the order of events, not
by timing."""

from __future__ import annotations

import asyncio

import pytest

from contextfold.context import (
    BackgroundCompactionEvent,
    BackgroundConfig,
    CompressionEvent,
    ContextConfig,
    ContextEngine,
    ContextEvent,
    ExtractiveSummarizer,
    SummaryRequest,
    SummaryResult,
    SystemClock,
)
from contextfold.message import Msg, check_openai_valid
from contextfold.model import ScriptedModel

from .ctx_support import call, results, user, words

SYSTEM = "You are a coding agent."
SIZE = 4000


class HeldSummarizer:
    """The extractive summary, written only when the test releases it (or failing)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.release = asyncio.Event()
        self.calls = 0
        self.requests: list[SummaryRequest] = []
        self.fail = fail
        self.inner = ExtractiveSummarizer()

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        self.requests.append(request)
        await self.release.wait()
        if self.fail:
            raise RuntimeError("the summarizer is down")
        return await self.inner.summarize(request)


def engine_with(
    summarizer: HeldSummarizer,
    events: list[ContextEvent],
    *,
    background: bool = True,
    clock: SystemClock | None = None,
) -> ContextEngine:
    model = ScriptedModel([], context_size=SIZE)
    return ContextEngine(
        counter=model.token_counter,
        context_size=SIZE,
        summarizer=summarizer,
        config=ContextConfig(
            trigger_ratio=0.8,
            reserve_ratio=0.1,
            background=BackgroundConfig(start_ratio=0.5) if background else None,
        ),
        on_event=events.append,
        clock=clock,
    )


async def step(engine: ContextEngine, i: int, tokens: int = 300) -> None:
    asst = call("bash", text=f"step {i}")
    engine.append(asst)
    await engine.add_tool_results(results(asst, words(tokens, f"out{i}_")))


def phases(events: list[ContextEvent]) -> list[str]:
    return [e.phase for e in events if isinstance(e, BackgroundCompactionEvent)]


def compressions(events: list[ContextEvent]) -> list[CompressionEvent]:
    return [e for e in events if isinstance(e, CompressionEvent)]


async def until_over_start(engine: ContextEngine, i: int = 0) -> int:
    """Steps until usage passes the start mark (0.5) but not the trigger (0.8)."""
    engine.append(user("Fix the parser."))
    while engine.usage(SYSTEM).total <= 0.5 * SIZE:
        await step(engine, i)
        i += 1
    assert engine.usage(SYSTEM).total <= 0.8 * SIZE
    return i


@pytest.mark.serial  # a wait < 0.5 s, measured alone
async def test_the_agent_goes_on_while_the_summary_is_written_and_it_is_swapped_in() -> None:
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)
    i = await until_over_start(engine)
    first = await engine.prepare(SYSTEM)  # starts the summary of a snapshot
    await asyncio.sleep(0)
    assert phases(events) == ["started"]
    assert held.calls == 0  # asked once this step's request is answered (the reply)
    assert first.summary is None  # the agent works from the full context meanwhile
    # More steps while the summarizer is still busy: none waits for it.
    later: list[Msg] = []
    while engine.usage(SYSTEM).total <= 0.8 * SIZE:
        await step(engine, i)
        later.append(engine.context[-2])
        i += 1
        model_input = (
            await engine.prepare(SYSTEM) if engine.usage(SYSTEM).total <= 0.8 * SIZE else None
        )
        assert model_input is None or model_input.summary is None
        await asyncio.sleep(0)
    assert held.calls == 1
    assert compressions(events) == []
    held.release.set()
    await asyncio.sleep(0.01)
    assert phases(events) == ["started", "ready"]
    # At the trigger the prepared summary is swapped in: one summarizer call in all.
    model_input = await engine.prepare(SYSTEM)
    assert phases(events) == ["started", "ready", "applied"]
    assert held.calls == 1
    assert len(compressions(events)) == 1
    assert model_input.summary is not None
    assert model_input.usage.total <= 0.8 * SIZE
    # Every step that arrived after the snapshot is still there, whole.
    kept_ids = {m.id for m in model_input.context}
    assert all(m.id in kept_ids for m in later)
    assert check_openai_valid(model_input.messages()) == []
    applied = [e for e in events if isinstance(e, BackgroundCompactionEvent)][-1]
    assert applied.waited_s < 0.5  # it was ready: nothing to wait for
    # The event reports the usage it was swapped in at (over the trigger), not the
    # snapshot's (just past the start mark), and what it came down to.
    (compression,) = compressions(events)
    assert compression.tokens_before > 0.8 * SIZE
    assert compression.tokens_after == model_input.usage.total < compression.tokens_before


async def test_at_the_trigger_the_agent_waits_only_for_what_is_left() -> None:
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)
    i = await until_over_start(engine)
    await engine.prepare(SYSTEM)
    while engine.usage(SYSTEM).total <= 0.8 * SIZE:
        await step(engine, i)
        i += 1
    waiting = asyncio.create_task(engine.prepare(SYSTEM))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # over the trigger: it waits for the summary in flight
    held.release.set()
    model_input = await waiting
    # Applied; the next one may start at once (the growth here is fast: no real time).
    assert phases(events)[:3] == ["started", "ready", "applied"]
    assert held.calls == 1 + phases(events)[3:].count("started")
    assert model_input.summary is not None


async def test_a_prepared_summary_the_context_outgrew_is_discarded() -> None:
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)
    i = await until_over_start(engine)
    await engine.prepare(SYSTEM)
    await step(engine, i)  # the model's reply lets the summary be asked
    i += 1
    held.release.set()
    await asyncio.sleep(0.01)
    # A compaction by other means changes what the prepared one was made from.
    assert await engine.compress(SYSTEM, force=True) is not None
    while engine.usage(SYSTEM).total <= 0.8 * SIZE:
        await step(engine, i)
        i += 1
    model_input = await engine.prepare(SYSTEM)
    discarded = [e for e in events if isinstance(e, BackgroundCompactionEvent)]
    assert "discarded" in [e.phase for e in discarded]
    assert any(e.reason == "the context changed" for e in discarded)
    assert engine.background.discarded >= 1
    assert engine.background.applied == 0
    assert model_input.usage.total <= 0.8 * SIZE  # compacted the usual way instead


async def test_a_failed_background_summary_leaves_the_state_and_the_trigger_compacts() -> None:
    held, events = HeldSummarizer(fail=True), []
    engine = engine_with(held, events)
    i = await until_over_start(engine)
    await engine.prepare(SYSTEM)
    await step(engine, i)  # the model's reply lets the summary be asked
    i += 1
    before = engine.context
    held.release.set()
    await asyncio.sleep(0.01)
    assert phases(events) == ["started", "discarded"]
    assert engine.context == before
    assert engine.summary_layer is None
    # Not retried for the same state on every step; the trigger compacts as usual.
    await step(engine, i)
    await engine.prepare(SYSTEM) if engine.usage(SYSTEM).total <= 0.8 * SIZE else None
    assert phases(events) == ["started", "discarded"]
    held.fail = False
    while engine.usage(SYSTEM).total <= 0.8 * SIZE:
        i += 1
        await step(engine, i)
    model_input = await engine.prepare(SYSTEM)
    assert model_input.summary is not None


async def test_cancelling_the_wait_leaves_the_state_and_the_summary_in_flight() -> None:
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)
    i = await until_over_start(engine)
    await engine.prepare(SYSTEM)
    while engine.usage(SYSTEM).total <= 0.8 * SIZE:
        await step(engine, i)
        i += 1
    before = engine.context
    waiting = asyncio.create_task(engine.prepare(SYSTEM))
    await asyncio.sleep(0.02)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert engine.context == before
    assert engine.summary_layer is None
    held.release.set()
    model_input = await engine.prepare(SYSTEM)
    assert phases(events) == ["started", "ready", "applied"]
    assert held.calls == 1
    assert model_input.summary is not None


async def test_discard_drops_the_summary_in_flight() -> None:
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)
    await until_over_start(engine)
    await engine.prepare(SYSTEM)
    await asyncio.sleep(0)
    await engine.background.discard("the run ended")
    assert phases(events) == ["started", "discarded"]
    assert [e.reason for e in events if isinstance(e, BackgroundCompactionEvent)][-1] == (
        "the run ended"
    )
    assert not engine.background.busy


async def test_without_background_the_agent_waits_at_the_trigger() -> None:
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events, background=False)
    i = await until_over_start(engine)
    await engine.prepare(SYSTEM)
    await asyncio.sleep(0)
    assert held.calls == 0
    assert phases(events) == []
    while engine.usage(SYSTEM).total <= 0.8 * SIZE:
        await step(engine, i)
        i += 1
    waiting = asyncio.create_task(engine.prepare(SYSTEM))
    await asyncio.sleep(0.02)
    assert held.calls == 1
    assert not waiting.done()
    held.release.set()
    assert (await waiting).summary is not None


@pytest.mark.parametrize("start", [0.05, 0.1, 0.8, 0.9])
def test_the_start_mark_must_lie_between_reserve_and_trigger(start: float) -> None:
    with pytest.raises(ValueError, match="start_ratio"):
        ContextConfig(
            trigger_ratio=0.8, reserve_ratio=0.1, background=BackgroundConfig(start_ratio=start)
        )


class StoppedClock(SystemClock):
    """A clock the test sets."""

    def __init__(self) -> None:
        self.time = 0.0

    def now(self) -> float:
        return self.time


def test_the_next_summary_starts_early_enough_for_its_latency() -> None:
    from contextfold.context import _prefetch

    clock = StoppedClock()
    config = ContextConfig(  # the agent waits at the trigger (8,000 of 10,000)
        trigger_ratio=0.8,
        reserve_ratio=0.1,
        background=BackgroundConfig(start_ratio=0.6, wait_ratio=0.8),
    )

    async def emit(event: ContextEvent) -> None:
        pass

    def run(latency: float | None, usage: list[int]) -> list[bool]:
        prefetch = _prefetch.Prefetch(emit, clock)
        if latency is not None:
            prefetch.note_latency(latency)
        found = []
        for second, tokens in enumerate(usage):
            clock.time = float(second)
            prefetch.observe(tokens)
            found.append(prefetch.due(tokens, config, 10_000))
        return found

    # Usage grows 400, 400, then 600 tokens a second toward a trigger at 8,000.
    growing = [3600, 4000, 4400, 5000]
    # The last summary took 5 s: at 5,000 tokens the trigger is 3,000 tokens away, less
    # than 1.25 x 5 s at 500 tokens a second.
    assert run(5.0, growing) == [False, False, False, True]
    # No summary measured yet: 10 s assumed (assumed_latency_s), so from 4,400 tokens on
    # (at 4,000 one step has grown the context: one step is not a rate yet).
    assert run(None, growing) == [False, False, True, True]
    # Before any growth is seen: the start mark (6,000).
    assert run(None, [5900]) == [False]
    assert run(None, [6100]) == [True]
    # Never below halfway between reserve and start mark (3,500), however slow.
    assert run(1000.0, [2000, 3000, 3400, 3600]) == [False, False, False, True]
    # A fast summary and slow growth: past the start mark is too early (the later the
    # snapshot, the more it folds); it starts once 8,000 comes within 1.25 x 1 s at the
    # growth rate (912 tokens a second at 7,700).
    assert run(1.0, [5000, 5100, 6100, 6200, 7700]) == [False, False, False, False, True]


async def test_past_the_trigger_the_agent_goes_on_until_the_wait_mark() -> None:
    # The trigger's headroom is for a compaction call; one is in flight already, so the
    # agent waits only once usage plus the model's reply would pass wait_ratio (0.9) of
    # the window.
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)
    i = await until_over_start(engine)
    await engine.prepare(SYSTEM)
    await asyncio.sleep(0)
    assert phases(events) == ["started"]
    while engine.usage(SYSTEM).total <= 0.8 * SIZE:
        await step(engine, i, tokens=40)
        i += 1
        if engine.usage(SYSTEM).total <= 0.8 * SIZE:
            await engine.prepare(SYSTEM)
    went_on = 0
    while engine.usage(SYSTEM).total + engine.background.typical_reply <= 0.9 * SIZE:
        model_input = await asyncio.wait_for(engine.prepare(SYSTEM), timeout=5)
        assert model_input.summary is None  # the full context, over the trigger
        assert model_input.usage.total > 0.8 * SIZE
        went_on += 1
        await step(engine, i, tokens=40)
        i += 1
    assert went_on >= 2
    assert held.calls == 1
    assert compressions(events) == []
    waiting = asyncio.create_task(engine.prepare(SYSTEM))
    await asyncio.sleep(0.02)
    assert not waiting.done()  # now it waits for the summary
    held.release.set()
    model_input = await waiting
    assert model_input.summary is not None
    # Applied; the next one may start at once (the growth here is fast: no real time).
    assert phases(events)[:3] == ["started", "ready", "applied"]
    assert model_input.usage.total <= 0.8 * SIZE


def test_a_summary_prepared_on_an_event_loop_that_ended_is_dropped() -> None:
    # A framework called once per ``asyncio.run``: the task dies with its loop.
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)

    async def first() -> int:
        i = await until_over_start(engine)
        await engine.prepare(SYSTEM)
        await asyncio.sleep(0)
        return i

    i = asyncio.run(first())
    assert engine.background.busy

    async def second() -> None:
        held.release = asyncio.Event()
        held.release.set()
        j = i
        while engine.usage(SYSTEM).total <= 0.8 * SIZE:
            await step(engine, j)
            j += 1
        model_input = await engine.prepare(SYSTEM)
        assert model_input.summary is not None  # compacted the usual way

    asyncio.run(second())
    found = [e for e in events if isinstance(e, BackgroundCompactionEvent)]
    assert found[-1].phase == "discarded"
    assert found[-1].reason == "its event loop ended"


def test_a_summary_dropped_because_its_loop_ended_is_reported_when_the_next_starts() -> None:
    # The next one is started before any trigger: the dropped one still gets its event,
    # so the events and ``background.discarded`` tell the same count.
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)

    async def first() -> int:
        i = await until_over_start(engine)
        await engine.prepare(SYSTEM)
        await asyncio.sleep(0)
        return i

    i = asyncio.run(first())

    async def second() -> None:
        held.release = asyncio.Event()  # the old one belongs to the ended loop
        await step(engine, i)
        assert engine.usage(SYSTEM).total <= 0.8 * SIZE
        await engine.prepare(SYSTEM)  # past the start mark: drops the old, starts anew

    asyncio.run(second())
    found = [e for e in events if isinstance(e, BackgroundCompactionEvent)]
    assert [e.phase for e in found] == ["started", "discarded", "started"]
    assert found[1].reason == "its event loop ended"
    assert engine.background.discarded == 1


async def test_a_swap_keeps_no_reserve_of_the_snapshot_beside_what_arrived_after_it() -> None:
    # Everything appended after the snapshot is kept at the swap, and it is already more
    # than ``reserve_ratio``: the snapshot keeps only what must be kept (its newest turn,
    # the user's request), not a reserve of its own besides (~5% of the window a swap).
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)
    engine.append(user("Fix the parser."))
    i = 0
    while engine.usage(SYSTEM).total <= 0.5 * SIZE:
        await step(engine, i, tokens=40)  # small steps: the reserve (400) holds several
        i += 1
    await engine.prepare(SYSTEM)
    snapshot = engine.context
    await asyncio.sleep(0)
    assert phases(events) == ["started"]
    held.release.set()
    await step(engine, i, tokens=40)  # the model's reply lets the summary be asked
    i += 1
    await asyncio.sleep(0.01)
    while engine.usage(SYSTEM).total <= 0.8 * SIZE:
        await step(engine, i, tokens=40)
        i += 1
        if engine.usage(SYSTEM).total <= 0.8 * SIZE:
            await engine.prepare(SYSTEM)
    model_input = await engine.prepare(SYSTEM)
    assert phases(events) == ["started", "ready", "applied"]
    from_snapshot = [m for m in model_input.context if any(m is s for s in snapshot)]
    allowed = {snapshot[0].id, snapshot[-2].id, snapshot[-1].id}  # request, newest turn
    assert [m.id for m in from_snapshot if m.id not in allowed] == []
    assert check_openai_valid(model_input.messages()) == []


class FrozenClock(SystemClock):
    """The system's waits, at a time that does not move: no growth rate is ever seen."""

    def now(self) -> float:
        return 0.0


async def jumped_past_the_trigger(
    held: HeldSummarizer, events: list[ContextEvent]
) -> tuple[ContextEngine, int]:
    """An engine whose context grew in small steps to 30% of the window, then jumped past
    the trigger in one step (from below the start mark: nothing prepared); and the index of
    that step."""
    engine = engine_with(held, events, clock=FrozenClock())
    engine.append(user("Fix the parser."))
    i = 0
    while engine.usage(SYSTEM).total <= 0.3 * SIZE:
        await step(engine, i, tokens=40)
        i += 1
        await engine.prepare(SYSTEM)
    await step(engine, i, tokens=int(0.8 * SIZE - engine.usage(SYSTEM).total) // 2 + 60)
    return engine, i


async def test_a_step_that_jumps_past_the_trigger_starts_one_and_the_agent_goes_on() -> None:
    # Nothing was prepared (the jump came from below the start mark): the summary starts
    # at the trigger and the agent goes on from the full context until the wait mark.
    held, events = HeldSummarizer(), []
    engine, i = await jumped_past_the_trigger(held, events)
    usage = engine.usage(SYSTEM).total
    assert 0.8 * SIZE < usage < 0.9 * SIZE - 100
    assert phases(events) == []
    model_input = await asyncio.wait_for(engine.prepare(SYSTEM), timeout=5)
    await asyncio.sleep(0)
    assert phases(events) == ["started"]
    assert model_input.summary is None  # not waiting: the full context
    assert compressions(events) == []
    held.release.set()
    await asyncio.sleep(0.01)
    await step(engine, i + 1, tokens=40)
    model_input = await engine.prepare(SYSTEM)
    assert phases(events)[:3] == ["started", "ready", "applied"]
    assert model_input.summary is not None
    assert model_input.usage.total <= 0.8 * SIZE


async def test_when_the_context_grows_fast_the_summaries_chain() -> None:
    # 0.5 s steps of ~700 tokens in a 16,000-token window and a 5 s summary: the context
    # grows ~7,000 tokens while one is written. Each prepared summary is swapped in as soon
    # as it is ready (the next one being due at once) and the next starts in that step,
    # one in flight at a time; the agent waits at most two steps for each (the ~2 x 7,000
    # tokens a chain holds at its peak, plus the summary, pass the wait mark by a step).
    from contextfold.replay import LatentSummarizer, SimulatedClock

    size = 16_000
    clock = SimulatedClock()
    clock.main = asyncio.current_task()
    timeline: list[tuple[float, str]] = []

    def record(event: ContextEvent) -> None:
        if isinstance(event, BackgroundCompactionEvent):
            timeline.append((clock.now(), event.phase))

    engine = ContextEngine(
        counter=ScriptedModel([], context_size=size).token_counter,
        context_size=size,
        summarizer=LatentSummarizer(ExtractiveSummarizer(), clock, 5.0),
        config=ContextConfig(background=BackgroundConfig()),
        on_event=record,
        clock=clock,
    )
    engine.append(user("Read every log."))
    waits: list[float] = []
    for i in range(80):
        before, applied = clock.now(), len([p for _, p in timeline if p == "applied"])
        model_input = await engine.prepare(SYSTEM)
        await clock.settle()
        assert model_input.usage.total <= 0.9 * size
        if len([p for _, p in timeline if p == "applied"]) > applied:
            waits.append(clock.now() - before)
        await clock.advance(0.5)
        await step(engine, i, tokens=340)  # about 700 tokens
    assert len(waits) >= 6
    assert max(waits[1:]) <= 1.0  # after the first, at most two steps
    # Chained: from the second on, the next starts in the step the last was applied.
    applied_at = [t for t, p in timeline if p == "applied"]
    started_at = {t for t, p in timeline if p == "started"}
    assert all(t in started_at for t in applied_at[1:])
    phases_seen = [p for _, p in timeline]
    assert "discarded" not in phases_seen[:-1]


async def test_a_snapshot_of_one_turn_below_the_trigger_folds_that_turn() -> None:
    # One step read a large file right after the request: past the start mark. The
    # snapshot's newest turn is folded (the model reads it in this step, before any swap;
    # at the trigger a blocking compaction would fold it too), the request is kept.
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)
    engine.append(user("Fix the parser."))
    await step(engine, 0, tokens=2400)
    assert 0.5 * SIZE < engine.usage(SYSTEM).total <= 0.8 * SIZE
    model_input = await engine.prepare(SYSTEM)
    assert model_input.summary is None
    await step(engine, 1, tokens=40)  # the model's reply: the summary is asked now
    await asyncio.sleep(0.01)
    assert phases(events) == ["started"]
    assert held.calls == 1
    folded = held.requests[0].messages
    assert len(folded) == 2
    assert folded[0].tool_calls
    assert folded[1].tool_results


async def test_past_the_trigger_only_the_models_reply_must_fit_below_the_wait_mark() -> None:
    # The request goes out at its usage and the model's reply is added to the window
    # beside it; the step's tool results arrive after the reply and are checked before
    # the next request. So the agent goes on while usage plus a typical reply stays
    # within the wait mark, though usage plus a whole step (reply and results) would not.
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)
    i = await until_over_start(engine)
    await engine.prepare(SYSTEM)
    await asyncio.sleep(0)
    assert phases(events) == ["started"]
    mark = 0.9 * SIZE
    while engine.usage(SYSTEM).total + engine.background.typical_step <= mark:
        await step(engine, i, tokens=150)
        i += 1
        if engine.usage(SYSTEM).total <= 0.8 * SIZE:
            await engine.prepare(SYSTEM)
    usage = engine.usage(SYSTEM).total
    assert usage > 0.8 * SIZE
    assert usage + engine.background.typical_step > mark
    reply = engine.counter.count_message(engine.context[-2])
    assert usage + reply <= mark
    model_input = await asyncio.wait_for(engine.prepare(SYSTEM), timeout=5)
    assert model_input.summary is None  # went on from the full context
    assert held.calls == 1
    assert compressions(events) == []
