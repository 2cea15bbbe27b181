"""The search indexes are crash-safe: never a hit the store lacks; a lost entry comes back.

SQLite and PostgreSQL index in the content's own transaction; LocalWorkspace writes files
first and its side index after, so a crash in between leaves content unindexed, which the
next append to that log or the next ``initialize()`` indexes.
"""

# These tests damage the stores directly, on purpose.
# ruff: noqa: ASYNC240

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import (
    LocalWorkspace,
    PostgresWorkspace,
    SearchableWorkspace,
    SQLiteWorkspace,
)
from contextfold.workspace._side_index import SideIndex

from ._searchable import open_searchable


async def _fill(ws: SearchableWorkspace) -> str:
    await ws.offload_context("s1", [Msg("user", f"alpha line{i}", "user") for i in range(3)])
    await ws.offload_context("s1", [Msg("user", "beta line3", "user")])
    return await ws.offload_tool_result(
        "s1", ToolResultBlock(id="c1", name="t", output="gamma result")
    )


async def _found(ws: SearchableWorkspace) -> list[tuple[str, int]]:
    """``(path, line)`` of the best hit for each word that ``_fill`` stored."""
    out = []
    for word in ("line0", "line2", "line3", "gamma"):
        hits = await ws.search(word)
        out.append((hits[0].path, hits[0].offset) if hits else ("", -1))
    return out


FOUND = [
    ("sessions/s1/context.jsonl", 0),
    ("sessions/s1/context.jsonl", 2),
    ("sessions/s1/context.jsonl", 3),
    ("sessions/s1/tool_result-c1.txt", 0),
]


async def test_local_index_lost_on_a_crash_after_the_write_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = LocalWorkspace(tmp_path / "ws", fsync=False)
    await ws.initialize()
    with monkeypatch.context() as m:  # the process "dies" between each write and its index
        m.setattr(SideIndex, "log_appended", lambda *a: None)
        m.setattr(SideIndex, "tool_stored", lambda *a: None)
        await _fill(ws)
    assert await ws.search("alpha") == []  # never a hit for what the index lacks...
    await ws.close()
    again = LocalWorkspace(tmp_path / "ws", fsync=False)
    await again.initialize()  # ...and what it lacks is indexed on open
    assert await _found(again) == FOUND


async def test_local_next_append_indexes_the_lines_a_crash_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = LocalWorkspace(tmp_path / "ws", fsync=False)
    await ws.initialize()
    await ws.offload_context("s1", [Msg("user", "alpha line0", "user")])
    with monkeypatch.context() as m:
        m.setattr(SideIndex, "log_appended", lambda *a: None)
        await ws.offload_context("s1", [Msg("user", "lost line1", "user")])
    await ws.offload_context("s1", [Msg("user", "after line2", "user")])
    assert [(await ws.search(w))[0].offset for w in ("line0", "line1", "line2")] == [0, 1, 2]


async def test_local_deleted_index_is_rebuilt_on_open(tmp_path: Path) -> None:
    ws = LocalWorkspace(tmp_path / "ws", fsync=False)
    await ws.initialize()
    await _fill(ws)
    await ws.close()
    for f in (tmp_path / "ws").glob("search.sqlite3*"):
        f.unlink()
    again = LocalWorkspace(tmp_path / "ws", fsync=False)
    await again.initialize()
    assert await _found(again) == FOUND


async def test_local_item_removed_behind_the_workspace_is_not_claimed(tmp_path: Path) -> None:
    ws = LocalWorkspace(tmp_path / "ws", fsync=False)
    await ws.initialize()
    ref = await _fill(ws)
    Path(ref).unlink()
    assert await ws.search("gamma") == []
    await ws.close()
    again = LocalWorkspace(tmp_path / "ws", fsync=False)
    await again.initialize()
    assert await again.search("gamma") == []


async def test_local_log_cut_behind_the_workspace_is_indexed_afresh(tmp_path: Path) -> None:
    ws = LocalWorkspace(tmp_path / "ws", fsync=False)
    await ws.initialize()
    ref = await ws.offload_context("s1", [Msg("user", f"old line{i}", "user") for i in range(5)])
    Path(ref).write_bytes(b"")  # replaced by a shorter log
    await ws.offload_context("s1", [Msg("user", "new words", "user")])
    assert await ws.search("old") == []
    assert (await ws.search("new"))[0].offset == 0


async def test_sqlite_database_without_index_entries_is_indexed_on_open(tmp_path: Path) -> None:
    path = tmp_path / "ws.sqlite3"
    ws = SQLiteWorkspace(path, fsync=False)
    await ws.initialize()
    await _fill(ws)
    await ws.close()
    with sqlite3.connect(path) as c:  # as a database of an older version would be
        c.execute("INSERT INTO search_fts (search_fts) VALUES ('delete-all')")
        c.execute("DELETE FROM search_docs")
        c.execute("DELETE FROM search_sources")
    again = SQLiteWorkspace(path, fsync=False)
    await again.initialize()
    assert await _found(again) == FOUND
    await again.close()


async def test_postgres_tables_without_index_entries_are_indexed_on_open(pg_dsn: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}_"
    ws = PostgresWorkspace(pg_dsn, table_prefix=prefix)
    await ws.initialize()
    await _fill(ws)
    pool = ws._pool_or_fail()
    await pool.execute(f"DELETE FROM {prefix}search_docs")
    await pool.execute(f"DELETE FROM {prefix}search_sources")
    await ws.close()
    again = PostgresWorkspace(pg_dsn, table_prefix=prefix)
    await again.initialize()
    assert await _found(again) == FOUND
    await again.close()


@pytest.fixture(params=["memory", "sqlite", "local", "postgres"])
async def any_ws(request: pytest.FixtureRequest, tmp_path: Path) -> SearchableWorkspace:
    return await open_searchable(request.param, tmp_path, request)


async def test_words_in_most_documents_are_left_out_but_never_all(
    any_ws: SearchableWorkspace,
) -> None:
    msgs = [Msg("user", f"common filler number{i}", "user") for i in range(300)]
    await any_ws.offload_context("s1", [*msgs, Msg("user", "common needle", "user")])
    if isinstance(any_ws, PostgresWorkspace):  # its word frequencies come from ANALYZE
        await any_ws._pool_or_fail().execute(f"ANALYZE {any_ws._p}search_docs")
    [first, *_] = await any_ws.search("common needle")
    assert (first.offset, first.snippet) == (300, "**common** **needle**")
    assert len(await any_ws.search("common filler", limit=20)) == 20  # the rarest is kept
    await any_ws.close()
