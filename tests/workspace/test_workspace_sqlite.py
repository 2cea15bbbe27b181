"""SQLiteWorkspace against the workspace contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfold.testing import WorkspaceContract
from contextfold.workspace import BaseWorkspace, SQLiteWorkspace

from .builtin_contract import Backend, BuiltinWorkspaceTests


class TestSQLiteWorkspace(BuiltinWorkspaceTests, WorkspaceContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Backend:
        path = tmp_path / "ws.sqlite3"

        async def new() -> BaseWorkspace:
            ws = SQLiteWorkspace(path, fsync=False)
            await ws.initialize()
            return ws

        return Backend(new=new, spec={"kind": "sqlite", "path": str(path)})


async def test_sqlite_file_is_in_wal_mode(tmp_path: Path) -> None:
    import sqlite3

    async with SQLiteWorkspace(tmp_path / "w.db") as ws:
        await ws.save_state("s", "{}")
    mode = sqlite3.connect(tmp_path / "w.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
