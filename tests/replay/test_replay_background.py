"""Timed replays (issue 30): background compaction on a simulated clock, its figures per
run, in the terminal, the JSON and the HTML report."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from contextfold.context import BackgroundConfig, ContextConfig
from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock
from contextfold.replay import (
    ReplayTiming,
    SimulatedClock,
    Trajectory,
    load_trajectory,
    replay_run,
    replay_runs,
)

runner = CliRunner(env={"COLUMNS": "240", "TERMINAL_WIDTH": "240"})


def _plain(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def steady_run(steps: int = 60, tokens: int = 250) -> Trajectory:
    """An agent reading one log per step: the context grows by about ``tokens`` a step."""
    messages: list[Msg] = [Msg("user", "Read every log and report the errors.", "user")]
    for i in range(steps):
        call = ToolCallBlock(id=f"c{i}", name="read_log", input={"n": i})
        messages.append(
            Msg.of_blocks("assistant", [TextBlock(text=f"Reading log {i}."), call], "assistant")
        )
        words = " ".join(f"log{i}_line{j} status {200 + j % 3}" for j in range(tokens // 5))
        result = ToolResultBlock(id=f"c{i}", name="read_log", output=words)
        messages.append(Msg.of_blocks("user", [result], "user"))
    messages.append(Msg("assistant", "Done: errors in every log.", "assistant"))
    return Trajectory(instance_id="steady", system="You read logs.", messages=messages)


async def test_the_clock_moves_only_when_told() -> None:
    clock = SimulatedClock()
    clock.main = asyncio.current_task()
    woke: list[float] = []

    async def background() -> str:
        await clock.sleep(5.0)
        woke.append(clock.now())
        return "ready"

    task = asyncio.create_task(background())
    await clock.settle()
    assert clock.now() == 0.0
    assert not task.done()
    await clock.advance(2.0)
    assert clock.now() == 2.0
    assert not task.done()
    await clock.sleep(1.0)  # the agent's own time
    assert clock.now() == 3.0
    assert await clock.wait(task) == "ready"  # the agent waits for what is left: 2 s
    assert clock.now() == 5.0
    assert woke == [5.0]
    later = asyncio.create_task(background())
    await clock.settle()
    await clock.advance(7.0)  # it became ready at 10 s, while the agent worked
    assert woke == [5.0, 10.0]
    assert later.done()
    assert clock.now() == 12.0
    with pytest.raises(ValueError, match="forward"):
        await clock.advance(-1.0)


async def test_work_in_a_thread_after_a_wake_finishes_at_its_own_time() -> None:
    # A summary job that wakes at the end of its latency then offloads what it folded:
    # the in-memory workspace writes in a thread, which takes real time. The clock must
    # not move on (nor the agent see the job unfinished) before that work is done, or a
    # replay's figures would depend on how loaded the machine is.
    clock = SimulatedClock()
    clock.main = asyncio.current_task()
    finished: list[float] = []

    async def job() -> None:
        await clock.sleep(1.0)
        await asyncio.to_thread(time.sleep, 0.2)
        finished.append(clock.now())

    task = asyncio.create_task(job())
    await clock.settle()
    await clock.advance(1.5)
    assert task.done()
    await clock.advance(10.0)
    assert finished == [1.0]


async def test_work_let_go_now_starts_before_the_clock_moves_on() -> None:
    # A summary job that waits for the model's reply is let go when the replay stores the
    # recorded reply, and the replay then moves the clock on to the next call: the job
    # starts at the time it was let go (its summary is ready 5 s later), not at the next
    # call's.
    clock = SimulatedClock()
    clock.main = asyncio.current_task()
    go = asyncio.Event()
    started: list[float] = []

    async def job() -> float:
        await go.wait()
        started.append(clock.now())
        await clock.sleep(5.0)
        return clock.now()

    task = asyncio.create_task(job())
    await clock.settle()
    go.set()  # no await between this and the move
    await clock.advance(8.0)
    assert started == [0.0]
    assert task.done()
    assert task.result() == 5.0


async def test_blocking_compaction_waits_the_whole_summary_latency() -> None:
    timing = ReplayTiming(summary_latency_s=4.0, step_latency_s=1.0)
    result = await replay_run(steady_run(), context_size=4000, timing=timing)
    assert result.timing is not None
    assert result.compressions >= 2
    assert result.timing.waits == [4.0] * result.compressions
    assert result.timing.prepared == []
    assert result.timing.steps_timed == "stated"
    # 60 recorded gaps of 1 s, plus the waits.
    assert result.timing.seconds == pytest.approx(60 * 1.0 + 4.0 * result.compressions)


async def test_background_compaction_hides_a_summary_shorter_than_the_runway() -> None:
    config = ContextConfig(background=BackgroundConfig())
    timing = ReplayTiming(summary_latency_s=2.0, step_latency_s=1.0)
    result = await replay_run(steady_run(), context_size=8000, config=config, timing=timing)
    t = result.timing
    assert t is not None
    assert result.error is None
    assert t.applied >= 2
    assert t.waits
    assert max(t.waits) == 0.0
    assert len(t.waits) == result.compressions
    for p in t.prepared:
        assert p.latency_s == pytest.approx(2.0)  # the stated latency, on the clock
        if p.outcome == "applied":
            assert p.waited_s == 0.0
    # Whatever is still in flight when the run ends is dropped, with a reason.
    assert all(p.reason == "the run ended" for p in t.prepared if p.outcome == "discarded")
    assert t.applied + t.discarded == len(t.prepared)


async def test_background_compaction_with_a_slow_summary_waits_only_for_the_rest() -> None:
    config = ContextConfig(background=BackgroundConfig())
    timing = ReplayTiming(summary_latency_s=30.0, step_latency_s=1.0)
    result = await replay_run(steady_run(), context_size=8000, config=config, timing=timing)
    t = result.timing
    assert t is not None
    assert t.applied >= 1
    applied = [p for p in t.prepared if p.outcome == "applied"]
    assert all(0.0 < p.waited_s < 30.0 for p in applied)
    assert all(p.latency_s == pytest.approx(30.0) for p in applied)
    assert sorted(p.waited_s for p in applied) == sorted(w for w in t.waits if 0 < w < 30)


def test_mini_swe_agent_runs_are_timed_by_their_recorded_timestamps(
    swe_files: list[Path],
) -> None:
    path = swe_files[0]
    run = load_trajectory(path)
    raw = json.loads(path.read_text())["messages"]
    created = [m["extra"]["response"]["created"] for m in raw if m["role"] == "assistant"]
    assert len(run.times) == len(run.messages)
    assert [t for t in run.times if t is not None] == [float(c) for c in created]
    timing = ReplayTiming(summary_latency_s=0.0, step_latency_s=1000.0)
    result = asyncio.run(replay_run(run, context_size=64_000, timing=timing))
    assert result.timing is not None
    assert result.timing.steps_timed == "timestamps"
    assert result.timing.seconds == created[-1] - created[0]


async def test_totals_count_prepared_applied_discarded_and_waits() -> None:
    config = ContextConfig(background=BackgroundConfig())
    timing = ReplayTiming(summary_latency_s=2.0, step_latency_s=1.0)
    runs = [(steady_run(), "a"), (steady_run(40), "b")]
    result = await replay_runs(runs, context_size=8000, config=config, timing=timing)
    totals = result.totals
    timed = [r.timing for r in result.runs if r.timing is not None]
    assert totals.prepared == sum(len(t.prepared) for t in timed) > 0
    assert totals.applied == sum(t.applied for t in timed)
    assert totals.discarded == sum(t.discarded for t in timed)
    assert sum(totals.discard_reasons.values()) == totals.discarded
    assert totals.waits == sum(len(t.waits) for t in timed)
    assert totals.wait_median_s == 0.0


def test_cli_background_reports_timing_per_run_and_in_the_report(
    cli: typer.Typer, swe_files: list[Path], tmp_path: Path
) -> None:
    pytest.importorskip("plotly")
    report, out = tmp_path / "r.html", tmp_path / "m.json"
    args = ["replay", *map(str, swe_files[:2]), "-c", "8000", "--background"]
    args += ["--summary-latency", "3", "--report", str(report), "--json", str(out)]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    text = _plain(result.stdout)
    assert "Compaction timing (simulated clock, summary 3 s per call)" in text
    data = json.loads(out.read_text())
    timed = [r["timing"] for r in data["runs"]]
    assert all(t is not None and t["summary_latency_s"] == 3.0 for t in timed)
    assert data["totals"]["prepared"] == sum(len(t["prepared"]) for t in timed) > 0
    first = data["runs"][0]
    row = f"{first['run_id']} timestamps {len(first['timing']['prepared'])}"
    assert row in text
    page = report.read_text()
    assert "<h2>Compaction timing</h2>" in page
    assert "Summaries prepared in the background" in page
    prepared = first["timing"]["prepared"][0]
    assert f"step {prepared['step']}: at {prepared['started_s']:.1f}" in page


def test_cli_without_timing_options_prints_no_timing(
    cli: typer.Typer, swe_files: list[Path]
) -> None:
    result = runner.invoke(cli, ["replay", str(swe_files[0]), "-c", "8000", "-q"])
    assert result.exit_code == 0, result.output
    assert "Compaction timing" not in result.stdout
