"""Switching a SQLite database to write-ahead logging while other processes open it too."""

from __future__ import annotations

import sqlite3
import time

__all__ = ["enter_wal"]


def enter_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """``PRAGMA journal_mode = WAL``, tried again while another connection holds a lock.

    Changing the journal mode takes an exclusive lock, and SQLite answers "database is
    locked" at once, without waiting in its busy handler, when two connections that both
    read the header would otherwise deadlock upgrading their locks: 8 connections switching
    one database together failed 0.4-1.9% of the time here, and a workspace's first
    ``initialize`` in 16 processes failed in CI.
    """
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
