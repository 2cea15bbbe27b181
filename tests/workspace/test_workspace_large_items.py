"""Large items are read by the window asked for, and long listings are capped (issue 28).

A 100 MB tool result used to be decoded and split whole on the event loop for every
``Read(limit=1)`` and ``Grep``. Reads now stream the lines they need, so the memory a read
takes is bounded by its window (measured with ``tracemalloc``, which sees every thread);
the time the loop is held is measured by the hostile-load benchmark, not here.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Awaitable, Iterator
from pathlib import Path

import pytest
import regex

from contextfold.message import Base64Source, DataBlock, Msg, ToolResultBlock
from contextfold.tool import readback_tools
from contextfold.workspace import BaseWorkspace, LocalWorkspace, MemoryWorkspace, glob_to_regex
from contextfold.workspace._names import ItemPath

from ._two_backends import KINDS, make, workspace_fixture

LINES = 300_000
BIG = "".join(
    f"line {n:07d} of the big tool result, padded to about one hundred bytes ....\n"
    for n in range(LINES)
)
BOUND = 4 * 1024 * 1024
"""Peak memory a windowed read may take: a few buffers, far below the item's 26 MB."""


async def _big(ws: BaseWorkspace) -> None:
    await ws.offload_tool_result("s1", ToolResultBlock(id="big", name="t", output=BIG))


ws = workspace_fixture("ws", _big)


async def _peak(work: Awaitable[str]) -> tuple[str, int]:
    tracemalloc.start()
    try:
        result = await work
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def test_read_of_one_line_takes_memory_for_one_line(ws: BaseWorkspace) -> None:
    Read, *_ = readback_tools(ws, session_id="s1")
    ref = "sessions/s1/tool_result-big.txt"
    text, peak = await _peak(Read(ref, limit=1))
    assert text.split("\n") == [
        f"     1\t{BIG[: BIG.index(chr(10))]}",
        "(more lines follow; call Read with offset=1 to continue)",
    ]
    assert peak < BOUND, f"Read(limit=1) of a {len(BIG):,}-byte item peaked at {peak:,} bytes"


async def test_read_far_into_a_large_item_is_exact_and_bounded(ws: BaseWorkspace) -> None:
    ref = "sessions/s1/tool_result-big.txt"
    text, peak = await _peak(ws.read(ref, offset=LINES - 2, limit=5))
    assert text.split("\n") == BIG.split("\n")[LINES - 2 : LINES]
    assert peak < BOUND
    assert await ws.read(ref, offset=LINES, limit=5) == ""


async def test_grep_of_a_large_item_streams_its_lines(ws: BaseWorkspace) -> None:
    _, Grep, *_ = readback_tools(ws, session_id="s1", grep_timeout=60)
    found, peak = await _peak(Grep("line 0250000 ", context=1))
    assert found.split("\n") == [
        f"sessions/s1/tool_result-big.txt-250000-{BIG.split(chr(10))[249_999]}",
        f"sessions/s1/tool_result-big.txt:250001:{BIG.split(chr(10))[250_000]}",
        f"sessions/s1/tool_result-big.txt-250002-{BIG.split(chr(10))[250_001]}",
    ]
    assert peak < BOUND, f"Grep over a {len(BIG):,}-byte item peaked at {peak:,} bytes"


async def test_grep_context_and_result_budget_match_the_whole_item_reading(
    ws: BaseWorkspace,
) -> None:
    matches = await ws.grep(r"line 00000[0-9]", session_id="s1", context=2, max_results=3)
    lines = BIG.split("\n")
    assert [(m.line_number, m.line, m.before, m.after) for m in matches] == [
        (1, lines[0], (), (lines[1], lines[2])),
        (2, lines[1], (lines[0],), (lines[2], lines[3])),
        (3, lines[2], (lines[0], lines[1]), (lines[3], lines[4])),
    ]


def _append_torn(path: Path) -> None:
    with path.open("ab") as f:
        f.write(b'{"torn')  # a write cut by a crash: no newline


async def test_a_torn_last_context_line_stays_unread_by_a_window(tmp_path: Path) -> None:
    ws = LocalWorkspace(tmp_path / "w", fsync=False)
    await ws.initialize()
    ref = await ws.offload_context("s1", [Msg("user", "one", "user"), Msg("user", "two", "user")])
    _append_torn(Path(ref))
    assert len((await ws.read(ref, offset=1, limit=5)).split("\n")) == 1
    assert await ws.read(ref, offset=2, limit=5) == ""
    assert len(await ws.read_lines(ref)) == 2
    assert await ws.grep("torn", session_id="s1") == []
    await ws.close()


async def _many(ws: BaseWorkspace) -> None:
    for n in range(450):
        await ws.offload_tool_result(f"s{n:03d}", ToolResultBlock(id="c", name="t", output="x"))


many = workspace_fixture("many", _many)


async def test_glob_of_many_items_is_capped_with_a_note(many: BaseWorkspace) -> None:
    *_, Glob, _ = readback_tools(many)
    listing = (await Glob()).split("\n")
    rows, note = listing[:-1], listing[-1]
    assert rows == [
        f"sessions/s{n:03d}/tool_result-c.txt\ttool_result\t1 bytes" for n in range(200)
    ]
    assert note == (
        "(200 items shown, more match; narrow the pattern, e.g. "
        "Glob('sessions/<session>/*'), or pass max_results)"
    )
    assert (await Glob("sessions/s44*/*")).split("\n") == [
        f"sessions/s44{n}/tool_result-c.txt\ttool_result\t1 bytes" for n in range(10)
    ]
    assert len((await Glob(max_results=1000)).split("\n")) == 450


MIXED = "".join(
    f"{'ERROR' if n % 997 == 0 else 'info'} {n} " + ("word " * (n % 40)) + ("x" * (n % 3)) + "\n"
    for n in range(40_000)
)
PATTERNS = [
    r"^ERROR \d+",
    r"x$",
    r"\Ainfo 5\b",
    r"(?<=ERROR )9",
    r"(?<!o)r\d",
    r"\bword x\Z",
    r"(?m)^info 39999",
    r"(?-m:^info 1 )",
    r"ERROR|9999",
    r"^$",
]


@pytest.mark.parametrize("pattern", PATTERNS)
async def test_grep_over_blocks_finds_what_line_by_line_matching_finds(pattern: str) -> None:
    """Blocks of lines are screened with one search each; every line that matches alone
    is still found, with its number and context, across block boundaries."""
    ws = MemoryWorkspace()
    await ws.offload_tool_result("s1", ToolResultBlock(id="m", name="t", output=MIXED))
    lines = MIXED.split("\n")[:-1]
    compiled = regex.compile(pattern)
    expected = [
        (i + 1, line, tuple(lines[max(0, i - 2) : i]), tuple(lines[i + 1 : i + 3]))
        for i, line in enumerate(lines)
        if compiled.search(line)
    ][:500]
    found = await ws.grep(pattern, session_id="s1", context=2, max_results=500, time_limit=60)
    assert [(m.line_number, m.line, m.before, m.after) for m in found] == expected


async def test_grep_skips_a_planted_symlink_and_searches_the_rest(tmp_path: Path) -> None:
    ws = LocalWorkspace(tmp_path / "w", fsync=False)
    await ws.initialize()
    await ws.offload_tool_result("s1", ToolResultBlock(id="a", name="t", output="needle a"))
    await ws.offload_tool_result("s1", ToolResultBlock(id="b", name="t", output="needle b"))
    (tmp_path / "outside.txt").write_text("needle outside\n")
    planted = tmp_path / "w" / "sessions" / "s1" / "tool_result-a.txt"
    planted.unlink()
    planted.symlink_to(tmp_path / "outside.txt")
    found = await ws.grep("needle", session_id="s1")
    assert [(m.path, m.line) for m in found] == [("sessions/s1/tool_result-b.txt", "needle b")]
    await ws.close()


ORDER_IDS = ["s1", "s1-a", "s10", "s1.b", "a", "Z", "s2", "\u00e9t\u00e9", "x/y", ".."]
"""Ids whose folder names sort differently from their paths' order if done wrongly
(``s1/`` vs ``s1-a/``), encoded ones, and odd ones."""


async def _mixed(ws: BaseWorkspace) -> None:
    png = DataBlock(source=Base64Source(media_type="image/png", data="iVBORw0KGgo="))
    for n, sid in enumerate(ORDER_IDS):
        await ws.offload_tool_result(sid, ToolResultBlock(id=f"c{n % 3}", name="t", output="x"))
        await ws.offload_tool_result(sid, ToolResultBlock(id="c0", name="t", output="again"))
        if n % 2:
            await ws.offload_context(sid, [Msg("u", f"hello {n}", "user")])
        if n % 4 == 1:
            await ws.offload_data(sid, png)
    await ws.offload_data("a", DataBlock(source=Base64Source(media_type="image/gif", data="R0lG")))


mixed = workspace_fixture("mixed", _mixed)


@pytest.mark.parametrize(
    "pattern",
    [
        "**",
        "*.txt",
        "sessions/s1*/*",
        "sessions/s1/*",
        "data/*",
        "**/context.jsonl",
        "sessions/../*",
    ],
)
@pytest.mark.parametrize("cap", [1, 3, 1000])
@pytest.mark.parametrize("scoped", [None, "s1", "x/y"])
async def test_glob_items_is_the_sorted_listing_cut_at_the_cap(
    mixed: BaseWorkspace, pattern: str, cap: int, scoped: str | None
) -> None:
    everything = await mixed.list_items(scoped)
    matcher = glob_to_regex(pattern)
    want = [i for i in everything if matcher.fullmatch(i.path)]
    page = await mixed.glob_items(pattern, session_id=scoped, max_results=cap)
    assert list(page.items) == want[:cap]
    assert page.more == (len(want) > cap)


class CountingLocal(LocalWorkspace):
    """Counts the session folders a call looks into."""

    looked = 0

    def _listed_id(self, skey: str) -> str | None:
        self.looked += 1
        return super()._listed_id(skey)


class CountingMemory(MemoryWorkspace):
    looked = 0

    def _items_sync(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        self.looked += len(self._ids) if skey is None else 1
        return super()._items_sync(skey)

    def _item_stream(self) -> Iterator[tuple[ItemPath, int, str | None]]:
        for listed in super()._item_stream():
            self.looked += 1
            yield listed


@pytest.mark.parametrize("kind", KINDS)
async def test_glob_looks_at_the_sessions_it_shows_not_all(kind: str, tmp_path: Path) -> None:
    """Issue 28: a Glob over 114,000 sessions listed them all (and held the loop while
    the collector went over the items) to show 200."""
    ws: CountingLocal | CountingMemory = make(kind, tmp_path, CountingLocal, CountingMemory)
    await ws.initialize()
    for n in range(300):
        await ws.offload_tool_result(f"s{n:03d}", ToolResultBlock(id="c", name="t", output="x"))
    *_, Glob, _ = readback_tools(ws)
    ws.looked = 0
    assert (await Glob(max_results=5)).split("\n")[:5] == [
        f"sessions/s{n:03d}/tool_result-c.txt\ttool_result\t1 bytes" for n in range(5)
    ]
    assert ws.looked <= 6
    ws.looked = 0
    assert await Glob("sessions/s123/*") == "sessions/s123/tool_result-c.txt\ttool_result\t1 bytes"
    assert ws.looked <= 2
    await ws.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_grep_without_a_session_lists_a_page_at_a_time(kind: str, tmp_path: Path) -> None:
    """Issue 28: a Grep over the whole workspace listed every item first (114,000
    sessions: ~400,000 objects built at once, and the collector's passes over them held
    the loop); it now lists a page at a time and stops listing at ``max_results``."""
    ws: CountingLocal | CountingMemory = make(kind, tmp_path, CountingLocal, CountingMemory)
    await ws.initialize()
    for n in range(1200):
        out = "needle here\n" if n % 2 else "nothing\n"
        await ws.offload_tool_result(f"s{n:04d}", ToolResultBlock(id="c", name="t", output=out))
    _, Grep, *_ = readback_tools(ws)
    ws.looked = 0
    found = await Grep("needle", max_results=3)
    assert [line for line in found.split("\n") if ":1:" in line] == [
        f"sessions/s{n:04d}/tool_result-c.txt:1:needle here" for n in (1, 3, 5)
    ]
    assert ws.looked <= 500  # one page of the listing, not 1,200 sessions
    # a grep that goes through everything still finds everything, in path order (its time
    # limit, tested elsewhere, is not the point here: 1,200 items on a busy machine)
    every = await ws.grep("needle", max_results=10_000, time_limit=120)
    assert [m.path for m in every] == [
        f"sessions/s{n:04d}/tool_result-c.txt" for n in range(1, 1200, 2)
    ]
    in_glob = await ws.grep("needle", glob="sessions/s11*/*", time_limit=120)
    assert [m.path for m in in_glob] == [
        f"sessions/s{n:04d}/tool_result-c.txt" for n in range(1101, 1200, 2)
    ]
    await ws.close()
