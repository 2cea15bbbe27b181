"""What a compaction prepared in the background folds, and when it asks for its summary
(issue 30: retention and cost no worse than a blocking compaction).

A blocking compaction at the trigger folds everything but the newest turn (and the
reserve). One prepared in the background reads a snapshot taken before the trigger and is
swapped in at a later step, keeping everything that arrived since: to leave the context as
small as a blocking compaction would, it also folds the snapshot's newest turn, which the
model reads in the step the snapshot was taken in, before the swap."""

from __future__ import annotations

import asyncio

from contextfold.context import ContextEvent
from contextfold.message import check_openai_valid

from .ctx_support import call, user, words
from .test_context_background import (
    SIZE,
    SYSTEM,
    HeldSummarizer,
    StoppedClock,
    engine_with,
    jumped_past_the_trigger,
    phases,
    step,
    until_over_start,
)


async def test_a_snapshot_taken_below_the_trigger_folds_its_newest_turn() -> None:
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)
    i = await until_over_start(engine)
    snapshot = engine.context
    await engine.prepare(SYSTEM)  # starts one; this step goes on from the full context
    await step(engine, i)  # the model read the snapshot and replied
    i += 1
    await asyncio.sleep(0.01)
    assert phases(events) == ["started"]
    (request,) = held.requests
    # The newest turn (the last call and its result) is folded with the rest; only the
    # user's request, kept at the head of the kept context, is not.
    assert [m.id for m in request.messages] == [m.id for m in snapshot[1:]]
    held.release.set()
    await asyncio.sleep(0.01)
    while engine.usage(SYSTEM).total <= 0.8 * SIZE:
        await step(engine, i)
        i += 1
    model_input = await engine.prepare(SYSTEM)
    assert phases(events)[:3] == ["started", "ready", "applied"]
    # At the swap, of the snapshot only the request is left: what is kept arrived after
    # it, as the newest turn kept by a blocking compaction at this step would have.
    from_snapshot = [m.id for m in model_input.context if any(m is s for s in snapshot)]
    assert from_snapshot == [snapshot[0].id]
    assert check_openai_valid(model_input.messages()) == []


async def test_a_snapshot_taken_past_the_trigger_keeps_its_newest_turn() -> None:
    # A step jumped past the trigger: a blocking compaction now would keep this newest
    # turn, which the model has not read yet. The summary started here keeps it too.
    held, events = HeldSummarizer(), []
    engine, _ = await jumped_past_the_trigger(held, events)
    assert 0.8 * SIZE < engine.usage(SYSTEM).total < 0.9 * SIZE - 100
    newest = engine.context[-2:]
    model_input = await asyncio.wait_for(engine.prepare(SYSTEM), timeout=5)
    assert model_input.summary is None
    await asyncio.sleep(0.01)
    (request,) = held.requests
    folded = {m.id for m in request.messages}
    assert folded
    assert not folded & {m.id for m in newest}


def test_one_step_of_growth_is_not_yet_a_rate() -> None:
    # The first step of a run read a large file in a second: 3,600 tokens a second. With
    # the latency assumed for a first summary (10 s), that one burst would start a summary
    # at a third of the window, whose snapshot folds little and keeps all that comes after
    # it. One step is not a rate: until two steps have grown the context, the start mark.
    from contextfold.context import BackgroundConfig, ContextConfig, _prefetch

    clock = StoppedClock()
    config = ContextConfig(trigger_ratio=0.8, reserve_ratio=0.05, background=BackgroundConfig())

    async def emit(event: ContextEvent) -> None:
        pass

    prefetch = _prefetch.Prefetch(emit, clock)
    found = []
    for second, tokens in enumerate([1700, 5300, 5500]):
        clock.time = float(second)
        prefetch.observe(tokens)
        found.append(prefetch.due(tokens, config, 16_000))
    assert found == [False, False, True]  # from the second step on, the rate decides


async def test_the_summary_is_asked_once_the_request_of_its_step_is_answered() -> None:
    # The summary extends the request of the step it started in (its snapshot's newest
    # turn is folded, and only that request holds it). Sent at the same moment as that
    # request, it would write the prefix into the provider's cache a second time; once
    # the model's reply has arrived, the cache holds it and the summary reads it.
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)
    i = await until_over_start(engine)
    stored = engine.context
    await engine.prepare(SYSTEM)
    await asyncio.sleep(0.01)
    assert phases(events) == ["started"]
    assert held.calls == 0  # the step's request is still in flight
    engine.append(call("bash", text=f"step {i}"))  # the model's reply
    await asyncio.sleep(0.01)
    assert held.calls == 1
    (request,) = held.requests
    assert request.prefix is not None
    assert list(request.prefix.context) == list(stored)  # the request sent, whole


async def test_a_summary_waiting_for_the_answer_is_asked_when_the_agent_needs_it() -> None:
    # No reply came (the next message is the user's), and the next step is past the wait
    # mark: the agent waits for the summary, which is asked now rather than never.
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events)
    await until_over_start(engine)
    await engine.prepare(SYSTEM)
    await asyncio.sleep(0.01)
    assert held.calls == 0
    engine.append(user(words(int(0.95 * SIZE - engine.usage(SYSTEM).total), "more")))
    waiting = asyncio.create_task(engine.prepare(SYSTEM))
    await asyncio.sleep(0.01)
    assert held.calls == 1
    held.release.set()
    model_input = await asyncio.wait_for(waiting, timeout=5)
    assert model_input.summary is not None
