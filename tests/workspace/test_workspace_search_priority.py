"""Searches and ordinary patterns run at their caller's priority; a pattern still running
after its grace is set to the lowest.

A search's work is bounded (at most 32 words, ranked by an index), but it ran in the
nice-19 matching threads with the patterns: on a busy machine such a thread gets under 1%
of a core, so a search that needs 20 ms of CPU reached its 5 s deadline (CI's parallel
tests, an index rebuilt after a version change). An ordinary regular expression fared no
better: from its first instant at nice 19, a grep of 600 small items reached its 2 s limit
and told the model to simplify its pattern. A regular expression or glob can be
exponential, so one still running after ``PATTERN_GRACE_S`` is set to the lowest priority
(a hostile one burns only what is left), and its thread, which cannot be set back, ends.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextfold.message import ToolResultBlock
from contextfold.workspace import LocalWorkspace, MemoryWorkspace, _grep, _grep_process

from .busy_machine import busy_processes

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="threads have a priority of their own on Linux"
)


def _priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _recording(fn: Callable[..., Any], seen: list[int]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        seen.append(_priority())
        return fn(*args, **kwargs)

    return wrapper


async def _filled(ws: MemoryWorkspace | LocalWorkspace, items: int) -> None:
    await ws.initialize()
    for i in range(items):
        out = "\n".join(
            f"line {j} of log {i}: parse_args getUserName value{j * i % 97}" for j in range(200)
        )
        await ws.offload_tool_result(f"s{i % 3}", ToolResultBlock(id=f"c{i}", name="t", output=out))


@pytest.mark.parametrize("kind", ["memory", "local"])
async def test_searches_and_ordinary_patterns_run_at_the_callers_priority(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = MemoryWorkspace() if kind == "memory" else LocalWorkspace(tmp_path)
    cls = type(ws)
    searched: list[int] = []
    grepped: list[int] = []
    monkeypatch.setattr(cls, "_search_sync", _recording(cls._search_sync, searched))
    globbed: list[int] = []
    monkeypatch.setattr(
        _grep_process, "search_stream", _recording(_grep_process.search_stream, grepped)
    )
    monkeypatch.setattr(_grep, "_match_paths", _recording(_grep._match_paths, globbed))
    await _filled(ws, 3)
    assert await ws.search("parse_args")
    assert await ws.grep("value5")
    assert await ws.grep("value5", glob="sessions/*/tool_result-c*")  # the glob filter
    await ws.close()
    assert searched == [_priority()]  # the loop's thread's
    assert grepped
    assert set(grepped) == {_priority()}
    assert globbed
    assert set(globbed) == {_priority()}


WORKER = re.compile(r"contextfold-match-\d+")
"""A pattern thread's name (the watch thread is ``contextfold-match-watch``)."""


def _held(seconds: float) -> tuple[int, int, int]:
    """Hold a matching thread for ``seconds``: its id, and its priority then and after."""
    before = _priority()
    time.sleep(seconds)
    return threading.get_native_id(), before, _priority()


async def test_a_pattern_past_its_grace_is_set_to_the_lowest_and_its_thread_ends() -> None:
    grace = _grep.PATTERN_GRACE_S
    mine = _priority()
    lowered, before, after = await _grep.off_loop(_held, grace * 4)
    assert (before, after) == (mine, 19)
    quick, before, after = await _grep.off_loop(_held, 0.0)
    assert quick != lowered  # the lowered thread ran no other call
    assert (before, after) == (mine, mine)
    for _ in range(100):
        if lowered not in {t.native_id for t in threading.enumerate()}:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the lowered thread did not end")
    # Bounded work keeps the caller's priority however long it runs.
    _, before, after = await _grep.off_loop(_held, grace * 4, lowest_priority=False)
    assert (before, after) == (mine, mine)


async def test_calls_queued_behind_lowered_threads_all_run_within_the_thread_limit() -> None:
    """More calls than threads, each past its grace: a lowered thread that ends must not
    leave queued calls waiting (it goes on with them while no other thread is free), and
    the pool never holds more than its threads."""
    size = _grep.MATCH_THREADS + _grep.MAX_OVERDUE_THREADS
    alive: list[int] = []
    running = True

    def count() -> None:
        while running:
            threads = [t for t in threading.enumerate() if WORKER.fullmatch(t.name)]
            alive.append(len(threads))
            time.sleep(0.002)

    sampler = threading.Thread(target=count)
    sampler.start()
    try:
        calls = [_grep.off_loop(_held, _grep.PATTERN_GRACE_S * 1.5) for _ in range(size + 4)]
        results = await asyncio.wait_for(asyncio.gather(*calls), 30)
    finally:
        running = False
        sampler.join()
    assert len(results) == size + 4
    assert all(after == 19 for _, _, after in results)
    assert 0 < max(alive) <= size


@pytest.mark.serial  # four busy processes; measured alone (.ci/test)
async def test_a_search_on_a_busy_machine_answers_within_its_limit() -> None:
    ws = MemoryWorkspace()
    await _filled(ws, 600)  # about 40 ms of CPU per search here
    async with busy_processes(4):
        started = time.monotonic()
        hits = await ws.search("log line value17 getUserName", time_limit=2.0)
        took = time.monotonic() - started
    print(f"a search beside four busy processes: {took:.2f} s")
    # Before: TimeoutError (a nice-19 thread got <1% of a core), or hits after 5 s, past
    # the limit (the snippets were made without the deadline).
    assert len(hits) == 10
    assert took < 2.5


@pytest.mark.serial  # four busy processes; measured alone (.ci/test)
async def test_an_ordinary_grep_on_a_busy_machine_answers_within_its_limit() -> None:
    ws = MemoryWorkspace()
    await _filled(ws, 600)
    async with busy_processes(4):
        started = time.monotonic()
        hits = await ws.grep(r"of log 17: \w+", max_results=20, time_limit=2.0)
        took = time.monotonic() - started
    print(f"an ordinary grep beside four busy processes: {took:.2f} s")
    # Before: TimeoutError at 2 s, a "simpler regular expression" asked of an ordinary one
    # (the pattern ran at nice 19 from its first instant: 600 calls of about 1 ms each).
    assert len(hits) == 20
    assert [hit.line.split(":", 1)[0] for hit in hits] == [f"line {j} of log 17" for j in range(20)]
    assert took < 2.5
