"""PostgresWorkspace against the workspace contract, on a real server.

The server is ``CONTEXTFOLD_TEST_PG_DSN`` or a throwaway one started by ``pg_dsn``
(see conftest); each test uses its own table prefix.
"""

from __future__ import annotations

import asyncio

import pytest

from contextfold._exceptions import MissingDependencyError
from contextfold.message import Msg
from contextfold.testing import WorkspaceContract
from contextfold.workspace import BaseWorkspace, PostgresWorkspace

from .builtin_contract import Backend, BuiltinWorkspaceTests


class TestPostgresWorkspace(BuiltinWorkspaceTests, WorkspaceContract):
    @pytest.fixture
    def backend(self, pg_dsn: str, pg_prefix: str) -> Backend:
        async def new() -> BaseWorkspace:
            ws = PostgresWorkspace(pg_dsn, table_prefix=pg_prefix, max_connections=4)
            await ws.initialize()
            return ws

        return Backend(new=new, spec={"kind": "postgres", "dsn": pg_dsn, "prefix": pg_prefix})


async def test_concurrent_initialize_is_safe(pg_dsn: str, pg_prefix: str) -> None:
    workers = [
        PostgresWorkspace(pg_dsn, table_prefix=pg_prefix, max_connections=1) for _ in range(8)
    ]
    await asyncio.gather(*(w.initialize() for w in workers))
    await workers[0].offload_context("s", [Msg("user", "hi", "user")])
    assert [m.text for m in await workers[7].load_context("s")] == ["hi"]
    await asyncio.gather(*(w.close() for w in workers))


def test_bad_table_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="table_prefix"):
        PostgresWorkspace("postgresql://x", table_prefix="x; DROP TABLE y")


async def test_missing_asyncpg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "asyncpg", None)
    with pytest.raises(MissingDependencyError, match=r"contextfold\[postgres\]"):
        await PostgresWorkspace("postgresql://nowhere").initialize()
