"""``benchmarks/background_compaction.py``'s figures: the wait per compaction read from the
engine's events, the summary latency timed in the same run, and the shares between them
(the issue-30 target is stated as such a share)."""

from __future__ import annotations

import asyncio

import pytest

from benchmarks import background_compaction as bench
from contextfold.context import (
    BackgroundCompactionEvent,
    CompressionEvent,
    SummaryRequest,
    SummaryResult,
)


def compression(duration_s: float) -> CompressionEvent:
    return CompressionEvent(
        trigger="auto",
        method="summary",
        tokens_before=13_000,
        tokens_after=3_000,
        messages_removed=20,
        messages_kept=4,
        duration_s=duration_s,
    )


def test_a_blocking_compaction_waits_its_duration_a_prepared_one_what_it_waited() -> None:
    events = [
        compression(5.0),  # blocking: the step stood still for the whole summary
        BackgroundCompactionEvent(phase="started"),
        BackgroundCompactionEvent(phase="ready", duration_s=5.0),
        BackgroundCompactionEvent(phase="applied", duration_s=6.0, waited_s=0.25),
        compression(0.01),  # the swap's own event: its wait is the prepared one's
        BackgroundCompactionEvent(phase="started"),
        BackgroundCompactionEvent(phase="discarded", reason="the run ended"),
    ]
    assert bench.waits(events) == ([5.0, 0.25], 1, 1)


def test_waits_are_shares_of_the_runs_median_summary_latency() -> None:
    f = bench.figures([0.0, 0.0, 1.0, 4.0], [10.0, 30.0, 20.0])
    assert (f.median, f.p95, f.latency) == (0.5, 4.0, 20.0)
    assert (f.median_share, f.p95_share) == (0.025, 0.2)
    none = bench.figures([], [])
    assert (none.median_share, none.p95_share) == (0.0, 0.0)


def test_the_timed_summarizer_times_every_call_failed_ones_too() -> None:
    class Inner:
        calls = 0

        async def summarize(self, request: SummaryRequest) -> SummaryResult:
            self.calls += 1
            await asyncio.sleep(0.05)
            if self.calls == 2:
                raise RuntimeError("the model is down")
            return SummaryResult(fields=bench.FIELDS)

    timed = bench.TimedSummarizer(Inner())
    request = SummaryRequest(messages=[], previous=None, instructions="", hints=[], schema={})
    asyncio.run(timed.summarize(request))
    with pytest.raises(RuntimeError):
        asyncio.run(timed.summarize(request))
    assert timed.failures == 1
    assert len(timed.latencies) == 2
    assert min(timed.latencies) >= 0.05


def test_blocking_the_agent_waits_for_the_whole_summary_it_timed() -> None:
    r = asyncio.run(bench.run(steps=40, step_s=0.0, summary_s=0.1, background=False))
    assert r["waits"], "the reply passed the trigger"
    assert len(r["latencies"]) == len(r["waits"])
    f = bench.figures(r["waits"], r["latencies"])
    assert f.median_share >= 0.9
    assert (r["prepared"], r["discarded"], r["failures"]) == (0, 0, 0)
