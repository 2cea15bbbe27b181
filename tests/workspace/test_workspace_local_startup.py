"""One bad entry does not block a LocalWorkspace (issue 28, point 5).

A session folder whose name or ``.session_id`` does not decode is skipped and reported
(a warning and :attr:`LocalWorkspace.skipped`); a corrupt search index, which only holds
what the files hold, is moved aside and built again.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import LocalWorkspace, SkippedEntry


async def _stored(root: Path) -> None:
    async with LocalWorkspace(root, fsync=False) as ws:
        await ws.offload_context("good", [Msg("user", "findable needle", "user")])
        await ws.offload_tool_result("good", ToolResultBlock(id="c1", name="t", output="hay"))
        await ws.save_state("good", "{}")


async def test_undecodable_session_folders_are_skipped_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "ws"
    await _stored(root)
    for name in ("%FF", "%C0%80"):
        (root / "sessions" / name).mkdir()
        (root / "sessions" / name / "context.jsonl").write_text('{"x": 1}\n')
    capped = root / "sessions" / ("a" * 100 + "~0123456789abcdef")
    capped.mkdir()
    (capped / ".session_id").write_bytes(b"\xff\xfe not utf-8")
    (capped / "context.jsonl").write_text('{"x": 1}\n')

    ws = LocalWorkspace(root, fsync=False)
    with caplog.at_level(logging.WARNING, logger="contextfold"):
        await ws.initialize()
    try:
        assert await ws.list_sessions() == ["good"]
        assert {i.session_id for i in await ws.list_items()} == {"good", None} - {None}
        assert [h.session_id for h in await ws.search("needle")] == ["good"]
        assert sorted(e.path for e in ws.skipped) == sorted(
            ["sessions/%FF", "sessions/%C0%80", f"sessions/{capped.name}"]
        )
        assert all(isinstance(e, SkippedEntry) and "UTF-8" in e.reason for e in ws.skipped)
        assert "sessions/%FF" in caplog.text
        assert await ws.load_state("good") == "{}"
    finally:
        await ws.close()


async def test_a_corrupt_index_is_moved_aside_and_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "ws"
    await _stored(root)
    for extra in ("search.sqlite3-wal", "search.sqlite3-shm"):
        (root / extra).unlink(missing_ok=True)
    (root / "search.sqlite3").write_bytes(b"this is not a database" * 100)

    ws = LocalWorkspace(root, fsync=False)
    with caplog.at_level(logging.WARNING, logger="contextfold"):
        await ws.initialize()
    try:
        hits = await ws.search("needle")
        assert [h.session_id for h in hits] == ["good"]
        aside = sorted(p.name for p in root.glob("search.sqlite3.corrupt-*"))
        assert len(aside) == 1
        assert (root / aside[0]).read_bytes() == b"this is not a database" * 100
        assert [e.path for e in ws.skipped] == ["search.sqlite3"]
        assert aside[0] in ws.skipped[0].reason
        assert "corrupt" in caplog.text
    finally:
        await ws.close()
