"""A large item's CPU work runs in a worker process, not in a thread of this one (issue 28).

On a loaded machine the OS stops a thread while it holds the GIL, and the event loop waits
for it: the index's terms of a large offload and the grep of a large item held the loop
100 ms to 2 s at a time (``benchmarks/hostile_large_items.py --busy``). These tests check
the structure that prevents it, not the timing: the work's functions are not called in
this process for a large item (spied on here; a worker process imports its own copy), and
the answers are what they were.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

import pydantic_core
import pytest

from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import (
    BaseWorkspace,
    LocalWorkspace,
    MemoryWorkspace,
    _grep,
    _grep_process,
    _line_text,
    _terms,
)

from ._two_backends import workspace_fixture

LINE = "2026-12-04T05:00:00Z INFO worker-7 request served in 12 ms, status 200\n"
BIG = "zqxfirst line\n" + LINE * 39_999 + "ERROR zqxneedle the one line that matters\n" + LINE * 2
"""About 2.9 MB: over the worker-process thresholds of the terms and of grep."""


ws = workspace_fixture("ws")


async def test_terms_of_a_large_offload_are_found_in_a_worker_process(
    ws: BaseWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real = _terms._piece_terms

    def spy(text: str) -> Iterator[list[str]]:
        seen.append(len(text))
        return real(text)

    monkeypatch.setattr(_terms, "_piece_terms", spy)
    await ws.offload_tool_result("s1", ToolResultBlock(id="big", name="t", output=BIG))
    await ws.offload_tool_result("s1", ToolResultBlock(id="small", name="t", output="zqxsmall"))
    assert isinstance(ws, (LocalWorkspace, MemoryWorkspace))
    hits = await ws.search("zqxfirst")
    assert [h.ref for h in hits] == [ws._display("sessions/s1/tool_result-big.txt")]
    assert [h.ref for h in await ws.search("zqxsmall")] == [
        ws._display("sessions/s1/tool_result-small.txt")
    ]
    assert seen, "small documents are still indexed here"
    # The big result's document is its first 2M characters; only the small one's is here.
    assert max(seen) < 1_000_000, "a large document's terms computed in this process"


async def test_grep_of_a_large_item_matches_in_a_worker_process(
    ws: BaseWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    searched: list[str] = []
    real = _grep.Searcher.search

    def spy(self: _grep.Searcher, ref: str, blocks: Iterable[str], path: Any = None) -> None:
        searched.append(ref)
        real(self, ref, blocks, path)

    monkeypatch.setattr(_grep.Searcher, "search", spy)
    await ws.offload_tool_result("s1", ToolResultBlock(id="big", name="t", output=BIG))
    await ws.offload_tool_result("s1", ToolResultBlock(id="small", name="t", output="zqxneedle"))
    matches = await ws.grep("zqxneedle", session_id="s1", context=1)
    big = ws._display("sessions/s1/tool_result-big.txt")
    small = ws._display("sessions/s1/tool_result-small.txt")
    assert [(m.ref, m.line_number, m.line, m.before, m.after) for m in matches] == [
        (big, 40_001, "ERROR zqxneedle the one line that matters", (LINE[:-1],), (LINE[:-1],)),
        (small, 1, "zqxneedle", (), ()),
    ]
    assert searched == [small], "the large item was matched in this process"


async def test_grep_in_a_worker_process_keeps_the_result_budget_and_deadline(
    ws: BaseWorkspace,
) -> None:
    await ws.offload_tool_result("s1", ToolResultBlock(id="big", name="t", output=BIG))
    three = await ws.grep("INFO", session_id="s1", max_results=3)
    assert [m.line_number for m in three] == [2, 3, 4]
    hostile = "a" * 5_000 + "b\n"
    await ws.offload_tool_result(
        "s2", ToolResultBlock(id="h", name="t", output=hostile * 300 + BIG)
    )
    with pytest.raises(TimeoutError, match=r"did not finish within 0\.5s"):
        await ws.grep("(a|aa)+$", session_id="s2", time_limit=0.5)


async def test_a_large_message_is_escaped_in_a_worker_process(
    ws: BaseWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    escaped: list[int] = []
    real = pydantic_core.to_json

    def spy(value: Any, *args: Any, **kwargs: Any) -> bytes:
        if isinstance(value, str):
            escaped.append(len(value))
        return real(value, *args, **kwargs)

    monkeypatch.setattr(pydantic_core, "to_json", spy)
    text = 'a "quoted" line\twith a tab, ünïcödé and \\ a backslash\n' * 20_000
    msgs = [Msg("tool", text, "user"), Msg("user", "short", "user")]
    await ws.offload_context("s1", msgs)
    assert escaped == [], "a long string was escaped in this process"
    monkeypatch.undo()
    loaded = await ws.load_context("s1")
    assert [m.content for m in loaded] == [text, "short"]
    raw = await ws.read_bytes(ws._display("sessions/s1/context.jsonl"))
    assert raw == "".join(f"{m.model_dump_json()}\n" for m in msgs).encode()


async def test_a_huge_context_line_is_indexed_in_a_worker_process(
    ws: BaseWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    scanned: list[int] = []
    real = _line_text._huge_text

    def spy(payload: bytes, start: int, stop: int, limit: int) -> str | None:
        scanned.append(stop - start)
        return real(payload, start, stop, limit)

    monkeypatch.setattr(_line_text, "_huge_text", spy)
    text = "zqxhead " + "a log line of the huge message\n" * 60_000
    await ws.offload_context("s1", [Msg("tool", text, "user")])
    assert scanned == [], "the huge line was looked through in this process"
    assert isinstance(ws, (LocalWorkspace, MemoryWorkspace))
    assert [h.offset for h in await ws.search("zqxhead")] == [0]


async def test_a_large_item_is_sent_to_the_worker_by_a_thread_at_normal_priority(
    ws: BaseWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The matching threads run at nice 19 (a hostile pattern burns only what the loop
    # leaves); one stopped while it held the GIL held the loop 270 to 370 ms under load.
    threads: list[str] = []
    real = _grep_process.grep_in_process

    def spy(*args: Any, **kwargs: Any) -> None:
        threads.append(threading.current_thread().name)
        real(*args, **kwargs)

    monkeypatch.setattr(_grep_process, "grep_in_process", spy)
    await ws.offload_tool_result("s1", ToolResultBlock(id="big", name="t", output=BIG))
    assert [m.line_number for m in await ws.grep("zqxneedle", session_id="s1")] == [40_001]
    assert len(threads) == 1
    assert not threads[0].startswith("contextfold-match")
