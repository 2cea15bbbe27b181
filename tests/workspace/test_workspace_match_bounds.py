"""Regex and glob matching never stall the event loop and always stop at their time limit.

A process runs many sessions on one loop: a hostile ``Grep`` or ``Glob`` of one session
must come back as a clear timeout error while every other session keeps stepping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

import pytest

from contextfold.message import Msg, ToolResultBlock
from contextfold.tool import readback_tools
from contextfold.workspace import MemoryWorkspace, glob_to_regex

pytestmark = pytest.mark.serial  # loop stalls < 0.5 s, measured alone (.ci/test)

# Exponential in plain ``re``: ~0.5 s on a 40-character name with 24 'a's, minutes with 30
# (the ``regex`` engine, which globs compile to now, answers it at once).
EXPONENTIAL_GLOB = "**a" * 20 + "**Z"
CATASTROPHIC_REGEX = r"(a|aa)+$"


async def _longest_stall(work: Awaitable[object]) -> tuple[object, float]:
    """Run ``work`` while a ticker sleeps 10 ms at a time; the longest gap between ticks."""
    gaps: list[float] = []
    started, done = asyncio.Event(), asyncio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        started.set()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await started.wait()
    try:
        result: object = await work
    except Exception as exc:  # the error is part of the answer
        result = exc
    finally:
        done.set()
        await tick
    return result, max(gaps, default=0.0)


@pytest.fixture
async def ws() -> MemoryWorkspace:
    ws = MemoryWorkspace()
    await ws.offload_tool_result(
        "a" * 30, ToolResultBlock(id="c", name="t", output=("a" * 5000 + "b\n") * 4)
    )
    return ws


async def test_catastrophic_grep_times_out_without_stalling_the_loop(ws: MemoryWorkspace) -> None:
    result, stall = await _longest_stall(ws.grep(CATASTROPHIC_REGEX, time_limit=2.0))
    assert isinstance(result, TimeoutError)
    assert "did not finish within 2s" in str(result)
    assert stall < 0.5


async def test_grep_tool_reports_the_timeout_while_the_loop_runs(ws: MemoryWorkspace) -> None:
    _, grep, *_ = readback_tools(ws, grep_timeout=2.0)
    result, stall = await _longest_stall(grep(CATASTROPHIC_REGEX))
    assert isinstance(result, str)
    assert result.startswith("Error: the pattern did not finish within 2s")
    assert stall < 0.5


async def test_exponential_glob_answers_without_stalling_the_loop(ws: MemoryWorkspace) -> None:
    _, _, glob, *_ = readback_tools(ws, grep_timeout=2.0)
    result, stall = await _longest_stall(glob(EXPONENTIAL_GLOB))
    assert result == f"No offloaded items match {EXPONENTIAL_GLOB!r}."
    assert stall < 0.5


async def test_glob_past_its_time_limit_is_a_clear_timeout_error(ws: MemoryWorkspace) -> None:
    _, _, glob, *_ = readback_tools(ws, grep_timeout=0.0)
    assert (await glob("**")).startswith("Error: the glob pattern did not finish within 0s")


async def test_exponential_glob_filter_of_grep_answers_without_stalling(
    ws: MemoryWorkspace,
) -> None:
    result, stall = await _longest_stall(ws.grep("b", glob=EXPONENTIAL_GLOB, time_limit=2.0))
    assert result == []
    assert stall < 0.5


async def test_a_second_session_keeps_stepping_during_a_hostile_grep(
    ws: MemoryWorkspace,
) -> None:
    steps: list[float] = []

    async def other_session() -> None:
        for i in range(40):
            started = time.monotonic()
            await ws.offload_context("other", [Msg("user", f"step {i}", "user")])
            await asyncio.sleep(0.02)  # the step's model call
            steps.append(time.monotonic() - started)

    other = asyncio.create_task(other_session())
    await asyncio.sleep(0.1)  # a few steps, then the hostile grep
    with pytest.raises(TimeoutError):
        await ws.grep(CATASTROPHIC_REGEX, time_limit=2.0)
    await other
    assert len(await ws.load_context("other")) == 40
    assert max(steps) < 0.5


def test_overlong_glob_is_refused() -> None:
    with pytest.raises(ValueError, match="glob pattern is 1,001 characters long"):
        glob_to_regex("*" * 1001)


async def test_ordinary_globs_still_match(ws: MemoryWorkspace) -> None:
    await ws.offload_context("s1", [Msg("user", "x", "user")])
    _, _, glob, *_ = readback_tools(ws)
    assert (await glob("*.jsonl")).startswith("sessions/s1/context.jsonl")
    assert "tool_result-c.txt" in await glob("sessions/**/tool_result-?.txt")
    assert (await glob("*.png")).startswith("No offloaded items")
