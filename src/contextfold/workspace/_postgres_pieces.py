"""A large ``bytea`` or text value sent to PostgreSQL a megabyte at a time.

asyncpg encodes a statement's parameters on the event loop, in one call: a 100 MB body is
copied into its write buffer (and that buffer grown) while the loop waits. Here a body
over :data:`PIECE` bytes is staged in a temporary table of the connection, one statement
per megabyte (each encoded in well under a millisecond), and the statement that stores it
reads it back there with ``string_agg``, so the server joins the pieces. The table's rows
last until the transaction ends (``ON COMMIT DELETE ROWS``): :func:`with_body` is called in
one; :func:`with_texts` opens one (a savepoint inside another).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["PIECE", "with_body", "with_texts"]

PIECE = 1 << 20
"""Bytes of a body sent by one statement."""
_TABLE = "contextfold_body_pieces"
_TEXT_TABLE = "contextfold_text_pieces"


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


async def with_texts(con: Any, sql: str, texts: Sequence[str | None], *args: Any) -> Any:
    """``con.execute(sql, *args, *texts)`` where ``sql`` names the texts ``{t0}``,
    ``{t1}``.. and ``args`` are ``$1``.. ``$n``; a text over :data:`PIECE` characters is
    sent in pieces (see the module). A search document of a large item (2 million
    characters and their ~3 million characters of terms) was one parameter each."""
    if all(t is None or len(t) <= PIECE for t in texts):
        names = {f"t{i}": f"${len(args) + 1 + i}" for i in range(len(texts))}
        return await con.execute(sql.format(**names), *args, *texts)
    async with con.transaction():
        await con.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {_TEXT_TABLE} (k INTEGER, n INTEGER, "
            "piece TEXT NOT NULL, PRIMARY KEY (k, n)) ON COMMIT DELETE ROWS"
        )
        await con.execute(f"DELETE FROM {_TEXT_TABLE}")
        names, small = {}, []
        for k, text in enumerate(texts):
            if text is None or len(text) <= PIECE:
                small.append(text)
                names[f"t{k}"] = f"${len(args) + len(small)}"
                continue
            for n, start in enumerate(range(0, len(text), PIECE)):
                await con.execute(
                    f"INSERT INTO {_TEXT_TABLE} (k, n, piece) VALUES ($1, $2, $3)",
                    k,
                    n,
                    text[start : start + PIECE],
                )
            names[f"t{k}"] = (
                f"(SELECT string_agg(piece, '' ORDER BY n) FROM {_TEXT_TABLE} WHERE k = {k})"
            )
        return await con.execute(sql.format(**names), *args, *small)
