"""A large ``bytea`` value sent to PostgreSQL a megabyte at a time.

asyncpg encodes a statement's parameters on the event loop, in one call: a 100 MB body is
copied into its write buffer (and that buffer grown) while the loop waits. Here a body
over :data:`PIECE` bytes is staged in a temporary table of the connection, one statement
per megabyte (each encoded in well under a millisecond), and the statement that stores it
reads it back there with ``string_agg``, so the server joins the pieces. The table's rows
last until the transaction ends (``ON COMMIT DELETE ROWS``): call it in one.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PIECE", "with_body"]

PIECE = 1 << 20
"""Bytes of a body sent by one statement."""
_TABLE = "contextfold_body_pieces"


async def with_body(con: Any, sql: str, body: bytes, *args: Any) -> Any:
    """``con.fetchval(sql, *args, body)`` where ``sql`` names the body ``{body}`` and
    ``args`` are ``$1``.. ``$n``; a body over :data:`PIECE` is sent in pieces (see the
    module)."""
    if len(body) <= PIECE:
        return await con.fetchval(sql.format(body=f"${len(args) + 1}"), *args, body)
    await con.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {_TABLE} (n INTEGER PRIMARY KEY, piece BYTEA NOT NULL) "
        "ON COMMIT DELETE ROWS"
    )
    await con.execute(f"DELETE FROM {_TABLE}")
    view = memoryview(body)
    for n, start in enumerate(range(0, len(body), PIECE)):
        await con.execute(
            f"INSERT INTO {_TABLE} (n, piece) VALUES ($1, $2)", n, view[start : start + PIECE]
        )
    joined = f"(SELECT string_agg(piece, ''::bytea ORDER BY n) FROM {_TABLE})"
    return await con.fetchval(sql.format(body=joined), *args)
