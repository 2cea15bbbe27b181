"""The SQLite FTS5 search index: in ``SQLiteWorkspace``'s own database, beside a
``LocalWorkspace`` (``search.sqlite3``), and in memory for ``MemoryWorkspace``.

Rows of ``search_fts`` are documents (one context-log line, or one tool result) with the
terms of ``_terms`` in the indexed column; ranking is FTS5's built-in BM25.
``search_sources`` records how far each item is indexed (``upto``: a byte size or chunk
id, the backend's choice; ``lines``: context lines indexed), which is how an index that
lost entries (a crash between a write and its indexing) catches up.

A query leaves out its terms found in 40% of all documents or more (their BM25 weight is
near nothing, so they hardly change the ranking, yet every document they match would be
scored), keeping the rarest when no other remains.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import OrderedDict
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
    "reader",
    "set_source",
]

FTS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS search_fts USING fts5(
    terms, skey UNINDEXED, name UNINDEXED, line UNINDEXED, text UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 0');
CREATE TABLE IF NOT EXISTS search_sources (
    skey TEXT NOT NULL, name TEXT NOT NULL, upto INTEGER NOT NULL, lines INTEGER NOT NULL,
    PRIMARY KEY (skey, name));
CREATE VIRTUAL TABLE IF NOT EXISTS search_vocab USING fts5vocab(search_fts, 'row');
"""

_PRUNE_FROM = 200
"""Documents an index holds before common terms are left out of queries."""
_COMMON = 0.4
"""A term in this share of the documents or more is left out of a query: its BM25 weight
(IDF) is at most log(1.5), against 5 to 9 for the words that find something."""


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


_readers = threading.local()
_READERS_PER_THREAD = 4


def reader(path: str, *, busy: float) -> sqlite3.Connection:
    """A read connection to ``path`` for this thread, kept for the next search (the few
    most recent paths per thread; opening one costs more than a small query)."""
    cache: OrderedDict[str, sqlite3.Connection] | None = getattr(_readers, "cache", None)
    if cache is None:
        cache = _readers.cache = OrderedDict()
    conn = cache.pop(path, None)
    if conn is None:
        conn = sqlite3.connect(path, check_same_thread=False)
        while len(cache) >= _READERS_PER_THREAD:
            cache.popitem(last=False)[1].close()
    cache[path] = conn
    conn.execute(f"PRAGMA busy_timeout = {max(1, int(busy * 1000))}")
    return conn


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


def _distinctive(c: sqlite3.Connection, terms: list[str]) -> list[str]:
    """``terms`` without those in more than half of the documents (see the module doc)."""
    total = int(c.execute("SELECT COALESCE(SUM(lines), 0) FROM search_sources").fetchone()[0])
    if total < _PRUNE_FROM:
        return terms
    docs = {}
    for term in terms:
        row = c.execute("SELECT doc FROM search_vocab WHERE term = ?", (term,)).fetchone()
        docs[term] = 0 if row is None else int(row[0])
    kept = [t for t in terms if docs[t] < _COMMON * total]
    return kept or sorted(terms, key=lambda t: docs[t])[:1]


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

    c.set_progress_handler(interrupt, 1_000)
    try:
        terms = _distinctive(c, terms)
        where = "" if skey is None else "AND skey = ?"
        args: tuple[object, ...] = (_match(terms),) if skey is None else (_match(terms), skey)
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
