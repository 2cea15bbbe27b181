"""PostgresWorkspace: one shared store for fleets of agent workers (asyncpg)."""

from __future__ import annotations

import asyncio
import re
import time
from typing import TYPE_CHECKING, Any

from .._exceptions import LeaseLostError, MissingDependencyError, SessionLeasedError, WorkspaceError
from ._blobs import BlobStore, blob_digest
from ._grep import Deadline
from ._lease import Lease, LeaseHolder, acquire_lease
from ._names import CONTEXT_FILE, ItemPath, encode_key, tool_file
from ._search import Doc, RawHit, SearchableWorkspace, context_docs, tool_doc

if TYPE_CHECKING:
    import asyncpg

__all__ = ["PostgresWorkspace"]

# Arbitrary constants naming the advisory locks (schema creation; data collection).
_DDL_LOCK = 0x636F6E74
_DATA_LOCK = 0x64617461

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {p}sessions (skey TEXT PRIMARY KEY, session_id BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS {p}context_chunks (
    id BIGSERIAL PRIMARY KEY, skey TEXT NOT NULL, body BYTEA NOT NULL);
CREATE INDEX IF NOT EXISTS {p}context_chunks_by_session ON {p}context_chunks (skey, id);
CREATE TABLE IF NOT EXISTS {p}tool_results (
    skey TEXT NOT NULL, name TEXT NOT NULL, body BYTEA NOT NULL, PRIMARY KEY (skey, name));
CREATE TABLE IF NOT EXISTS {p}data (name TEXT PRIMARY KEY, body BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS {p}session_data (
    skey TEXT NOT NULL, name TEXT NOT NULL, PRIMARY KEY (skey, name));
CREATE INDEX IF NOT EXISTS {p}session_data_by_name ON {p}session_data (name);
CREATE TABLE IF NOT EXISTS {p}states (skey TEXT PRIMARY KEY, body BYTEA NOT NULL);
"""

# Bodies of at least blob_threshold bytes live in the blob store: the row keeps the digest.
_BLOB_SCHEMA = """
ALTER TABLE {p}context_chunks ADD COLUMN IF NOT EXISTS blob TEXT;
ALTER TABLE {p}context_chunks ADD COLUMN IF NOT EXISTS blob_size BIGINT;
ALTER TABLE {p}tool_results ADD COLUMN IF NOT EXISTS blob TEXT;
ALTER TABLE {p}tool_results ADD COLUMN IF NOT EXISTS blob_size BIGINT;
ALTER TABLE {p}data ADD COLUMN IF NOT EXISTS blob TEXT;
ALTER TABLE {p}data ADD COLUMN IF NOT EXISTS blob_size BIGINT;
CREATE INDEX IF NOT EXISTS {p}context_chunks_by_blob ON {p}context_chunks (blob)
    WHERE blob IS NOT NULL;
CREATE INDEX IF NOT EXISTS {p}tool_results_by_blob ON {p}tool_results (blob)
    WHERE blob IS NOT NULL;
CREATE INDEX IF NOT EXISTS {p}data_by_blob ON {p}data (blob) WHERE blob IS NOT NULL;
"""
_BLOB_TABLES = ("context_chunks", "tool_results", "data")

# One row per session ever leased; kept by purge, so fencing tokens never repeat.
_LEASE_SCHEMA = """
CREATE TABLE IF NOT EXISTS {p}leases (
    skey TEXT PRIMARY KEY, token BIGINT NOT NULL, owner TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL);
"""
_SIZE = "COALESCE({t}blob_size, octet_length({t}body))"

# Search: one row per document (a context-log line or a tool result), its terms as a
# tsvector under a GIN index; search_sources says how far each item is indexed.
_SEARCH_SCHEMA = """
CREATE TABLE IF NOT EXISTS {p}search_docs (
    id BIGSERIAL PRIMARY KEY, skey TEXT NOT NULL, name TEXT NOT NULL, line INTEGER NOT NULL,
    text TEXT, terms TSVECTOR NOT NULL);
CREATE INDEX IF NOT EXISTS {p}search_docs_terms ON {p}search_docs USING GIN (terms);
CREATE INDEX IF NOT EXISTS {p}search_docs_by_session ON {p}search_docs (skey);
CREATE TABLE IF NOT EXISTS {p}search_sources (
    skey TEXT NOT NULL, name TEXT NOT NULL, upto BIGINT NOT NULL, lines INTEGER NOT NULL,
    PRIMARY KEY (skey, name));
"""


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
        self._dsn = dsn
        self._p = table_prefix
        self._max = max_connections
        self._pool: asyncpg.Pool | None = None
        self.blobs = blobs
        self.blob_threshold = blob_threshold
        self._held: dict[str, int] = {}
        """Fencing tokens of the leases this instance was granted, by session key."""
        self._lost: set[str] = set()
        """Sessions whose lease this instance held until another worker took it over."""
        self._freqs: tuple[float, dict[str, float]] | None = None

    async def initialize(self) -> None:
        """Connect and create the schema (idempotent, safe to run concurrently)."""
        try:
            import asyncpg
        except ImportError as exc:
            raise MissingDependencyError("asyncpg", "postgres") from exc
        if self._pool is None:
            try:
                self._pool = await asyncpg.create_pool(self._dsn, min_size=1, max_size=self._max)
            except (OSError, asyncpg.PostgresError) as exc:
                raise WorkspaceError(f"cannot connect to PostgreSQL: {exc}") from exc
        async with self._pool.acquire() as con, con.transaction():
            await con.execute("SELECT pg_advisory_xact_lock($1)", _DDL_LOCK)
            await con.execute(_SCHEMA.format(p=self._p))
            await con.execute(_BLOB_SCHEMA.format(p=self._p))
            await con.execute(_LEASE_SCHEMA.format(p=self._p))
            await con.execute(_SEARCH_SCHEMA.format(p=self._p))
        if self.blobs is not None:
            await self.blobs.initialize()
        await self._catch_up()
        self._initialized = True

    async def close(self) -> None:
        """Close the connection pool (and the blob store)."""
        pool, self._pool = self._pool, None
        self._initialized = False
        if pool is not None:
            await pool.close()
        if self.blobs is not None:
            await self.blobs.close()

    def _pool_or_fail(self) -> asyncpg.Pool:
        if self._pool is None:
            raise WorkspaceError("PostgresWorkspace is closed; call `await initialize()`")
        return self._pool

    async def _touch(self, con: Any, skey: str, session_id: str) -> None:
        await con.execute(
            f"INSERT INTO {self._p}sessions (skey, session_id) VALUES ($1, $2) "
            "ON CONFLICT DO NOTHING",
            skey,
            _enc(session_id),
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
        await con.execute("SELECT pg_advisory_xact_lock_shared($1)", _DATA_LOCK)
        digest = blob_digest(body)
        await self.blobs.put_blob(digest, body)
        return b"", digest, len(body)

    # -- writing ---------------------------------------------------------------------------

    async def _append_context(self, skey: str, session_id: str, payload: bytes) -> None:
        async with self._pool_or_fail().acquire() as con, con.transaction():
            body, blob, size = await self._stored(con, payload)  # the data lock before rows
            await self._touch(con, skey, session_id)
            await self._lock_index(con, skey)
            chunk = await con.fetchval(
                f"INSERT INTO {self._p}context_chunks (skey, body, blob, blob_size) "
                "VALUES ($1, $2, $3, $4) RETURNING id",
                skey,
                body,
                blob,
                size,
            )
            # The payload in hand: a chunk stored as a blob is not fetched back to index it.
            await self._index_context(con, skey, known={int(chunk): payload})

    async def _put_tool_result(self, skey: str, session_id: str, tkey: str, body: bytes) -> str:
        async with self._pool_or_fail().acquire() as con, con.transaction():
            stored, blob, size = await self._stored(con, body)
            await self._touch(con, skey, session_id)
            name = tool_file(tkey)
            while True:
                got = await con.fetchval(
                    f"INSERT INTO {self._p}tool_results (skey, name, body, blob, blob_size) "
                    "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING name",
                    skey,
                    name,
                    stored,
                    blob,
                    size,
                )
                if got is not None:
                    await self._index_tool(con, skey, name, body)
                    return name
                name = tool_file(tkey, unique=True)

    async def _put_data(self, skey: str, session_id: str, name: str, payload: bytes) -> None:
        async with self._pool_or_fail().acquire() as con, con.transaction():
            # Shared lock: purge collects unreferenced data under the exclusive one.
            await con.execute("SELECT pg_advisory_xact_lock_shared($1)", _DATA_LOCK)
            await self._touch(con, skey, session_id)
            await con.execute(
                f"INSERT INTO {self._p}session_data (skey, name) VALUES ($1, $2) "
                "ON CONFLICT DO NOTHING",
                skey,
                name,
            )
            if await con.fetchval(f"SELECT 1 FROM {self._p}data WHERE name = $1", name) is None:
                body, blob, size = await self._stored(con, payload)
                await con.execute(
                    f"INSERT INTO {self._p}data (name, body, blob, blob_size) "
                    "VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    name,
                    body,
                    blob,
                    size,
                )

    async def _save_state(self, skey: str, session_id: str, state: bytes) -> None:
        async with self._pool_or_fail().acquire() as con, con.transaction():
            await self._fence(con, skey, session_id)
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
        return await acquire_lease(self, session_id, ttl=ttl, wait=wait, owner=owner)

    async def _lease_try(self, session_id: str, owner: str, ttl: float) -> int | LeaseHolder:
        skey = encode_key(session_id, what="session_id")
        pool = self._pool_or_fail()
        token = await pool.fetchval(
            f"INSERT INTO {self._p}leases AS l (skey, token, owner, expires_at) "
            "VALUES ($1, 1, $2, clock_timestamp() + $3 * interval '1 second') "
            "ON CONFLICT (skey) DO UPDATE SET token = l.token + 1, owner = EXCLUDED.owner, "
            "expires_at = EXCLUDED.expires_at WHERE l.expires_at <= clock_timestamp() "
            "RETURNING token",
            skey,
            owner,
            float(ttl),
        )
        if token is not None:
            self._held[skey] = int(token)
            self._lost.discard(skey)
            return int(token)
        row = await pool.fetchrow(
            f"SELECT owner, expires_at FROM {self._p}leases WHERE skey = $1", skey
        )
        if row is None:  # released and gone between the two statements: try again
            return await self._lease_try(session_id, owner, ttl)
        return LeaseHolder(owner=row["owner"], expires_at=row["expires_at"])

    async def _lease_renew(self, session_id: str, token: int, ttl: float) -> bool:
        skey = encode_key(session_id, what="session_id")
        kept = await self._pool_or_fail().fetchval(
            f"UPDATE {self._p}leases SET expires_at = clock_timestamp() + $3 * interval "
            "'1 second' WHERE skey = $1 AND token = $2 RETURNING 1",
            skey,
            token,
            float(ttl),
        )
        if kept is None and self._held.get(skey) == token:
            del self._held[skey]
            self._lost.add(skey)  # a later save_state says the lease was lost, not just held
        return kept is not None

    async def _lease_release(self, session_id: str, token: int) -> None:
        skey = encode_key(session_id, what="session_id")
        if self._held.get(skey) == token:
            del self._held[skey]
        self._lost.discard(skey)
        if self._pool is not None:
            await self._pool.execute(
                f"UPDATE {self._p}leases SET expires_at = '-infinity' "
                "WHERE skey = $1 AND token = $2",
                skey,
                token,
            )

    async def _fence(self, con: Any, skey: str, session_id: str) -> None:
        """Refuse a state write from anyone but the session's lease holder, if it has one.

        ``FOR SHARE`` holds off a new grant until this transaction ends.
        """
        row = await con.fetchrow(
            f"SELECT token, owner, expires_at, expires_at > clock_timestamp() AS live "
            f"FROM {self._p}leases WHERE skey = $1 FOR SHARE",
            skey,
        )
        held = self._held.get(skey)
        if row is None or row["token"] == held:
            return
        if held is not None or skey in self._lost:
            raise LeaseLostError(
                f"this worker's lease on session {session_id!r} was lost: it expired and "
                f"{row['owner']} took the session over; stop running it here (its state "
                "would overwrite the new worker's)"
            )
        if row["live"]:
            raise SessionLeasedError(
                f"session {session_id!r} is leased by another worker ({row['owner']}) until "
                f"{row['expires_at']:%Y-%m-%d %H:%M:%S} UTC; only the lease holder may save "
                "its state"
            )

    async def _purge(self, skey: str) -> None:
        p = self._p
        async with self._pool_or_fail().acquire() as con:
            # A session-level lock: it covers deleting the blobs after the rows' commit.
            await con.execute("SELECT pg_advisory_lock($1)", _DATA_LOCK)
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
                await con.execute("SELECT pg_advisory_unlock($1)", _DATA_LOCK)

    async def _unreferenced(self, con: Any, digests: list[str]) -> list[str]:
        if not digests:
            return []
        used = " UNION ".join(
            f"SELECT blob FROM {self._p}{t} WHERE blob = ANY($1::text[])" for t in _BLOB_TABLES
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
        return [_dec(r["session_id"]) for r in rows]

    async def _items(self, skey: str | None) -> list[tuple[ItemPath, int, str | None]]:
        p = self._p
        pool = self._pool_or_fail()
        where = "WHERE ($1::text IS NULL OR s.skey = $1)"
        out: list[tuple[ItemPath, int, str | None]] = []
        for r in await pool.fetch(
            f"SELECT s.skey, s.session_id, SUM({_SIZE.format(t='x.')}) AS size FROM {p}sessions s "
            f"JOIN {p}context_chunks x ON x.skey = s.skey {where} GROUP BY s.skey, s.session_id",
            skey,
        ):
            item = ItemPath("context", r["skey"], CONTEXT_FILE)
            out.append((item, int(r["size"]), _dec(r["session_id"])))
        for r in await pool.fetch(
            f"SELECT s.skey, s.session_id, t.name, {_SIZE.format(t='t.')} AS size "
            f"FROM {p}sessions s JOIN {p}tool_results t ON t.skey = s.skey {where}",
            skey,
        ):
            item = ItemPath("tool_result", r["skey"], r["name"])
            out.append((item, int(r["size"]), _dec(r["session_id"])))
        if skey is None:
            rows = await pool.fetch(
                f"SELECT name, {_SIZE.format(t='')} AS size, NULL::bytea AS sid FROM {p}data"
            )
        else:
            rows = await pool.fetch(
                f"SELECT d.name, {_SIZE.format(t='d.')} AS size, s.session_id AS sid "
                f"FROM {p}session_data r JOIN {p}data d ON d.name = r.name "
                f"JOIN {p}sessions s ON s.skey = r.skey WHERE r.skey = $1",
                skey,
            )
        for r in rows:
            sid = None if r["sid"] is None else _dec(r["sid"])
            out.append((ItemPath("data", None, r["name"]), int(r["size"]), sid))
        return out

    # -- search ----------------------------------------------------------------------------

    async def _lock_index(self, con: Any, skey: str) -> None:
        """Lock the session's context index row (created if missing) until commit."""
        await con.execute(
            f"INSERT INTO {self._p}search_sources (skey, name, upto, lines) "
            "VALUES ($1, $2, 0, 0) ON CONFLICT DO NOTHING",
            skey,
            CONTEXT_FILE,
        )
        await con.execute(
            f"SELECT 1 FROM {self._p}search_sources WHERE skey = $1 AND name = $2 FOR UPDATE",
            skey,
            CONTEXT_FILE,
        )

    async def _index_context(
        self, con: Any, skey: str, *, known: dict[int, bytes] | None = None
    ) -> None:
        """Index the session's chunks past the indexed one; the caller holds the lock.

        ``known`` holds payloads by chunk id: a chunk just written is indexed from memory,
        not read back (from PostgreSQL, or from the blob store); any other chunk is read.
        """
        p = self._p
        row = await con.fetchrow(
            f"SELECT upto, lines FROM {p}search_sources WHERE skey = $1 AND name = $2",
            skey,
            CONTEXT_FILE,
        )
        upto, lines = int(row["upto"]), int(row["lines"])
        known = known or {}
        chunks = await con.fetch(
            f"SELECT id, blob, CASE WHEN id = ANY($3::bigint[]) THEN NULL ELSE body END "
            f"AS body FROM {p}context_chunks WHERE skey = $1 AND id > $2 ORDER BY id",
            skey,
            upto,
            list(known),
        )
        for chunk in chunks:
            payload = known.get(int(chunk["id"]))
            if payload is None:
                payload = await self._body(chunk, ItemPath("context", skey, CONTEXT_FILE))
            docs = context_docs(payload, lines)
            await self._add_docs(con, skey, CONTEXT_FILE, docs)
            upto, lines = int(chunk["id"]), lines + len(docs)
        await con.execute(
            f"UPDATE {p}search_sources SET upto = $3, lines = $4 WHERE skey = $1 AND name = $2",
            skey,
            CONTEXT_FILE,
            upto,
            lines,
        )

    async def _index_tool(self, con: Any, skey: str, name: str, body: bytes) -> None:
        claimed = await con.fetchval(
            f"INSERT INTO {self._p}search_sources (skey, name, upto, lines) "
            "VALUES ($1, $2, $3, 1) ON CONFLICT DO NOTHING RETURNING 1",
            skey,
            name,
            len(body),
        )
        if claimed:
            await self._add_docs(con, skey, name, [tool_doc(body)])

    async def _add_docs(self, con: Any, skey: str, name: str, docs: list[Doc]) -> None:
        await con.executemany(
            f"INSERT INTO {self._p}search_docs (skey, name, line, text, terms) "
            "VALUES ($1, $2, $3, $4, to_tsvector('simple', $5))",
            [
                (
                    skey,
                    name,
                    d.line,
                    None if d.text is None else d.text.replace("\x00", ""),
                    d.terms,
                )
                for d in docs
            ],
        )

    async def _catch_up(self) -> None:
        """Index what the tables hold and the index lacks (tables of an older version)."""
        p = self._p
        pool = self._pool_or_fail()
        stale = await pool.fetch(
            f"SELECT DISTINCT x.skey FROM {p}context_chunks x LEFT JOIN {p}search_sources s "
            "ON s.skey = x.skey AND s.name = $1 WHERE x.id > COALESCE(s.upto, 0)",
            CONTEXT_FILE,
        )
        for row in stale:
            async with pool.acquire() as con, con.transaction():
                await self._lock_index(con, row["skey"])
                await self._index_context(con, row["skey"])
        missing = await pool.fetch(
            f"SELECT t.skey, t.name FROM {p}tool_results t WHERE NOT EXISTS "
            f"(SELECT 1 FROM {p}search_sources s WHERE s.skey = t.skey AND s.name = t.name)"
        )
        for row in missing:
            async with pool.acquire() as con, con.transaction():
                found = await con.fetchrow(
                    f"SELECT body, blob FROM {p}tool_results WHERE skey = $1 AND name = $2",
                    row["skey"],
                    row["name"],
                )
                if found is not None:
                    item = ItemPath("tool_result", row["skey"], row["name"])
                    body = await self._body(found, item)
                    await self._index_tool(con, row["skey"], row["name"], body)

    async def _search(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        p = self._p
        terms = await self._distinctive(terms)
        try:
            # On timeout asyncpg cancels the statement on the server: the work really stops.
            rows = await self._pool_or_fail().fetch(
                f"SELECT d.skey, d.name, d.line, d.text, s.session_id, "
                f"ts_rank(d.terms, q, 1) AS score "
                f"FROM {p}search_docs d CROSS JOIN to_tsquery('simple', $1) q "
                f"LEFT JOIN {p}sessions s ON s.skey = d.skey "
                f"WHERE d.terms @@ q AND ($2::text IS NULL OR d.skey = $2) "
                f"ORDER BY score DESC, d.id LIMIT $3",
                " | ".join(terms),
                skey,
                limit,
                timeout=deadline.left(),
            )
        except TimeoutError:
            raise deadline.expired() from None
        return [
            RawHit(
                r["skey"],
                r["name"],
                int(r["line"]),
                float(r["score"]),
                r["text"],
                None if r["session_id"] is None else _dec(r["session_id"]),
            )
            for r in rows
        ]

    async def _distinctive(self, terms: list[str]) -> list[str]:
        """``terms`` without those in 40% of the documents or more, by the lexeme
        frequencies ANALYZE keeps for the tsvector column (refreshed every minute): they
        barely rank, yet every document they match would be scored. The rarest is kept
        when none other remains."""
        now = time.monotonic()
        if self._freqs is None or now - self._freqs[0] > 60:
            row = await self._pool_or_fail().fetchrow(
                "SELECT most_common_elems::text::text[] AS elems, most_common_elem_freqs AS f "
                "FROM pg_stats WHERE schemaname = current_schema() AND tablename = $1 "
                "AND attname = 'terms'",
                f"{self._p}search_docs",
            )
            elems = (row["elems"] or []) if row is not None else []
            freqs = (row["f"] or []) if row is not None else []
            self._freqs = (now, dict(zip(elems, freqs, strict=False)))
        freq = self._freqs[1]
        kept = [t for t in terms if freq.get(t, 0.0) < 0.4]
        return kept or sorted(terms, key=lambda t: freq.get(t, 0.0))[:1]


def _enc(session_id: str) -> bytes:
    # BYTEA, not TEXT: PostgreSQL text cannot hold NUL, and ids are arbitrary strings.
    return session_id.encode("utf-8", "surrogatepass")


def _dec(raw: bytes) -> str:
    return bytes(raw).decode("utf-8", "surrogatepass")
