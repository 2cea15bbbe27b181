"""When a compaction prepared in the background starts and when it is swapped in (issue 30:
cost no worse than a blocking compaction).

A swap keeps every turn that arrived after the summary's snapshot; a blocking compaction
at the trigger keeps only the newest. So a summary is timed to be ready when usage crosses
the trigger (not only before the wait mark, where the agent would wait), and one that is
ready is swapped in at the next step rather than held while more turns arrive."""

from __future__ import annotations

import asyncio

from contextfold.context import ContextEngine
from contextfold.message import Msg

from .ctx_support import call, results, words
from .test_context_background import (
    SIZE,
    SYSTEM,
    HeldSummarizer,
    StoppedClock,
    engine_with,
    phases,
    step,
    until_over_start,
)

TRIGGER = int(0.8 * SIZE)


async def test_with_slow_growth_the_summary_starts_to_be_ready_at_the_trigger() -> None:
    # About 100 tokens every 4 s and summaries of 5 s: the wait mark (90%) is far beyond
    # what arrives during one summary, so timed on the wait mark alone the summary would
    # start only past the trigger, and the agent would send the full context there until
    # it is ready. Timed on the trigger, it starts while usage is still below it.
    held, events = HeldSummarizer(), []
    clock = StoppedClock()
    engine = engine_with(held, events, clock=clock)
    engine.background.note_latency(5.0)
    engine.append(call("bash", text="start"))  # a first turn, so steps pair up
    await engine.add_tool_results(_results(engine))
    i, started_at = 0, None
    while engine.usage(SYSTEM).total <= TRIGGER:
        await step(engine, i, tokens=90)
        i += 1
        clock.time += 4.0
        usage = engine.usage(SYSTEM).total
        await engine.prepare(SYSTEM)
        if engine.background.busy and started_at is None:
            started_at = usage
    assert started_at is not None
    assert started_at <= TRIGGER  # started below the trigger, not at the crossing
    # ... and no earlier than needed: within two steps (~200 tokens each) of it.
    assert TRIGGER - started_at < 400
    await engine.background.discard()


async def test_a_ready_summary_is_swapped_in_below_the_trigger() -> None:
    held, events = HeldSummarizer(), []
    engine = engine_with(held, events, clock=StoppedClock())
    i = await until_over_start(engine)
    await engine.prepare(SYSTEM)  # starts the summary of a snapshot
    engine.append(call("bash", text=f"step {i}"))  # the model's reply: the summary is asked
    held.release.set()
    await asyncio.sleep(0.01)
    assert phases(events) == ["started", "ready"]
    await engine.add_tool_results(_results(engine))
    i += 1
    before = engine.usage(SYSTEM).total
    assert before <= TRIGGER
    # Ready and still below the trigger: swapped in now. Held until the trigger, it would
    # keep every turn arriving meanwhile beside the summary.
    model_input = await engine.prepare(SYSTEM)
    assert phases(events) == ["started", "ready", "applied"]
    assert model_input.summary is not None
    assert model_input.usage.total < before


def _results(engine: ContextEngine) -> Msg:
    """Results (40 words) for the call the engine's last message made."""
    last = engine.last
    assert last is not None
    return results(last, words(40, "out"))
