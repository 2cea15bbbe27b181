"""A matching call gives its caller the answer or the timeout at its deadline, in wall time.

``regex`` counts its ``timeout`` in CPU time, and the matching threads run at nice 19: on
a busy machine such a thread gets under 1% of a core, so a 0.2 s limit came back after
18-28 s (four busy processes on two cores). The caller must not wait for the thread to
notice; the thread runs on to its own limit and frees its place for the next call.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from contextfold.message import ToolResultBlock
from contextfold.tool import readback_tools
from contextfold.workspace import MemoryWorkspace
from contextfold.workspace._grep import (
    GREP_TIMEOUT,
    MATCH_THREADS,
    MAX_OVERDUE_THREADS,
    Deadline,
    off_loop,
)

from .busy_machine import busy_processes

WATCHDOG = 30.0
"""What the old code did here was wait until the thread ended: never, in these tests."""


@pytest.fixture
def stuck() -> Iterator[threading.Event]:
    """Released after the test: a thread blocked on it is one the OS does not run."""
    release = threading.Event()
    yield release
    release.set()


def _blocked(release: threading.Event, entered: threading.Semaphore) -> str:
    entered.release()
    release.wait(WATCHDOG * 2)
    return "late"


async def _strand(n: int, release: threading.Event) -> None:
    """Leave ``n`` matching threads blocked for callers that left at their deadline (a
    call that timed out before its thread started does not count: retried)."""
    entered = threading.Semaphore(0)
    stranded = 0
    for _ in range(20 * n):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(
                off_loop(_blocked, release, entered, deadline=Deadline(0.2, GREP_TIMEOUT)),
                WATCHDOG,
            )
        if entered.acquire(timeout=1.0):
            stranded += 1
            if stranded == n:
                return
    raise AssertionError(f"only {stranded} of {n} threads started")


async def test_the_caller_gets_the_timeout_at_the_deadline_while_the_thread_runs_on(
    stuck: threading.Event,
) -> None:
    entered = threading.Semaphore(0)
    call = off_loop(_blocked, stuck, entered, deadline=Deadline(0.2, GREP_TIMEOUT))
    with pytest.raises(TimeoutError, match=r"did not finish within 0\.2s"):
        await asyncio.wait_for(call, WATCHDOG)
    assert not stuck.is_set()  # the caller left while its thread still waits


async def test_overdue_threads_free_their_places_for_the_next_calls(
    stuck: threading.Event,
) -> None:
    await _strand(MATCH_THREADS, stuck)
    answer = await asyncio.wait_for(
        off_loop(str.upper, "served", deadline=Deadline(WATCHDOG, GREP_TIMEOUT)), WATCHDOG
    )
    assert answer == "SERVED"
    assert not stuck.is_set()


async def test_overdue_threads_are_bounded_and_a_call_beyond_them_never_runs(
    stuck: threading.Event,
) -> None:
    before = threading.active_count()
    await _strand(MATCH_THREADS + MAX_OVERDUE_THREADS, stuck)
    ran = threading.Event()
    with pytest.raises(TimeoutError, match="did not finish"):
        await asyncio.wait_for(off_loop(ran.set, deadline=Deadline(0.2, GREP_TIMEOUT)), WATCHDOG)
    assert threading.active_count() - before <= MATCH_THREADS + MAX_OVERDUE_THREADS
    stuck.set()  # the stranded threads end; their threads serve again
    answer = await asyncio.wait_for(
        off_loop(str.upper, "back", deadline=Deadline(WATCHDOG, GREP_TIMEOUT)), WATCHDOG
    )
    assert answer == "BACK"
    assert not ran.is_set()  # its caller left while it was queued: never started


@pytest.mark.serial  # four busy processes; measured alone (.ci/test)
async def test_a_hostile_grep_on_a_busy_machine_comes_back_near_its_limit() -> None:
    ws = MemoryWorkspace()
    await ws.offload_tool_result("s", ToolResultBlock(id="c", name="t", output="a" * 40 + "b"))
    _, grep, *_ = readback_tools(ws, grep_timeout=0.2)
    async with busy_processes(4):
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="did not finish"):
            await ws.grep(r"(a|aa)+$", time_limit=0.2)
        answer = await grep(r"(a|aa)+$b")
        took = time.monotonic() - started
    assert "did not finish" in answer
    print(f"two 0.2 s greps beside four busy processes: {took:.2f} s")
    assert took < 3.0, f"two 0.2 s greps took {took:.1f} s"  # before: 29.9 s


async def test_a_call_without_a_deadline_waits_for_a_place_instead_of_failing() -> None:
    """Both matching places taken (two slow calls with a deadline): a call without one
    waits its turn and gets its answer (a ``-1`` timeout made the semaphore give up at
    once, and the call raised ``_Left``: a concurrent search failed under load)."""
    started = threading.Event()
    release = threading.Event()

    def hold() -> str:
        started.set()
        release.wait(5)
        return "held"

    holders = [
        asyncio.ensure_future(off_loop(hold, deadline=Deadline(10, GREP_TIMEOUT)))
        for _ in range(MATCH_THREADS)
    ]
    assert await asyncio.to_thread(started.wait, 5)
    await asyncio.sleep(0.2)  # both places taken
    waiting = asyncio.ensure_future(off_loop(lambda: "mine"))
    await asyncio.sleep(0.2)
    release.set()
    assert await asyncio.wait_for(waiting, 10) == "mine"
    assert await asyncio.gather(*holders) == ["held"] * MATCH_THREADS
