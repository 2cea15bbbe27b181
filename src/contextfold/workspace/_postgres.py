"""PostgresWorkspace: one shared store for fleets of agent workers (asyncpg)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .._exceptions import MissingDependencyError, WorkspaceError
from ._base import BaseWorkspace
from ._names import CONTEXT_FILE, ItemPath, tool_file

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


class PostgresWorkspace(BaseWorkspace):
    """The workspace in PostgreSQL, shared by any number of workers on any machines.

    ``initialize()`` creates the tables (named ``{table_prefix}sessions`` and so on) under
    an advisory lock, so many workers may initialize at once. Each offload is one
    transaction; durability is the server's (``synchronous_commit``). The context log is
    one row per offload call, read back in commit-sequence order. References are
    workspace-relative (``sessions/s1/context.jsonl``). Needs the ``postgres`` extra.
    """

    def __init__(
        self, dsn: str, *, table_prefix: str = "contextfold_", max_connections: int = 10
    ) -> None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,40}", table_prefix):
            raise ValueError(
                f"table_prefix must match [a-z_][a-z0-9_]*, at most 41 chars: {table_prefix!r}"
            )
        self._dsn = dsn
        self._p = table_prefix
        self._max = max_connections
        self._pool: asyncpg.Pool | None = None

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
        self._initialized = True

    async def close(self) -> None:
        """Close the connection pool."""
        pool, self._pool = self._pool, None
        self._initialized = False
        if pool is not None:
            await pool.close()

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

    # -- writing ---------------------------------------------------------------------------

    async def _append_context(self, skey: str, session_id: str, payload: bytes) -> None:
        async with self._pool_or_fail().acquire() as con, con.transaction():
            await self._touch(con, skey, session_id)
            await con.execute(
                f"INSERT INTO {self._p}context_chunks (skey, body) VALUES ($1, $2)", skey, payload
            )

    async def _put_tool_result(self, skey: str, session_id: str, tkey: str, body: bytes) -> str:
        async with self._pool_or_fail().acquire() as con, con.transaction():
            await self._touch(con, skey, session_id)
            name = tool_file(tkey)
            while True:
                got = await con.fetchval(
                    f"INSERT INTO {self._p}tool_results (skey, name, body) VALUES ($1, $2, $3) "
                    "ON CONFLICT DO NOTHING RETURNING name",
                    skey,
                    name,
                    body,
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
                await con.execute(
                    f"INSERT INTO {self._p}data (name, body) VALUES ($1, $2) "
                    "ON CONFLICT DO NOTHING",
                    name,
                    payload,
                )

    async def _save_state(self, skey: str, session_id: str, state: bytes) -> None:
        async with self._pool_or_fail().acquire() as con, con.transaction():
            await self._touch(con, skey, session_id)
            await con.execute(
                f"INSERT INTO {self._p}states (skey, body) VALUES ($1, $2) "
                "ON CONFLICT (skey) DO UPDATE SET body = EXCLUDED.body",
                skey,
                state,
            )

    async def _purge(self, skey: str) -> None:
        p = self._p
        async with self._pool_or_fail().acquire() as con, con.transaction():
            await con.execute("SELECT pg_advisory_xact_lock($1)", _DATA_LOCK)
            names = [
                r["name"]
                for r in await con.fetch(f"SELECT name FROM {p}session_data WHERE skey = $1", skey)
            ]
            for table in ("sessions", "context_chunks", "tool_results", "session_data", "states"):
                await con.execute(f"DELETE FROM {p}{table} WHERE skey = $1", skey)
            await con.execute(
                f"DELETE FROM {p}data d WHERE d.name = ANY($1::text[]) "
                f"AND NOT EXISTS (SELECT 1 FROM {p}session_data r WHERE r.name = d.name)",
                names,
            )

    # -- reading ---------------------------------------------------------------------------

    async def _get(self, item: ItemPath) -> bytes | None:
        p = self._p
        pool = self._pool_or_fail()
        if item.kind == "data":
            got = await pool.fetchval(f"SELECT body FROM {p}data WHERE name = $1", item.name)
            return None if got is None else bytes(got)
        if item.kind == "tool_result":
            got = await pool.fetchval(
                f"SELECT body FROM {p}tool_results WHERE skey = $1 AND name = $2",
                item.session_key,
                item.name,
            )
            return None if got is None else bytes(got)
        rows = await pool.fetch(
            f"SELECT body FROM {p}context_chunks WHERE skey = $1 ORDER BY id", item.session_key
        )
        return b"".join(bytes(r["body"]) for r in rows) if rows else None

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
            f"SELECT s.skey, s.session_id, SUM(octet_length(x.body)) AS size FROM {p}sessions s "
            f"JOIN {p}context_chunks x ON x.skey = s.skey {where} GROUP BY s.skey, s.session_id",
            skey,
        ):
            item = ItemPath("context", r["skey"], CONTEXT_FILE)
            out.append((item, int(r["size"]), _dec(r["session_id"])))
        for r in await pool.fetch(
            f"SELECT s.skey, s.session_id, t.name, octet_length(t.body) AS size "
            f"FROM {p}sessions s JOIN {p}tool_results t ON t.skey = s.skey {where}",
            skey,
        ):
            item = ItemPath("tool_result", r["skey"], r["name"])
            out.append((item, int(r["size"]), _dec(r["session_id"])))
        if skey is None:
            rows = await pool.fetch(
                f"SELECT name, octet_length(body) AS size, NULL::bytea AS sid FROM {p}data"
            )
        else:
            rows = await pool.fetch(
                f"SELECT d.name, octet_length(d.body) AS size, s.session_id AS sid "
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
