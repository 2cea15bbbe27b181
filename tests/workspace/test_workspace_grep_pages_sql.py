"""A grep over a whole SQLite or PostgreSQL workspace lists a page of sessions at a time
(issue 28): it listed every item of every session first, so a grep that stops at
``max_results`` after a few sessions still built the listing of 114,000."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from contextfold.message import ToolResultBlock
from contextfold.workspace import PostgresWorkspace, SQLiteWorkspace
from contextfold.workspace._names import ItemPath

Listed = list[tuple[ItemPath, int, "str | None"]]


class _Counting:
    """Counts the sessions listed: whole listings and pages."""

    whole = 0
    paged = 0

    async def _items(self, skey: str | None) -> Listed:
        if skey is None:
            self.whole += 1
        return await super()._items(skey)  # type: ignore[misc]

    async def _text_items_of(self, skeys: list[str]) -> Listed:
        self.paged += len(skeys)
        return await super()._text_items_of(skeys)  # type: ignore[misc]


class CountingSQLite(_Counting, SQLiteWorkspace):
    pass


class CountingPostgres(_Counting, PostgresWorkspace):
    pass


@pytest.fixture(params=["sqlite", "postgres"])
async def ws(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[CountingSQLite | CountingPostgres]:
    ws: CountingSQLite | CountingPostgres
    if request.param == "sqlite":
        ws = CountingSQLite(tmp_path / "ws.sqlite3")
    else:
        dsn = request.getfixturevalue("pg_dsn")
        ws = CountingPostgres(dsn, table_prefix=request.getfixturevalue("pg_prefix"))
    await ws.initialize()
    yield ws
    await ws.close()


async def test_grep_without_a_session_lists_a_page_of_sessions_at_a_time(
    ws: CountingSQLite | CountingPostgres,
) -> None:
    for n in range(1_200):
        out = "needle here\n" if n % 2 else "nothing\n"
        await ws.offload_tool_result(f"s{n:04d}", ToolResultBlock(id="c", name="t", output=out))
    # keys that sort one way and whose paths sort the other ("a-" < "a/")
    await ws.offload_tool_result("s0001-b", ToolResultBlock(id="c", name="t", output="needle"))
    found = await ws.grep("needle", max_results=3)
    assert [m.path for m in found] == [
        "sessions/s0001-b/tool_result-c.txt",
        "sessions/s0001/tool_result-c.txt",
        "sessions/s0003/tool_result-c.txt",
    ]
    assert ws.whole == 0, "every item of the workspace was listed"
    assert ws.paged <= 500  # one page of sessions, not 1,201
    every = await ws.grep("needle", max_results=10_000)
    assert [m.path for m in every] == [
        "sessions/s0001-b/tool_result-c.txt",
        *(f"sessions/s{n:04d}/tool_result-c.txt" for n in range(1, 1200, 2)),
    ]
    assert [m.path for m in await ws.grep("needle", glob="sessions/s11*/*")] == [
        f"sessions/s{n:04d}/tool_result-c.txt" for n in range(1101, 1200, 2)
    ]
