"""A search runs at its caller's priority; only a pattern the model wrote runs at the lowest.

A search's work is bounded (at most 32 words, ranked by an index), but it ran in the
nice-19 matching threads with the patterns: on a busy machine such a thread gets under 1%
of a core, so a search that needs 20 ms of CPU reached its 5 s deadline (CI's parallel
tests, an index rebuilt after a version change). A regular expression or glob can be
exponential, so those keep the lowest priority (a hostile one burns only what is left).
"""

from __future__ import annotations

import os
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
async def test_a_search_runs_at_the_callers_priority_a_grep_and_a_glob_at_the_lowest(
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
    assert set(grepped) == {19}
    assert globbed
    assert set(globbed) == {19}


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
