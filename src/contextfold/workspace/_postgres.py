"""PostgresWorkspace: one shared store for fleets of agent workers (asyncpg)."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from .._exceptions import MissingDependencyError, WorkspaceError
from ._grep import Deadline
from ._names import CONTEXT_FILE, ItemPath, tool_file
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

    Search is PostgreSQL full-text search (``tsvector`` under a GIN index, ranked by
    ``ts_rank``), written in the same transaction as the content it indexes; appends to
    one session take its index row's lock first, so line numbers follow chunk order.
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
            await con.execute(_SEARCH_SCHEMA.format(p=self._p))
        await self._catch_up()
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
            await self._lock_index(con, skey)
            await con.execute(
                f"INSERT INTO {self._p}context_chunks (skey, body) VALUES ($1, $2)", skey, payload
            )
            await self._index_context(con, skey)

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
            for table in ("search_docs", "search_sources"):
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

    async def _index_context(self, con: Any, skey: str) -> None:
        """Index the session's chunks past the indexed one; the caller holds the lock."""
        p = self._p
        row = await con.fetchrow(
            f"SELECT upto, lines FROM {p}search_sources WHERE skey = $1 AND name = $2",
            skey,
            CONTEXT_FILE,
        )
        upto, lines = int(row["upto"]), int(row["lines"])
        chunks = await con.fetch(
            f"SELECT id, body FROM {p}context_chunks WHERE skey = $1 AND id > $2 ORDER BY id",
            skey,
            upto,
        )
        for chunk in chunks:
            docs = context_docs(bytes(chunk["body"]), lines)
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
                body = await con.fetchval(
                    f"SELECT body FROM {p}tool_results WHERE skey = $1 AND name = $2",
                    row["skey"],
                    row["name"],
                )
                if body is not None:
                    await self._index_tool(con, row["skey"], row["name"], bytes(body))

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
