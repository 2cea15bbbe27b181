"""Searching a workspace's index without writing to it (``LocalWorkspace(read_only=True)``).

SQLite opened with ``mode=ro`` still creates the ``-wal`` and ``-shm`` files of a WAL
database when they are missing. So the index is opened ``mode=ro`` only when a writer's
``-wal`` exists (its changes are then read), and ``immutable=1`` otherwise (nothing is
pending, no file is created, no lock taken). A missing index is not built: search is
unavailable, with a note saying so.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from urllib.parse import quote

from .._exceptions import UnsafePathError, WorkspaceError
from . import _fts
from ._search import RawHit

__all__ = ["query_read_only"]


def query_read_only(
    path: str, terms: list[str], skey: str | None, limit: int, deadline: float
) -> list[RawHit]:
    """The index at ``path`` queried read-only; ``WorkspaceError`` when there is none."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise WorkspaceError(
            f"search is unavailable: {path} does not exist and a read-only workspace does "
            "not build it; use Grep"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{path} is a symlink or special file; refusing to open it")
    mode = "ro" if os.path.exists(f"{path}-wal") else "ro&immutable=1"
    try:
        conn = sqlite3.connect(f"file:{quote(path)}?mode={mode}", uri=True)
    except sqlite3.Error as exc:
        raise WorkspaceError(f"search is unavailable: cannot open {path} ({exc})") from exc
    try:
        _fts.register(conn)
        return _fts.fts_query(conn, terms, skey, limit, deadline)
    except sqlite3.DatabaseError as exc:
        raise WorkspaceError(f"search is unavailable: {path} is unreadable ({exc})") from exc
    finally:
        conn.close()
