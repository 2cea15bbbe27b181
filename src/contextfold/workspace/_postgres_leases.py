"""Session leases in PostgreSQL: one worker at a time per session, fenced by a token."""

from __future__ import annotations

from typing import Any

from ._lease import LeaseHolder, check_fence
from ._names import encode_key
from ._postgres_tables import Tables

__all__ = ["PostgresLeases"]


class PostgresLeases:
    """The ``LeaseBackend`` of a ``PostgresWorkspace``: a row per session ever leased
    (``{p}leases``) with a fencing token and an expiry in server time, and the check that
    refuses a state write from anyone but the lease holder."""

    def __init__(self, tables: Tables) -> None:
        self._tables = tables
        self._held: dict[str, int] = {}
        """Fencing tokens of the leases this instance was granted, by session key."""
        self._lost: set[str] = set()
        """Sessions whose lease this instance held until another worker took it over."""

    async def _lease_try(self, session_id: str, owner: str, ttl: float) -> int | LeaseHolder:
        skey = encode_key(session_id, what="session_id")
        p = self._tables.p
        pool = self._tables.ready()
        token = await pool.fetchval(
            f"INSERT INTO {p}leases AS l (skey, token, owner, expires_at) "
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
        row = await pool.fetchrow(f"SELECT owner, expires_at FROM {p}leases WHERE skey = $1", skey)
        if row is None:  # released and gone between the two statements: try again
            return await self._lease_try(session_id, owner, ttl)
        return LeaseHolder(owner=row["owner"], expires_at=row["expires_at"])

    async def _lease_renew(self, session_id: str, token: int, ttl: float) -> bool:
        skey = encode_key(session_id, what="session_id")
        kept = await self._tables.ready().fetchval(
            f"UPDATE {self._tables.p}leases SET expires_at = clock_timestamp() + $3 * interval "
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
        if self._tables.pool is not None:
            # Not waiting for the WAL flush: a release lost in a server crash is a lease
            # that expires after its ttl, as if this worker had died; the token is never
            # reused, so fencing does not depend on it. It saves one fsync per release.
            async with self._tables.pool.acquire() as con, con.transaction():
                await con.execute("SET LOCAL synchronous_commit TO OFF")
                await con.execute(
                    f"UPDATE {self._tables.p}leases SET expires_at = '-infinity' "
                    "WHERE skey = $1 AND token = $2",
                    skey,
                    token,
                )

    async def fence(self, con: Any, skey: str, session_id: str) -> None:
        """Refuse a state write from anyone but the session's lease holder, if it has one.

        ``FOR SHARE`` holds off a new grant until this transaction ends.
        """
        row = await con.fetchrow(
            f"SELECT token, owner, expires_at, expires_at > clock_timestamp() AS live "
            f"FROM {self._tables.p}leases WHERE skey = $1 FOR SHARE",
            skey,
        )
        holder = None if row is None else LeaseHolder(row["owner"], row["expires_at"])
        check_fence(
            session_id,
            None if holder is None else (int(row["token"]), holder, bool(row["live"])),
            held=self._held.get(skey),
            was_lost=skey in self._lost,
        )
