"""The SQLite FTS5 search index: in ``SQLiteWorkspace``'s own database, beside a
``LocalWorkspace`` (``search.sqlite3``), and in memory for ``MemoryWorkspace``.

Rows of ``search_fts`` are documents (one context-log line, or one tool result) with the
terms of ``_terms`` in the indexed column; ranking is FTS5's built-in BM25.
``search_sources`` records how far each item is indexed (``upto``: a byte size or chunk
id, the backend's choice; ``lines``: context lines indexed), which is how an index that
lost entries (a crash between a write and its indexing) catches up.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence

from ._search import Doc, RawHit

__all__ = [
    "FTS_SCHEMA",
    "add_docs",
    "create_private",
    "drop_item",
    "drop_session",
    "fts_query",
    "get_source",
    "set_source",
]

FTS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS search_fts USING fts5(
    terms, skey UNINDEXED, name UNINDEXED, line UNINDEXED, text UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 0');
CREATE TABLE IF NOT EXISTS search_sources (
    skey TEXT NOT NULL, name TEXT NOT NULL, upto INTEGER NOT NULL, lines INTEGER NOT NULL,
    PRIMARY KEY (skey, name));
"""


def create_private(path: str) -> None:
    """Create a database file ``0600`` (umask aside) if it is missing; SQLite gives its
    ``-wal`` and ``-shm`` files the mode of the database file."""
    if path == ":memory:" or path.startswith("file:") or os.path.exists(path):
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def add_docs(c: sqlite3.Connection, skey: str, name: str, docs: Sequence[Doc]) -> None:
    c.executemany(
        "INSERT INTO search_fts (terms, skey, name, line, text) VALUES (?, ?, ?, ?, ?)",
        [(d.terms, skey, name, d.line, d.text) for d in docs],
    )


def get_source(c: sqlite3.Connection, skey: str, name: str) -> tuple[int, int] | None:
    """``(upto, lines)`` of an indexed item, ``None`` if it was never indexed."""
    row = c.execute(
        "SELECT upto, lines FROM search_sources WHERE skey = ? AND name = ?", (skey, name)
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def set_source(c: sqlite3.Connection, skey: str, name: str, upto: int, lines: int) -> None:
    c.execute(
        "INSERT INTO search_sources (skey, name, upto, lines) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (skey, name) DO UPDATE SET upto = excluded.upto, lines = excluded.lines",
        (skey, name, upto, lines),
    )


def drop_item(c: sqlite3.Connection, skey: str, name: str) -> None:
    c.execute("DELETE FROM search_fts WHERE skey = ? AND name = ?", (skey, name))
    c.execute("DELETE FROM search_sources WHERE skey = ? AND name = ?", (skey, name))


def drop_session(c: sqlite3.Connection, skey: str) -> None:
    c.execute("DELETE FROM search_fts WHERE skey = ?", (skey,))
    c.execute("DELETE FROM search_sources WHERE skey = ?", (skey,))


def _match(terms: list[str]) -> str:
    # Terms are letters and digits only (see _terms), so quoting them is all it takes.
    return " OR ".join(f'"{t}"' for t in terms)


def fts_query(
    c: sqlite3.Connection,
    terms: list[str],
    skey: str | None,
    limit: int,
    deadline: float,
) -> list[RawHit]:
    """The ``limit`` best documents by BM25 (of one session's, if ``skey``), stopped by
    SQLite itself at ``deadline`` (``time.monotonic()``), with ``TimeoutError``."""

    def interrupt() -> int:
        return 1 if time.monotonic() > deadline else 0

    where = "" if skey is None else "AND skey = ?"
    args: tuple[object, ...] = (_match(terms),) if skey is None else (_match(terms), skey)
    c.set_progress_handler(interrupt, 1_000)
    try:
        rows = c.execute(
            "SELECT skey, name, line, -bm25(search_fts), text FROM search_fts "
            f"WHERE search_fts MATCH ? {where} ORDER BY bm25(search_fts) LIMIT {int(limit)}",
            args,
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if "interrupt" in str(exc):
            raise TimeoutError from exc
        raise
    finally:
        c.set_progress_handler(None, 0)
    return [RawHit(str(k), str(n), int(ln), float(sc), t) for k, n, ln, sc, t in rows]
