"""SQLiteWorkspace: the whole workspace in one embedded database file (WAL)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from .._exceptions import WorkspaceError
from . import _fts
from ._grep import Deadline
from ._lease import Lease, LeaseHolder, acquire_lease
from ._names import CONTEXT_FILE, ItemPath, encode_key, is_capped, tool_file
from ._search import RawHit, SearchableWorkspace, context_docs, rank_off_loop, tool_doc
from ._sqlite_leases import LEASES_SCHEMA, SQLiteLeases
from ._wal import enter_wal

__all__ = ["SQLiteWorkspace"]

_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (skey TEXT PRIMARY KEY, session_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS context_chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, skey TEXT NOT NULL, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS context_chunks_by_session ON context_chunks (skey, id);
CREATE TABLE IF NOT EXISTS tool_results (
    skey TEXT NOT NULL, name TEXT NOT NULL, body BLOB NOT NULL, PRIMARY KEY (skey, name));
CREATE TABLE IF NOT EXISTS data (name TEXT PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS session_data (
    skey TEXT NOT NULL, name TEXT NOT NULL, PRIMARY KEY (skey, name));
CREATE INDEX IF NOT EXISTS session_data_by_name ON session_data (name);
CREATE TABLE IF NOT EXISTS states (skey TEXT PRIMARY KEY, body BLOB NOT NULL);
"""
_SCHEMA += LEASES_SCHEMA

_BLOB_PIECE = 1 << 20
"""Bytes of a body written by one call."""


class SQLiteWorkspace(SearchableWorkspace):
    """The workspace in one SQLite file, for a single machine without a directory tree.

    WAL mode, so readers never block the writer; every write is one ``BEGIN IMMEDIATE``
    transaction, so several processes can share the file (they wait up to
    ``busy_timeout`` seconds for each other). ``fsync=True`` (default) runs with
    ``synchronous=FULL`` (an acknowledged write survives power loss); ``False`` uses
    ``NORMAL`` (survives process crashes). The context log is stored as one row per
    offload call (a chunk), read back concatenated in insertion order. References are
    workspace-relative (``sessions/s1/context.jsonl``). Calls run in a worker thread.
    A database file this class creates is ``0600`` (whatever the umask), and so are its
    ``-wal`` and ``-shm`` files; an existing file keeps its mode.

    Search uses FTS5 tables in the same file, written in the same transaction as the
    content they index, so the index never claims what the store lacks; ``initialize()``
    indexes whatever an older database holds unindexed. Searches read on a connection of
    their own (WAL readers do not block the writer).

    A ``SessionLease``: :meth:`acquire_lease` grants one worker a session at a time (a row
    of ``leases``, claimed in ``BEGIN IMMEDIATE``, with an expiry and a fencing token,
    renewed in the background), and ``save_state`` refuses to replace the state of a
    session another worker leases (``SessionLeasedError``) or whose lease this instance
    lost (``LeaseLostError``), as ``PostgresWorkspace`` does.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = True, busy_timeout: float = 60.0
    ) -> None:
        self._path = os.fspath(path)
        self._fsync = fsync
        self._busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._leases = SQLiteLeases()

    async def initialize(self) -> None:
        """Open the file (created if missing), switch to WAL and create the tables."""
        if self._conn is None:
            self._conn = await asyncio.to_thread(self._connect)

        def tx(c: sqlite3.Connection) -> None:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    c.execute(statement)
            _fts.install(c)
            _catch_up(c)

        await self._write(tx)
        self._initialized = True

    def _connect(self) -> sqlite3.Connection:
        _fts.create_private(self._path)
        conn = sqlite3.connect(
            self._path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        enter_wal(conn, self._busy_timeout)
        conn.execute(f"PRAGMA synchronous = {'FULL' if self._fsync else 'NORMAL'}")
        return conn

    async def close(self) -> None:
        """Close the connection."""
        conn, self._conn = self._conn, None
        self._initialized = False
        if conn is not None:
            await asyncio.to_thread(conn.close)

    def _run(self, fn: Callable[[sqlite3.Connection], _T], *, write: bool) -> _T:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise WorkspaceError("SQLiteWorkspace is closed; call `await initialize()`")
            try:
                if not write:
                    return fn(conn)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                return result
            except sqlite3.Error as exc:
                raise WorkspaceError(f"SQLite workspace {self._path!r} failed: {exc}") from exc

    async def _write(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        return await asyncio.to_thread(self._run, fn, write=True)

    async def _read(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        return await asyncio.to_thread(self._run, fn, write=False)

    # -- writing ---------------------------------------------------------------------------

    async def _append_context(self, skey: str, session_id: str, payload: bytes) -> None:
        def tx(c: sqlite3.Connection) -> None:
            _touch(c, skey, session_id)
            cur = c.execute(
                "INSERT INTO context_chunks (skey, body) VALUES (?, zeroblob(?))",
                (skey, len(payload)),
            )
            assert cur.lastrowid is not None
            _write_blob(c, "context_chunks", cur.lastrowid, payload)
            _index_context(c, skey, (cur.lastrowid, payload))

        await self._write(tx)

    async def _put_tool_result(self, skey: str, session_id: str, tkey: str, body: bytes) -> str:
        def tx(c: sqlite3.Connection) -> str:
            _touch(c, skey, session_id)
            name = tool_file(tkey)
            while True:
                cur = c.execute(
                    "INSERT OR IGNORE INTO tool_results (skey, name, body) "
                    "VALUES (?, ?, zeroblob(?))",
                    (skey, name, len(body)),
                )
                if cur.rowcount == 1:
                    assert cur.lastrowid is not None
                    _write_blob(c, "tool_results", cur.lastrowid, body)
                    _fts.add_docs(c, skey, name, [tool_doc(body)])
                    _fts.set_source(c, skey, name, 1, 1)
                    return name
                name = tool_file(tkey, unique=True)

        return await self._write(tx)

    async def _put_data(self, skey: str, session_id: str, name: str, payload: bytes) -> None:
        def tx(c: sqlite3.Connection) -> None:
            _touch(c, skey, session_id)
            c.execute("INSERT OR IGNORE INTO session_data (skey, name) VALUES (?, ?)", (skey, name))
            c.execute("INSERT OR IGNORE INTO data (name, body) VALUES (?, ?)", (name, payload))

        await self._write(tx)

    async def _save_state(self, skey: str, session_id: str, state: bytes) -> None:
        def tx(c: sqlite3.Connection) -> None:
            self._leases.fence(c, skey, session_id)
            _touch(c, skey, session_id)
            c.execute(
                "INSERT INTO states (skey, body) VALUES (?, ?) "
                "ON CONFLICT (skey) DO UPDATE SET body = excluded.body",
                (skey, state),
            )

        await self._write(tx)

    # -- leases ----------------------------------------------------------------------------

    async def acquire_lease(
        self, session_id: str, *, ttl: float = 30.0, wait: float = 0.0, owner: str | None = None
    ) -> Lease:
        """Take the session's lease for ``ttl`` seconds, renewed in the background.

        Waits up to ``wait`` seconds while another worker holds it, then raises
        ``SessionLeasedError`` naming the holder. A worker that dies stops renewing, so
        its lease expires after ``ttl`` seconds and the session can be taken over.
        """
        self._require_init()
        return await acquire_lease(self, session_id, ttl=ttl, wait=wait, owner=owner)

    async def _lease_try(self, session_id: str, owner: str, ttl: float) -> int | LeaseHolder:
        skey = encode_key(session_id, what="session_id")
        return await self._write(lambda c: self._leases.claim(c, skey, owner, ttl))

    async def _lease_renew(self, session_id: str, token: int, ttl: float) -> bool:
        skey = encode_key(session_id, what="session_id")
        return await self._write(lambda c: self._leases.renew(c, skey, token, ttl))

    async def _lease_release(self, session_id: str, token: int) -> None:
        skey = encode_key(session_id, what="session_id")
        if self._conn is not None:
            await self._write(lambda c: self._leases.release(c, skey, token))

    # -- purge -----------------------------------------------------------------------------

    async def _purge(self, skey: str) -> None:
        def tx(c: sqlite3.Connection) -> None:
            names = [
                r[0] for r in c.execute("SELECT name FROM session_data WHERE skey = ?", (skey,))
            ]
            for table in ("sessions", "context_chunks", "tool_results", "session_data", "states"):
                c.execute(f"DELETE FROM {table} WHERE skey = ?", (skey,))
            _fts.drop_session(c, skey)
            c.executemany(
                "DELETE FROM data WHERE name = ? "
                "AND NOT EXISTS (SELECT 1 FROM session_data WHERE name = data.name)",
                [(n,) for n in names],
            )

        await self._write(tx)

    # -- reading ---------------------------------------------------------------------------

    async def _get(self, item: ItemPath) -> bytes | None:
        def q(c: sqlite3.Connection) -> bytes | None:
            if item.kind == "data":
                row = c.execute("SELECT body FROM data WHERE name = ?", (item.name,)).fetchone()
                return None if row is None else bytes(row[0])
            if item.kind == "tool_result":
                row = c.execute(
                    "SELECT body FROM tool_results WHERE skey = ? AND name = ?",
                    (item.session_key, item.name),
                ).fetchone()
                return None if row is None else bytes(row[0])
            rows = c.execute(
                "SELECT body FROM context_chunks WHERE skey = ? ORDER BY id", (item.session_key,)
            ).fetchall()
            return b"".join(bytes(r[0]) for r in rows) if rows else None

        return await self._read(q)

    async def _load_state(self, skey: str) -> bytes | None:
        def q(c: sqlite3.Connection) -> bytes | None:
            row = c.execute("SELECT body FROM states WHERE skey = ?", (skey,)).fetchone()
            return None if row is None else bytes(row[0])

        return await self._read(q)

    async def _sessions(self) -> list[str]:
        return await self._read(
            lambda c: [_read_id(r[0]) for r in c.execute("SELECT session_id FROM sessions")]
        )

    async def _text_items_of(self, skeys: list[str]) -> list[tuple[ItemPath, int, str | None]]:
        """The context logs and tool results of the sessions ``skeys``, in one query each
        (a grep over the whole workspace asks a page of sessions at a time)."""
        where = "WHERE s.skey IN (SELECT value FROM json_each(?))"
        return await self._read(lambda c: _text_items(c, where, (json.dumps(skeys),)))

    async def _items(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        def q(c: sqlite3.Connection) -> list[tuple[ItemPath, int, str | None]]:
            where, args = ("WHERE s.skey = ?", (skey,)) if skey is not None else ("", ())
            out = _text_items(c, where, args)
            if skey is None:
                rows = c.execute("SELECT name, LENGTH(body), NULL FROM data").fetchall()
            else:
                rows = c.execute(
                    "SELECT d.name, LENGTH(d.body), s.session_id FROM session_data r "
                    "JOIN data d ON d.name = r.name JOIN sessions s ON s.skey = r.skey "
                    "WHERE r.skey = ?",
                    (skey,),
                ).fetchall()
            for name, size, sid in rows:
                sid = None if sid is None else _read_id(sid)
                out.append((ItemPath("data", None, name), int(size), sid))
            return out

        return await self._read(q)

    # -- search ----------------------------------------------------------------------------

    async def _search(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        if self._conn is None:
            raise WorkspaceError("SQLiteWorkspace is closed; call `await initialize()`")
        return await rank_off_loop(self._search_sync, terms, skey, limit, deadline)

    def _search_sync(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        # A connection of its own: a long search must not hold the writers' lock.
        try:
            conn = _fts.reader(self._path, busy=deadline.left())
            hits = _fts.fts_query(conn, terms, skey, limit, time.monotonic() + deadline.left())
            return _named(conn, hits)
        except TimeoutError:
            raise deadline.expired() from None
        except sqlite3.Error as exc:
            raise WorkspaceError(f"SQLite workspace {self._path!r} failed: {exc}") from exc


def _write_blob(c: sqlite3.Connection, table: str, rowid: int, body: bytes) -> None:
    """Fill the ``zeroblob`` just inserted a piece at a time: binding a 100 MB body copies
    it in one call, holding the GIL (and so the event loop)."""
    view = memoryview(body)
    with c.blobopen(table, "body", rowid) as blob:
        for start in range(0, len(view), _BLOB_PIECE):
            blob.write(view[start : start + _BLOB_PIECE])


def _index_context(
    c: sqlite3.Connection, skey: str, fresh: tuple[int, bytes] | None = None
) -> None:
    """Index the session's chunks past the indexed one (normally just the new one,
    ``fresh``: its id and body, not read back)."""
    upto, lines = _fts.get_source(c, skey, CONTEXT_FILE) or (0, 0)
    rows = c.execute(
        "SELECT id FROM context_chunks WHERE skey = ? AND id > ? ORDER BY id", (skey, upto)
    ).fetchall()
    for (chunk_id,) in rows:
        if fresh is not None and chunk_id == fresh[0]:
            body = fresh[1]
        else:
            (body,) = c.execute(
                "SELECT body FROM context_chunks WHERE id = ?", (chunk_id,)
            ).fetchone()
        docs = context_docs(bytes(body), lines)
        _fts.add_docs(c, skey, CONTEXT_FILE, docs)
        upto, lines = chunk_id, lines + len(docs)
    if rows:
        _fts.set_source(c, skey, CONTEXT_FILE, upto, lines)


def _catch_up(c: sqlite3.Connection) -> None:
    """Index what the store holds and the index does not (a database of an older version)."""
    for (skey,) in c.execute(
        "SELECT DISTINCT x.skey FROM context_chunks x LEFT JOIN search_sources s "
        "ON s.skey = x.skey AND s.name = ? WHERE x.id > COALESCE(s.upto, 0)",
        (CONTEXT_FILE,),
    ).fetchall():
        _index_context(c, skey)
    for skey, name, body in c.execute(
        "SELECT t.skey, t.name, t.body FROM tool_results t WHERE NOT EXISTS "
        "(SELECT 1 FROM search_sources s WHERE s.skey = t.skey AND s.name = t.name)"
    ).fetchall():
        _fts.add_docs(c, skey, name, [tool_doc(bytes(body))])
        _fts.set_source(c, skey, name, 1, 1)


def _touch(c: sqlite3.Connection, skey: str, session_id: str) -> None:
    c.execute(
        "INSERT OR IGNORE INTO sessions (skey, session_id) VALUES (?, ?)",
        (skey, _stored_id(session_id)),
    )


def _stored_id(session_id: str) -> str | bytes:
    """A session id as stored: TEXT, or (lone surrogates, which UTF-8 text cannot hold)
    a BLOB of its ``surrogatepass`` UTF-8 bytes, so every id round-trips as on the other
    backends."""
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError:
        return session_id.encode("utf-8", "surrogatepass")
    return session_id


def _read_id(value: str | bytes) -> str:
    """A session id as :func:`_stored_id` stored it."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)


def _named(c: sqlite3.Connection, hits: list[RawHit]) -> list[RawHit]:
    """``hits`` with the session ids of capped keys, which cannot be decoded."""
    out = []
    for hit in hits:
        if is_capped(hit.skey):
            row = c.execute(
                "SELECT session_id FROM sessions WHERE skey = ?", (hit.skey,)
            ).fetchone()
            hit = dataclasses.replace(hit, session_id=None if row is None else _read_id(row[0]))
        out.append(hit)
    return out


def _text_items(
    c: sqlite3.Connection, where: str, args: tuple[str, ...]
) -> list[tuple[ItemPath, int, str | None]]:
    """Context logs and tool results of the sessions ``where`` selects (as ``s``)."""
    out: list[tuple[ItemPath, int, str | None]] = []
    for key, sid, size in c.execute(
        "SELECT s.skey, s.session_id, SUM(LENGTH(x.body)) FROM sessions s "
        f"JOIN context_chunks x ON x.skey = s.skey {where} GROUP BY s.skey",
        args,
    ):
        out.append((ItemPath("context", key, CONTEXT_FILE), int(size), _read_id(sid)))
    for key, sid, name, size in c.execute(
        "SELECT s.skey, s.session_id, t.name, LENGTH(t.body) FROM sessions s "
        f"JOIN tool_results t ON t.skey = s.skey {where}",
        args,
    ):
        out.append((ItemPath("tool_result", key, name), int(size), _read_id(sid)))
    return out
