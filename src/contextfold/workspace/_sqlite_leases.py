"""Session leases in SQLite: one worker at a time per session, fenced by a token.

The same scheme as PostgreSQL's (``_postgres_leases``), in the workspace's own file: a row
per session ever leased, claimed inside ``BEGIN IMMEDIATE`` (so two processes never both
see it free), with an expiry in the database's clock (``julianday('now')``, Unix seconds).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

from ._lease import LeaseHolder, check_fence

__all__ = ["LEASES_SCHEMA", "SQLiteLeases"]

LEASES_SCHEMA = """
CREATE TABLE IF NOT EXISTS leases (
    skey TEXT PRIMARY KEY, token INTEGER NOT NULL, owner TEXT NOT NULL,
    expires_at REAL NOT NULL)
"""
"""One row per session ever leased; kept by purge, so fencing tokens never repeat."""

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"


class SQLiteLeases:
    """What ``SQLiteWorkspace`` runs in its write transactions for leases; it remembers the
    tokens this instance was granted and the leases it lost."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}
        self._lost: set[str] = set()

    def claim(self, c: sqlite3.Connection, skey: str, owner: str, ttl: float) -> int | LeaseHolder:
        """Grant the lease (the new token) unless it is live; who holds it otherwise."""
        row = _row(c, skey)
        if row is not None and row[2]:
            return row[1]
        token = 1 if row is None else row[0] + 1
        c.execute(
            f"INSERT INTO leases (skey, token, owner, expires_at) VALUES (?, ?, ?, {_NOW} + ?) "
            "ON CONFLICT (skey) DO UPDATE SET token = excluded.token, owner = excluded.owner, "
            "expires_at = excluded.expires_at",
            (skey, token, owner, float(ttl)),
        )
        self._held[skey] = token
        self._lost.discard(skey)
        return token

    def renew(self, c: sqlite3.Connection, skey: str, token: int, ttl: float) -> bool:
        """Extend a held lease; False (and remembered as lost) if it was taken over."""
        kept = c.execute(
            f"UPDATE leases SET expires_at = {_NOW} + ? WHERE skey = ? AND token = ?",
            (float(ttl), skey, token),
        ).rowcount
        if not kept and self._held.get(skey) == token:
            del self._held[skey]
            self._lost.add(skey)  # a later save_state says the lease was lost, not just held
        return bool(kept)

    def release(self, c: sqlite3.Connection, skey: str, token: int) -> None:
        if self._held.get(skey) == token:
            del self._held[skey]
        self._lost.discard(skey)
        c.execute("UPDATE leases SET expires_at = 0 WHERE skey = ? AND token = ?", (skey, token))

    def fence(self, c: sqlite3.Connection, skey: str, session_id: str) -> None:
        """Refuse a state write from anyone but the lease holder (in the write's
        transaction, which holds off a new grant until it ends)."""
        check_fence(
            session_id, _row(c, skey), held=self._held.get(skey), was_lost=skey in self._lost
        )


def _row(c: sqlite3.Connection, skey: str) -> tuple[int, LeaseHolder, bool] | None:
    row = c.execute(
        f"SELECT token, owner, expires_at, expires_at > {_NOW} FROM leases WHERE skey = ?",
        (skey,),
    ).fetchone()
    if row is None:
        return None
    expires = datetime.fromtimestamp(max(0.0, float(row[2])), UTC)
    return int(row[0]), LeaseHolder(owner=str(row[1]), expires_at=expires), bool(row[3])
