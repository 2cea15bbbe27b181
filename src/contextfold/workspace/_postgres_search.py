"""Search in a ``PostgresWorkspace``: PostgreSQL full-text search over what it stores.

One row per document (a context-log line or a tool result) in ``{p}search_docs``, its
terms as a ``tsvector`` under a GIN index, ranked by ``ts_rank``; ``{p}search_sources``
says how far each item is indexed. Written in the same transaction as the content it
indexes; appends to one session take its index row's lock first, so line numbers follow
chunk order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ._grep import Deadline
from ._lines import OFF_LOOP_BYTES
from ._names import CONTEXT_FILE, ItemPath
from ._postgres_pieces import PIECE, with_texts
from ._postgres_tables import Tables, decode_id
from ._search import Doc, RawHit, context_docs, tool_doc

__all__ = ["PostgresSearch"]


class PostgresSearch:
    """Indexes rows as they are written (in the caller's transaction) and answers
    queries; ``body(row, item)`` reads a row's body wherever it is stored."""

    def __init__(self, tables: Tables, body: Callable[[Any, ItemPath], Awaitable[bytes]]) -> None:
        self._tables = tables
        self._body = body
        self._freqs: tuple[float, dict[str, float]] | None = None

    async def lock_log(self, con: Any, skey: str) -> None:
        """Lock the session's context index row (created if missing) until commit."""
        p = self._tables.p
        await con.execute(
            f"INSERT INTO {p}search_sources (skey, name, upto, lines) "
            "VALUES ($1, $2, 0, 0) ON CONFLICT DO NOTHING",
            skey,
            CONTEXT_FILE,
        )
        await con.execute(
            f"SELECT 1 FROM {p}search_sources WHERE skey = $1 AND name = $2 FOR UPDATE",
            skey,
            CONTEXT_FILE,
        )

    async def index_log(
        self, con: Any, skey: str, *, known: dict[int, bytes] | None = None
    ) -> None:
        """Index the session's chunks past the indexed one; the caller holds the lock.

        ``known`` holds payloads by chunk id: a chunk just written is indexed from memory,
        not read back (from PostgreSQL, or from the blob store); any other chunk is read.
        """
        p = self._tables.p
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
            docs = (
                await asyncio.to_thread(context_docs, payload, lines)
                if len(payload) > OFF_LOOP_BYTES  # seconds for 100 MB: not on the loop
                else context_docs(payload, lines)
            )
            await self._add_docs(con, skey, CONTEXT_FILE, docs)
            upto, lines = int(chunk["id"]), lines + len(docs)
        await con.execute(
            f"UPDATE {p}search_sources SET upto = $3, lines = $4 WHERE skey = $1 AND name = $2",
            skey,
            CONTEXT_FILE,
            upto,
            lines,
        )

    async def index_tool(self, con: Any, skey: str, name: str, body: bytes) -> None:
        """Index a tool result, unless it is indexed."""
        claimed = await con.fetchval(
            f"INSERT INTO {self._tables.p}search_sources (skey, name, upto, lines) "
            "VALUES ($1, $2, $3, 1) ON CONFLICT DO NOTHING RETURNING 1",
            skey,
            name,
            len(body),
        )
        if claimed:
            big = len(body) > OFF_LOOP_BYTES
            doc = await asyncio.to_thread(tool_doc, body) if big else tool_doc(body)
            await self._add_docs(con, skey, name, [doc])

    async def _add_docs(self, con: Any, skey: str, name: str, docs: list[Doc]) -> None:
        """Store ``docs``; a large one's text and terms go a megabyte per statement
        (``with_texts``): asyncpg encodes parameters on the event loop."""
        rows = [
            (skey, name, d.line, None if d.text is None else d.text.replace("\x00", ""), d.terms)
            for d in docs
        ]
        insert = (
            f"INSERT INTO {self._tables.p}search_docs (skey, name, line, text, terms) "
            "VALUES ($1, $2, $3, {t0}, to_tsvector('simple', {t1}))"
        )
        batch: list[tuple[str, str, int, str | None, str]] = []
        for row in rows:  # in order: a large one between the batches of small ones
            if _fits(row[3]) and _fits(row[4]):
                batch.append(row)
                continue
            if batch:
                await con.executemany(insert.format(t0="$4", t1="$5"), batch)
                batch = []
            await with_texts(con, insert, row[3:], *row[:3])
        if batch:
            await con.executemany(insert.format(t0="$4", t1="$5"), batch)

    async def catch_up(self) -> None:
        """Index what the tables hold and the index lacks (tables of an older version)."""
        p = self._tables.p
        pool = self._tables.ready()
        stale = await pool.fetch(
            f"SELECT DISTINCT x.skey FROM {p}context_chunks x LEFT JOIN {p}search_sources s "
            "ON s.skey = x.skey AND s.name = $1 WHERE x.id > COALESCE(s.upto, 0)",
            CONTEXT_FILE,
        )
        for row in stale:
            async with pool.acquire() as con, con.transaction():
                await self.lock_log(con, row["skey"])
                await self.index_log(con, row["skey"])
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
                    await self.index_tool(con, row["skey"], row["name"], body)

    async def search(
        self, terms: list[str], skey: str | None, limit: int, deadline: Deadline
    ) -> list[RawHit]:
        """The best ``limit`` documents for any of ``terms``, in the session ``skey`` or
        in all."""
        p = self._tables.p
        terms = await self._distinctive(terms)
        try:
            # On timeout asyncpg cancels the statement on the server: the work really stops.
            rows = await self._tables.ready().fetch(
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
                None if r["session_id"] is None else decode_id(r["session_id"]),
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
            row = await self._tables.ready().fetchrow(
                "SELECT most_common_elems::text::text[] AS elems, most_common_elem_freqs AS f "
                "FROM pg_stats WHERE schemaname = current_schema() AND tablename = $1 "
                "AND attname = 'terms'",
                f"{self._tables.p}search_docs",
            )
            elems = (row["elems"] or []) if row is not None else []
            freqs = (row["f"] or []) if row is not None else []
            self._freqs = (now, dict(zip(elems, freqs, strict=False)))
        freq = self._freqs[1]
        kept = [t for t in terms if freq.get(t, 0.0) < 0.4]
        return kept or sorted(terms, key=lambda t: freq.get(t, 0.0))[:1]


def _fits(text: str | None) -> bool:
    """Whether ``text`` goes as one parameter (see ``_postgres_pieces``)."""
    return text is None or len(text) <= PIECE
