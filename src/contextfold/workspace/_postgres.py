"""PostgresWorkspace: one shared store for fleets of agent workers (asyncpg)."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from .._exceptions import LeaseLostError, MissingDependencyError, SessionLeasedError, WorkspaceError
from ._base import BaseWorkspace
from ._blobs import BlobStore, blob_digest
from ._lease import Lease, LeaseHolder, acquire_lease
from ._names import CONTEXT_FILE, ItemPath, encode_key, tool_file

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


class PostgresWorkspace(BaseWorkspace):
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
        if self.blobs is not None:
            await self.blobs.initialize()
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
            await con.execute(
                f"INSERT INTO {self._p}context_chunks (skey, body, blob, blob_size) "
                "VALUES ($1, $2, $3, $4)",
                skey,
                body,
                blob,
                size,
            )

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
        return kept is not None

    async def _lease_release(self, session_id: str, token: int) -> None:
        skey = encode_key(session_id, what="session_id")
        if self._held.get(skey) == token:
            del self._held[skey]
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
        if held is not None:
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
                    for table in ("sessions", "session_data", "states"):
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


def _enc(session_id: str) -> bytes:
    # BYTEA, not TEXT: PostgreSQL text cannot hold NUL, and ids are arbitrary strings.
    return session_id.encode("utf-8", "surrogatepass")


def _dec(raw: bytes) -> str:
    return bytes(raw).decode("utf-8", "surrogatepass")
