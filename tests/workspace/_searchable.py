"""The searchable built-in backends, opened the same way by every search test."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from contextfold.workspace import (
    LocalWorkspace,
    MemoryWorkspace,
    PostgresWorkspace,
    SearchableWorkspace,
    SQLiteWorkspace,
)

__all__ = ["open_searchable"]


async def open_searchable(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> SearchableWorkspace:
    """An initialized ``kind`` workspace in ``tmp_path`` (``postgres``: fresh tables)."""
    ws: SearchableWorkspace
    if kind == "memory":
        ws = MemoryWorkspace()
    elif kind == "sqlite":
        ws = SQLiteWorkspace(tmp_path / "ws.sqlite3", fsync=False)
    elif kind == "local":
        ws = LocalWorkspace(tmp_path / "ws", fsync=False)
    else:
        ws = PostgresWorkspace(
            request.getfixturevalue("pg_dsn"), table_prefix=f"t{uuid.uuid4().hex[:10]}_"
        )
    await ws.initialize()
    return ws
