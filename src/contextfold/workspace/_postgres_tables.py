"""The tables of a ``PostgresWorkspace``: their schema, and the pool that reaches them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._exceptions import MissingDependencyError, WorkspaceError

if TYPE_CHECKING:
    import asyncpg

__all__ = ["BLOB_TABLES", "DATA_LOCK", "SIZE", "Tables", "decode_id", "encode_id"]

# Arbitrary constants naming the advisory locks (schema creation; data collection).
_DDL_LOCK = 0x636F6E74
DATA_LOCK = 0x64617461

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
BLOB_TABLES = ("context_chunks", "tool_results", "data")
"""The tables whose rows may name a blob."""

# One row per session ever leased; kept by purge, so fencing tokens never repeat.
_LEASE_SCHEMA = """
CREATE TABLE IF NOT EXISTS {p}leases (
    skey TEXT PRIMARY KEY, token BIGINT NOT NULL, owner TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL);
"""
SIZE = "COALESCE({t}blob_size, octet_length({t}body))"
"""The size of a row's body, wherever it is stored (``{t}``: the table's alias and dot)."""

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


class Tables:
    """The tables named ``{p}sessions`` and so on, and a connection pool to them."""

    def __init__(self, dsn: str, p: str, max_connections: int) -> None:
        self._dsn = dsn
        self.p = p
        self._max = max_connections
        self.pool: asyncpg.Pool | None = None
        """``None`` until :meth:`open`, and after :meth:`close`."""

    async def open(self) -> None:
        """Connect, unless connected, and create the schema (idempotent, safe to run
        concurrently: under an advisory lock)."""
        try:
            import asyncpg
        except ImportError as exc:
            raise MissingDependencyError("asyncpg", "postgres") from exc
        if self.pool is None:
            try:
                self.pool = await asyncpg.create_pool(self._dsn, min_size=1, max_size=self._max)
            except (OSError, asyncpg.PostgresError) as exc:
                raise WorkspaceError(f"cannot connect to PostgreSQL: {exc}") from exc
        async with self.pool.acquire() as con, con.transaction():
            await con.execute("SELECT pg_advisory_xact_lock($1)", _DDL_LOCK)
            await con.execute(_SCHEMA.format(p=self.p))
            await con.execute(_BLOB_SCHEMA.format(p=self.p))
            await con.execute(_LEASE_SCHEMA.format(p=self.p))
            await con.execute(_SEARCH_SCHEMA.format(p=self.p))

    async def close(self) -> None:
        """Close the pool."""
        pool, self.pool = self.pool, None
        if pool is not None:
            await pool.close()

    def ready(self) -> asyncpg.Pool:
        """The pool; ``WorkspaceError`` when closed."""
        if self.pool is None:
            raise WorkspaceError("PostgresWorkspace is closed; call `await initialize()`")
        return self.pool


def encode_id(session_id: str) -> bytes:
    """A session id as stored: BYTEA, not TEXT, since PostgreSQL text cannot hold NUL and
    ids are arbitrary strings."""
    return session_id.encode("utf-8", "surrogatepass")


def decode_id(raw: bytes) -> str:
    """A session id as :func:`encode_id` stored it."""
    return bytes(raw).decode("utf-8", "surrogatepass")
