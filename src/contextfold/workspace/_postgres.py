"""PostgresWorkspace: one shared store for fleets of agent workers (asyncpg).

The parts, each in a module of its own: ``_postgres_tables`` (the schema and the pool),
``_postgres_leases`` (session leases and the fence on state writes), ``_postgres_search``
(full-text search). This class is the item store over them, with the blob tier: bodies
of at least ``blob_threshold`` bytes kept in a :class:`BlobStore`.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from .._exceptions import WorkspaceError
from ._blobs import BlobStore, blob_digest
from ._grep import Deadline
from ._lease import Lease, acquire_lease
from ._names import CONTEXT_FILE, ItemPath, tool_file
from ._postgres_leases import PostgresLeases
from ._postgres_pieces import PIECE, with_body
from ._postgres_search import PostgresSearch
from ._postgres_tables import BLOB_TABLES, DATA_LOCK, SIZE, Tables, decode_id, encode_id
from ._search import RawHit, SearchableWorkspace

if TYPE_CHECKING:
    import asyncpg

__all__ = ["PostgresWorkspace"]


class PostgresWorkspace(SearchableWorkspace):
    """The workspace in PostgreSQL, shared by any number of workers on any machines.

    ``initialize()`` creates the tables (named ``{table_prefix}sessions`` and so on) under
    an advisory lock, so many workers may initialize at once. Each offload is one
    transaction; durability is the server's (``synchronous_commit``). The context log is
    one row per offload call, read back in commit-sequence order. References are
    workspace-relative (``sessions/s1/context.jsonl``). Needs the ``postgres`` extra.

    ``blobs`` (a :class:`BlobStore`, e.g. ``S3Workspace(bucket)``) takes every body of at
    least ``blob_threshold`` bytes (context chunks, tool results, data), by SHA-256, and
    the row keeps only the digest and size: records, state and small items stay in
    PostgreSQL. The body is stored before the row is committed, so a row never names a
    body the blob store lacks (a crash in between leaves an unreferenced blob, never a
    dangling row); purge deletes the blobs no row references any more. This workspace
    initializes and closes the blob store it is given.

    A ``SessionLease``: :meth:`acquire_lease` grants one worker a session at a time (a
    row lock with an expiry in server time, renewed in the background), and
    ``save_state`` refuses to replace the state of a session another worker leases
    (``SessionLeasedError``) or whose lease this instance lost (``LeaseLostError``).

    Search is PostgreSQL full-text search (``tsvector`` under a GIN index, ranked by
    ``ts_rank``), written in the same transaction as the content it indexes; appends to
    one session take its index row's lock first, so line numbers follow chunk order.
    """

    def __init__(
        self,
        dsn: str,
        *,
        table_prefix: str = "contextfold_",
        max_connections: int = 10,
        blobs: BlobStore | None = None,
        blob_threshold: int = 64 * 1024,
    ) -> None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,40}", table_prefix):
            raise ValueError(
                f"table_prefix must match [a-z_][a-z0-9_]*, at most 41 chars: {table_prefix!r}"
            )
        if blob_threshold < 1:
            raise ValueError(f"blob_threshold must be at least 1 byte, got {blob_threshold}")
        self._p = table_prefix
        self._tables = Tables(dsn, table_prefix, max_connections)
        self._leases = PostgresLeases(self._tables)
        self._search_index = PostgresSearch(self._tables, self._body)
        self.blobs = blobs
        self.blob_threshold = blob_threshold

    async def initialize(self) -> None:
        """Connect and create the schema (idempotent, safe to run concurrently)."""
        await self._tables.open()
        if self.blobs is not None:
            await self.blobs.initialize()
        await self._search_index.catch_up()
        self._initialized = True

    async def close(self) -> None:
        """Close the connection pool (and the blob store)."""
        self._initialized = False
        await self._tables.close()
        if self.blobs is not None:
            await self.blobs.close()

    def _pool_or_fail(self) -> asyncpg.Pool:
        return self._tables.ready()

    async def _touch(self, con: Any, skey: str, session_id: str) -> None:
        await con.execute(
            f"INSERT INTO {self._p}sessions (skey, session_id) VALUES ($1, $2) "
            "ON CONFLICT DO NOTHING",
            skey,
            encode_id(session_id),
        )

    async def _stored(self, con: Any, body: bytes) -> tuple[bytes, str | None, int | None]:
        """``(body, blob, blob_size)`` for a row: a large body goes to the blob store first.

        Runs in the row's transaction, under the shared data lock: purge deletes blobs
        under the exclusive one, so it never deletes one a row is about to name. Call it
        before touching any row, so the lock comes first in every transaction (no deadlock
        with a purge).
        """
        if self.blobs is None or len(body) < self.blob_threshold:
            return body, None, None
        await con.execute("SELECT pg_advisory_xact_lock_shared($1)", DATA_LOCK)
        big = len(body) > PIECE  # hashing 100 MB on the loop's thread: 0.2 s
        digest = await asyncio.to_thread(blob_digest, body) if big else blob_digest(body)
        await self.blobs.put_blob(digest, body)
        return b"", digest, len(body)

    # -- writing ---------------------------------------------------------------------------

    async def _append_context(self, skey: str, session_id: str, payload: bytes) -> None:
        async with self._pool_or_fail().acquire() as con, con.transaction():
            body, blob, size = await self._stored(con, payload)  # the data lock before rows
            await self._touch(con, skey, session_id)
            await self._search_index.lock_log(con, skey)
            chunk = await with_body(
                con,
                f"INSERT INTO {self._p}context_chunks (skey, body, blob, blob_size) "
                "VALUES ($1, {body}, $2, $3) RETURNING id",
                body,
                skey,
                blob,
                size,
            )
            # The payload in hand: a chunk stored as a blob is not fetched back to index it.
            await self._search_index.index_log(con, skey, known={int(chunk): payload})

    async def _put_tool_result(self, skey: str, session_id: str, tkey: str, body: bytes) -> str:
        async with self._pool_or_fail().acquire() as con, con.transaction():
            stored, blob, size = await self._stored(con, body)
            await self._touch(con, skey, session_id)
            name = tool_file(tkey)
            while True:
                got = await with_body(
                    con,
                    f"INSERT INTO {self._p}tool_results (skey, name, body, blob, blob_size) "
                    "VALUES ($1, $2, {body}, $3, $4) ON CONFLICT DO NOTHING RETURNING name",
                    stored,
                    skey,
                    name,
                    blob,
                    size,
                )
                if got is not None:
                    await self._search_index.index_tool(con, skey, name, body)
                    return name
                name = tool_file(tkey, unique=True)

    async def _put_data(self, skey: str, session_id: str, name: str, payload: bytes) -> None:
        async with self._pool_or_fail().acquire() as con, con.transaction():
            # Shared lock: purge collects unreferenced data under the exclusive one.
            await con.execute("SELECT pg_advisory_xact_lock_shared($1)", DATA_LOCK)
            await self._touch(con, skey, session_id)
            await con.execute(
                f"INSERT INTO {self._p}session_data (skey, name) VALUES ($1, $2) "
                "ON CONFLICT DO NOTHING",
                skey,
                name,
            )
            if await con.fetchval(f"SELECT 1 FROM {self._p}data WHERE name = $1", name) is None:
                body, blob, size = await self._stored(con, payload)
                await with_body(
                    con,
                    f"INSERT INTO {self._p}data (name, body, blob, blob_size) "
                    "VALUES ($1, {body}, $2, $3) ON CONFLICT DO NOTHING",
                    body,
                    name,
                    blob,
                    size,
                )

    async def _save_state(self, skey: str, session_id: str, state: bytes) -> None:
        async with self._pool_or_fail().acquire() as con, con.transaction():
            await self._leases.fence(con, skey, session_id)
            await self._touch(con, skey, session_id)
            await con.execute(
                f"INSERT INTO {self._p}states (skey, body) VALUES ($1, $2) "
                "ON CONFLICT (skey) DO UPDATE SET body = EXCLUDED.body",
                skey,
                state,
            )

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
        return await acquire_lease(self._leases, session_id, ttl=ttl, wait=wait, owner=owner)

    # -- purge -----------------------------------------------------------------------------

    async def _purge(self, skey: str) -> None:
        p = self._p
        async with self._pool_or_fail().acquire() as con:
            # A session-level lock: it covers deleting the blobs after the rows' commit.
            await con.execute("SELECT pg_advisory_lock($1)", DATA_LOCK)
            try:
                async with con.transaction():
                    names = [
                        r["name"]
                        for r in await con.fetch(
                            f"SELECT name FROM {p}session_data WHERE skey = $1", skey
                        )
                    ]
                    blobs: set[str] = set()
                    for table in ("context_chunks", "tool_results"):
                        rows = await con.fetch(
                            f"DELETE FROM {p}{table} WHERE skey = $1 RETURNING blob", skey
                        )
                        blobs.update(r["blob"] for r in rows if r["blob"] is not None)
                    for table in (
                        "sessions",
                        "session_data",
                        "states",
                        "search_docs",
                        "search_sources",
                    ):
                        await con.execute(f"DELETE FROM {p}{table} WHERE skey = $1", skey)
                    rows = await con.fetch(
                        f"DELETE FROM {p}data d WHERE d.name = ANY($1::text[]) AND NOT EXISTS "
                        f"(SELECT 1 FROM {p}session_data r WHERE r.name = d.name) RETURNING blob",
                        names,
                    )
                    blobs.update(r["blob"] for r in rows if r["blob"] is not None)
                    unused = await self._unreferenced(con, sorted(blobs))
                # After the commit: a crash here leaves unreferenced blobs, never a row
                # naming a deleted one.
                if unused and self.blobs is not None:
                    await self.blobs.delete_blobs(unused)
            finally:
                await con.execute("SELECT pg_advisory_unlock($1)", DATA_LOCK)

    async def _unreferenced(self, con: Any, digests: list[str]) -> list[str]:
        if not digests:
            return []
        used = " UNION ".join(
            f"SELECT blob FROM {self._p}{t} WHERE blob = ANY($1::text[])" for t in BLOB_TABLES
        )
        referenced = {r["blob"] for r in await con.fetch(used, digests)}
        return [d for d in digests if d not in referenced]

    # -- reading ---------------------------------------------------------------------------

    async def _get(self, item: ItemPath) -> bytes | None:
        p = self._p
        pool = self._pool_or_fail()
        if item.kind == "data":
            row = await pool.fetchrow(f"SELECT body, blob FROM {p}data WHERE name = $1", item.name)
            return None if row is None else await self._body(row, item)
        if item.kind == "tool_result":
            row = await pool.fetchrow(
                f"SELECT body, blob FROM {p}tool_results WHERE skey = $1 AND name = $2",
                item.session_key,
                item.name,
            )
            return None if row is None else await self._body(row, item)
        rows = await pool.fetch(
            f"SELECT body, blob FROM {p}context_chunks WHERE skey = $1 ORDER BY id",
            item.session_key,
        )
        return (
            b"".join(await asyncio.gather(*(self._body(r, item) for r in rows))) if rows else None
        )

    async def _body(self, row: Any, item: ItemPath) -> bytes:
        if row["blob"] is None:
            return bytes(row["body"])
        got = None if self.blobs is None else await self.blobs.get_blob(row["blob"])
        if got is None:
            where = "no blob store is configured" if self.blobs is None else "it is missing"
            raise WorkspaceError(
                f"{item.rel} is stored as blob {row['blob']} in the blob store, but {where}; "
                "pass the blob store this workspace was written with (blobs=...)"
            )
        return got

    async def _load_state(self, skey: str) -> bytes | None:
        got = await self._pool_or_fail().fetchval(
            f"SELECT body FROM {self._p}states WHERE skey = $1", skey
        )
        return None if got is None else bytes(got)

    async def _sessions(self) -> list[str]:
        rows = await self._pool_or_fail().fetch(f"SELECT session_id FROM {self._p}sessions")
        return [decode_id(r["session_id"]) for r in rows]

    async def _text_items_of(self, skeys: list[str]) -> list[tuple[ItemPath, int, str | None]]:
        """The context logs and tool results of the sessions ``skeys``, in one query each
        (a grep over the whole workspace asks a page of sessions at a time)."""
        return await self._text_items("WHERE s.skey = ANY($1::text[])", skeys)

    async def _items(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        p = self._p
        pool = self._pool_or_fail()
        out = await self._text_items("WHERE ($1::text IS NULL OR s.skey = $1)", skey)
        if skey is None:
            rows = await pool.fetch(
                f"SELECT name, {SIZE.format(t='')} AS size, NULL::bytea AS sid FROM {p}data"
            )
        else:
            rows = await pool.fetch(
                f"SELECT d.name, {SIZE.format(t='d.')} AS size, s.session_id AS sid "
                f"FROM {p}session_data r JOIN {p}data d ON d.name = r.name "
                f"JOIN {p}sessions s ON s.skey = r.skey WHERE r.skey = $1",
                skey,
            )
        for r in rows:
            sid = None if r["sid"] is None else decode_id(r["sid"])
            out.append((ItemPath("data", None, r["name"]), int(r["size"]), sid))
        return out

    async def _text_items(self, where: str, arg: object) -> list[tuple[ItemPath, int, str | None]]:
        """Context logs and tool results of the sessions ``where`` selects (as ``s``)."""
        p = self._p
        pool = self._pool_or_fail()
        out: list[tuple[ItemPath, int, str | None]] = []
        for r in await pool.fetch(
            f"SELECT s.skey, s.session_id, SUM({SIZE.format(t='x.')}) AS size FROM {p}sessions s "
            f"JOIN {p}context_chunks x ON x.skey = s.skey {where} GROUP BY s.skey, s.session_id",
            arg,
        ):
            item = ItemPath("context", r["skey"], CONTEXT_FILE)
            out.append((item, int(r["size"]), decode_id(r["session_id"])))
        for r in await pool.fetch(
            f"SELECT s.skey, s.session_id, t.name, {SIZE.format(t='t.')} AS size "
            f"FROM {p}sessions s JOIN {p}tool_results t ON t.skey = s.skey {where}",
            arg,
        ):
            item = ItemPath("tool_result", r["skey"], r["name"])
            out.append((item, int(r["size"]), decode_id(r["session_id"])))
        return out

    # -- search ----------------------------------------------------------------------------

    async def _search(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        return await self._search_index.search(terms, skey, limit, deadline)
