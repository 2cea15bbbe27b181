"""PostgresWorkspace with large items: no large parameter encoded on the event loop (issue 28).

asyncpg encodes a statement's parameters on the event loop, in one call: a 100 MB body was
copied into its buffer while the loop waited. A body over a megabyte is now sent in pieces
(``_postgres_pieces``), and so are a large document's text and terms for the search
index. This test checks what asyncpg is given (spied on), not timings.
"""

from __future__ import annotations

from typing import Any

import pytest

from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import PostgresWorkspace

asyncpg = pytest.importorskip("asyncpg")

BIG = "zqxfirst line\n" + "2026-12-04T05:00:00Z INFO worker-7 served, status 200\n" * 60_000
"""About 3.3 MB."""


@pytest.fixture
def params(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the ``bytes`` and text parameters of every statement asyncpg is given
    (a text's in characters)."""
    sizes: list[int] = []
    for name in ("execute", "fetchval", "fetch", "fetchrow", "executemany"):
        real = getattr(asyncpg.Connection, name)

        def spy(self: Any, query: str, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            rows = args[0] if _real.__name__ == "executemany" and args else [args]
            for row in rows:
                sizes.extend(len(a) for a in row if isinstance(a, (bytes, memoryview, str)))
            return _real(self, query, *args, **kwargs)

        monkeypatch.setattr(asyncpg.Connection, name, spy)
    return sizes


async def test_a_large_body_is_sent_in_pieces(
    pg_dsn: str, pg_prefix: str, params: list[int]
) -> None:
    async with PostgresWorkspace(pg_dsn, table_prefix=pg_prefix, max_connections=2) as ws:
        ref = await ws.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output=BIG))
        await ws.offload_context("s1", [Msg("tool", BIG, "user")])
        await ws.offload_context("s1", [Msg("user", "small", "user")])
        assert await ws.read_bytes(ref) == BIG.encode()
        assert [m.content for m in await ws.load_context("s1")] == [BIG, "small"]
        assert [h.ref for h in await ws.search("zqxfirst", session_id="s1")]
    assert params, "the bodies were sent as parameters"
    assert max(params) <= 1 << 20, f"a {max(params):,}-byte parameter encoded on the loop"
