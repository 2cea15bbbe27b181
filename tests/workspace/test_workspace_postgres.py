"""PostgresWorkspace against the workspace contract, on a real server.

The server is ``CONTEXTFOLD_TEST_PG_DSN`` or a throwaway one started by ``pg_dsn``
(see conftest); each test uses its own table prefix.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Sequence

import pytest

from contextfold._exceptions import MissingDependencyError, WorkspaceError
from contextfold.message import Msg, ToolResultBlock
from contextfold.testing import WorkspaceContract
from contextfold.workspace import BaseWorkspace, PostgresWorkspace, S3Workspace

from .builtin_contract import Backend, BuiltinWorkspaceTests


class TestPostgresWorkspace(BuiltinWorkspaceTests, WorkspaceContract):
    @pytest.fixture
    def backend(self, pg_dsn: str, pg_prefix: str) -> Backend:
        async def new() -> BaseWorkspace:
            ws = PostgresWorkspace(pg_dsn, table_prefix=pg_prefix, max_connections=4)
            await ws.initialize()
            return ws

        return Backend(new=new, spec={"kind": "postgres", "dsn": pg_dsn, "prefix": pg_prefix})


class TestPostgresWithS3Blobs(BuiltinWorkspaceTests, WorkspaceContract):
    """Records in PostgreSQL, every body (``blob_threshold=1``) in S3: the whole contract."""

    @pytest.fixture
    def backend(
        self, pg_dsn: str, pg_prefix: str, s3_endpoint: str, s3_bucket: str, s3_prefix: str
    ) -> Backend:
        async def new() -> BaseWorkspace:
            blobs = S3Workspace(s3_bucket, prefix=s3_prefix, endpoint_url=s3_endpoint)
            ws = PostgresWorkspace(
                pg_dsn, table_prefix=pg_prefix, max_connections=4, blobs=blobs, blob_threshold=1
            )
            await ws.initialize()
            return ws

        s3 = {"kind": "s3", "bucket": s3_bucket, "prefix": s3_prefix, "endpoint": s3_endpoint}
        spec = {"kind": "postgres", "dsn": pg_dsn, "prefix": pg_prefix, "s3": s3}
        return Backend(new=new, spec=spec, writers=8, writes=50)


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


@pytest.fixture
async def pg_s3(
    pg_dsn: str, pg_prefix: str, s3_endpoint: str, s3_bucket: str, s3_prefix: str
) -> AsyncIterator[tuple[PostgresWorkspace, S3Workspace]]:
    blobs = S3Workspace(s3_bucket, prefix=s3_prefix, endpoint_url=s3_endpoint)
    ws = PostgresWorkspace(pg_dsn, table_prefix=pg_prefix, blobs=blobs, blob_threshold=1000)
    await ws.initialize()
    yield ws, blobs
    await ws.close()


async def test_large_bodies_go_to_the_blob_store_and_small_ones_stay(
    pg_s3: tuple[PostgresWorkspace, S3Workspace],
) -> None:
    ws, blobs = pg_s3
    big, small = "B" * 5000, "small"
    big_ref = await ws.offload_tool_result("s1", ToolResultBlock(id="b", name="t", output=big))
    await ws.offload_tool_result("s1", ToolResultBlock(id="s", name="t", output=small))
    assert await blobs.get_blob(hashlib.sha256(big.encode()).hexdigest()) == big.encode()
    assert await blobs.get_blob(hashlib.sha256(small.encode()).hexdigest()) is None
    assert await ws.read(big_ref) == big
    sizes = {i.path: i.size for i in await ws.list_items("s1")}
    assert sizes == {"sessions/s1/tool_result-b.txt": 5000, "sessions/s1/tool_result-s.txt": 5}


async def test_purge_deletes_only_blobs_nothing_references(
    pg_s3: tuple[PostgresWorkspace, S3Workspace],
) -> None:
    ws, blobs = pg_s3
    shared, own = "S" * 2000, "O" * 2000
    for sid in ("s1", "s2"):
        await ws.offload_tool_result(sid, ToolResultBlock(id="c", name="t", output=shared))
    await ws.offload_context("s1", [Msg("user", own, "user")])
    own_digest = hashlib.sha256(await ws.read_bytes("sessions/s1/context.jsonl")).hexdigest()
    shared_digest = hashlib.sha256(shared.encode()).hexdigest()
    await ws.purge("s1")
    assert await blobs.get_blob(own_digest) is None
    assert await blobs.get_blob(shared_digest) == shared.encode()
    await ws.purge("s2")
    assert await blobs.get_blob(shared_digest) is None


class _FailingBlobs:
    """A blob store whose writes fail (the network to S3 is down)."""

    async def initialize(self) -> None: ...

    async def close(self) -> None: ...

    async def put_blob(self, digest: str, body: bytes) -> None:
        raise WorkspaceError("S3 is unreachable")

    async def get_blob(self, digest: str) -> bytes | None:
        return None

    async def delete_blobs(self, digests: Sequence[str]) -> None: ...


async def test_a_failed_blob_write_records_nothing(pg_dsn: str, pg_prefix: str) -> None:
    ws = PostgresWorkspace(
        pg_dsn, table_prefix=pg_prefix, blobs=_FailingBlobs(), blob_threshold=500
    )
    await ws.initialize()
    with pytest.raises(WorkspaceError, match="unreachable"):
        await ws.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="x" * 1000))
    with pytest.raises(WorkspaceError, match="unreachable"):
        await ws.offload_context("s1", [Msg("user", "y" * 1000, "user")])
    assert await ws.list_items("s1") == []
    await ws.offload_context("s1", [Msg("user", "tiny", "user")])  # small items still work
    assert [m.text for m in await ws.load_context("s1")] == ["tiny"]
    await ws.close()


async def test_a_blob_missing_from_the_store_is_a_clear_error(
    pg_s3: tuple[PostgresWorkspace, S3Workspace],
) -> None:
    ws, blobs = pg_s3
    ref = await ws.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="z" * 2000))
    await blobs.delete_blobs([hashlib.sha256(b"z" * 2000).hexdigest()])
    with pytest.raises(WorkspaceError, match="missing"):
        await ws.read(ref)


def test_bad_blob_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="blob_threshold"):
        PostgresWorkspace("postgresql://x", blob_threshold=0)


async def test_purge_racing_large_offloads_never_deletes_a_blob_a_row_names(
    pg_s3: tuple[PostgresWorkspace, S3Workspace],
) -> None:
    ws, _ = pg_s3
    for round_ in range(15):
        big = [
            ws.offload_tool_result(
                "s1", ToolResultBlock(id=f"c{i}", name="t", output=f"{i}" * 3000)
            )
            for i in range(4)
        ]
        await asyncio.gather(
            *big, ws.purge("s1"), ws.offload_context("s1", [Msg("user", "x" * 3000, "user")])
        )
        for item in await ws.list_items("s1"):  # whatever survived the purge reads back
            assert len(await ws.read_bytes(item.ref)) == item.size, round_
