"""The SQLite FTS5 search index: in ``SQLiteWorkspace``'s own database, beside a
``LocalWorkspace`` (``search.sqlite3``), and in memory for ``MemoryWorkspace``.

Rows of ``search_docs`` are documents (one context-log line, or one tool result): where
they are, their snippet text and, compressed, the text their terms were taken from where
the snippet text is not all of it (a tool result; a message longer than its snippet).
``search_fts`` indexes their terms (of ``_terms``), ranked by FTS5's BM25, and keeps none:
the term string is longer than its text and was most of the index. ``search_sources``
records how far each item is indexed (``upto``: a byte size or chunk id, the backend's
choice; ``lines``: context lines indexed), which is how an index that lost entries (a
crash between a write and its indexing) catches up.

To delete a document, FTS5 needs the terms it indexed (``'delete'``; ``contentless_delete``
needs SQLite 3.43): they are computed again from the stored text, by the SQL function
:func:`register` puts on each connection. ``search_fts`` is an external-content table over
the view ``search_terms``, which computes them, rather than a contentless table, so that
FTS5's ``integrity-check`` (with ``rank = 1``) compares the index with them. Terms computed
otherwise than they were indexed corrupt the index, so :data:`STAMP` names the layout, the
``_terms`` version and Python's Unicode tables (what ``\\w`` matches), and :func:`install`
recreates empty an index stamped otherwise (an older release's); the backend's catch-up
then indexes the store again.

A query leaves out its terms found in 40% of all documents or more (their BM25 weight is
near nothing, so they hardly change the ranking, yet every document they match would be
scored), keeping the rarest when no other remains.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import unicodedata
import zlib
from collections import OrderedDict
from collections.abc import Sequence

from .._logging import logger
from ._search import Doc, RawHit, doc_terms
from ._terms import TERMS_VERSION

__all__ = [
    "STAMP",
    "add_docs",
    "create_private",
    "drop_item",
    "drop_session",
    "fts_query",
    "get_source",
    "install",
    "reader",
    "register",
    "set_source",
]

STAMP = f"search index 2, terms {TERMS_VERSION}, unicode {unicodedata.unidata_version}"
"""What an index's terms depend on; recorded in ``search_meta``."""

_TABLES = """
CREATE TABLE search_docs (
    id INTEGER PRIMARY KEY, skey TEXT NOT NULL, name TEXT NOT NULL, line INTEGER NOT NULL,
    text TEXT, source BLOB);
CREATE INDEX search_docs_by_item ON search_docs (skey, name);
CREATE VIEW search_terms AS
    SELECT id, skey, name, contextfold_terms(text, source) AS terms FROM search_docs;
CREATE VIRTUAL TABLE search_fts USING fts5(
    terms, content = 'search_terms', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 0');
CREATE VIRTUAL TABLE search_vocab USING fts5vocab(search_fts, 'row');
CREATE TABLE search_sources (
    skey TEXT NOT NULL, name TEXT NOT NULL, upto INTEGER NOT NULL, lines INTEGER NOT NULL,
    PRIMARY KEY (skey, name));
CREATE TABLE search_meta (stamp TEXT NOT NULL)
"""
_DROP = [
    "DROP VIEW IF EXISTS search_terms",
    *(
        f"DROP TABLE IF EXISTS {table}"
        for table in ("search_vocab", "search_fts", "search_docs", "search_sources", "search_meta")
    ),
]

_PRUNE_FROM = 200
"""Documents an index holds before common terms are left out of queries."""
_COMMON = 0.4
"""A term in this share of the documents or more is left out of a query: its BM25 weight
(IDF) is at most log(1.5), against 5 to 9 for the words that find something."""


def _terms_of(text: str | None, source: bytes | None) -> str:
    return doc_terms(zlib.decompress(source).decode() if source is not None else text or "")


def register(c: sqlite3.Connection) -> None:
    """Give ``c`` the function the view ``search_terms`` computes the terms with."""
    c.create_function("contextfold_terms", 2, _terms_of, deterministic=True)


def install(c: sqlite3.Connection) -> None:
    """Register the terms function on ``c`` and create the index tables, dropping first
    those of an index stamped otherwise than :data:`STAMP`. In a write transaction."""
    register(c)
    tables = {
        str(name)
        for (name,) in c.execute(
            "SELECT name FROM sqlite_master WHERE name IN ('search_fts', 'search_meta')"
        )
    }
    stamp = None
    if "search_meta" in tables:
        row = c.execute("SELECT stamp FROM search_meta").fetchone()
        stamp = None if row is None else str(row[0])
    if stamp == STAMP:
        return
    if tables:
        logger.info("search index written as %r, not %r: building it again", stamp, STAMP)
    for statement in _DROP:
        c.execute(statement)
    for statement in _TABLES.split(";"):
        c.execute(statement)
    c.execute("INSERT INTO search_meta (stamp) VALUES (?)", (STAMP,))


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
        register(conn)
        while len(cache) >= _READERS_PER_THREAD:
            cache.popitem(last=False)[1].close()
    cache[path] = conn
    conn.execute(f"PRAGMA busy_timeout = {max(1, int(busy * 1000))}")
    return conn


def add_docs(c: sqlite3.Connection, skey: str, name: str, docs: Sequence[Doc]) -> None:
    """Index ``docs`` of one item, in a write transaction."""
    # Ids chosen here (the writer holds the database), so both tables get them in one go.
    first = int(c.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM search_docs").fetchone()[0])
    c.executemany(
        "INSERT INTO search_docs (id, skey, name, line, text, source) VALUES (?, ?, ?, ?, ?, ?)",
        [(first + i, skey, name, d.line, d.text, _packed(d.source)) for i, d in enumerate(docs)],
    )
    c.executemany(
        "INSERT INTO search_fts (rowid, terms) VALUES (?, ?)",
        [(first + i, d.terms) for i, d in enumerate(docs)],
    )


def _packed(source: str | None) -> bytes | None:
    return None if source is None else zlib.compress(source.encode())


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
    _drop(c, "skey = ? AND name = ?", (skey, name))


def drop_session(c: sqlite3.Connection, skey: str) -> None:
    _drop(c, "skey = ?", (skey,))


def _drop(c: sqlite3.Connection, where: str, args: tuple[str, ...]) -> None:
    # FTS5 unindexes a document given the terms it was indexed under (see the module doc);
    # in rowid order, since FTS5 flushes what it holds pending at every step back.
    c.execute(
        "INSERT INTO search_fts (search_fts, rowid, terms) "
        f"SELECT 'delete', id, terms FROM search_terms WHERE {where} ORDER BY id",
        args,
    )
    c.execute(f"DELETE FROM search_docs WHERE {where}", args)
    c.execute(f"DELETE FROM search_sources WHERE {where}", args)


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
        args: tuple[str, ...]
        if skey is None:
            join, where, args = "", "", (_match(terms),)
        else:
            join = "CROSS JOIN search_docs s ON s.id = search_fts.rowid "
            where, args = "AND s.skey = ?", (_match(terms), skey)
        # The best rowids first, then the documents of those alone (their text is long).
        rows = c.execute(
            "SELECT d.skey, d.name, d.line, -best.score, d.text FROM ("
            f"SELECT search_fts.rowid AS id, bm25(search_fts) AS score FROM search_fts {join}"
            f"WHERE search_fts MATCH ? {where} "
            f"ORDER BY bm25(search_fts), search_fts.rowid LIMIT {int(limit)}"
            ") best CROSS JOIN search_docs d ON d.id = best.id ORDER BY best.score, best.id",
            args,
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if "interrupt" in str(exc):
            raise TimeoutError from exc
        raise
    finally:
        c.set_progress_handler(None, 0)
    return [RawHit(str(k), str(n), int(ln), float(sc), t) for k, n, ln, sc, t in rows]
