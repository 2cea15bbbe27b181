"""S3Workspace with large items: the upload's hashing off the event loop, a download's
checksum a megabyte at a time (issue 28).

botocore signs a request body by hashing it (SHA-256 of the whole body over plain HTTP)
and computes its CRC32 checksum before sending; in aiobotocore both run on the event
loop's thread, ~0.2 s for 100 MB however GIL-free the hashing is. These tests check where
that work runs (spied on), not how long it takes. The server is moto's, on loopback.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import S3Workspace

pytest.importorskip("aiobotocore")

BIG = "zqxfirst line\n" + "2026-12-04T05:00:00Z INFO worker-7 served, status 200\n" * 60_000
"""About 3.3 MB."""


@pytest.fixture
async def ws(s3_endpoint: str, s3_bucket: str, s3_prefix: str) -> AsyncIterator[S3Workspace]:
    ws = S3Workspace(s3_bucket, prefix=s3_prefix, endpoint_url=s3_endpoint)
    await ws.initialize()
    yield ws
    await ws.close()


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, bool]]:
    """``(what, bytes, on the loop's thread)`` of each payload hash and CRC32 botocore
    computes over more than a megabyte."""
    import botocore.auth
    import botocore.httpchecksum

    loop_thread = threading.current_thread()
    seen: list[tuple[str, int, bool]] = []

    def note(what: str, data: Any) -> None:
        size = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else 0
        if size > 1 << 20:
            seen.append((what, size, threading.current_thread() is loop_thread))

    real_payload, real_crc = botocore.auth.S3SigV4Auth.payload, botocore.httpchecksum.crc32

    def payload(self: Any, request: Any) -> Any:  # the body's SHA-256, to sign it
        body = request.body
        if hasattr(body, "seek"):
            at = body.tell()
            body.seek(0, 2)
            size = body.tell() - at
            body.seek(at)
            note("sha256", memoryview(bytes(size)) if size > 1 << 20 else b"")
        else:
            note("sha256", body)
        return real_payload(self, request)

    def crc(data: Any, *args: Any) -> int:
        note("crc32", data)
        return int(real_crc(data, *args))

    monkeypatch.setattr(botocore.auth.S3SigV4Auth, "payload", payload)
    monkeypatch.setattr(botocore.httpchecksum, "crc32", crc)
    return seen


async def test_a_large_upload_is_hashed_and_signed_off_the_loop(
    ws: S3Workspace, hashed: list[tuple[str, int, bool]]
) -> None:
    ref = await ws.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output=BIG))
    await ws.offload_context("s1", [Msg("tool", BIG, "user")])
    uploads = list(hashed)  # the reads' CRC32: the next test
    assert await ws.read_bytes(ref) == BIG.encode()
    assert [m.content for m in await ws.load_context("s1")] == [BIG]
    assert [h.ref for h in await ws.search("zqxfirst", session_id="s1")]
    assert any(what == "sha256" for what, _, _ in uploads), "the large bodies were signed"
    on_loop = [(what, size) for what, size, here in uploads if here]
    assert not on_loop, f"hashed on the event loop's thread: {on_loop}"


async def test_an_unscoped_grep_lists_a_page_at_a_time(
    ws: S3Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextfold.workspace import _s3_client

    for n in range(12):
        block = ToolResultBlock(id="c", name="t", output=f"zqxhit {n}")
        await ws.offload_tool_result(f"s{n:02d}", block)
    await ws.offload_context("s03", [Msg("user", "zqxhit in a log", "user")])
    whole = await ws.grep("zqxhit", max_results=100)
    assert len(whole) == 13
    monkeypatch.setattr(_s3_client, "LIST_PAGE", 4, raising=False)
    client = ws._objects.client()
    real = client.list_objects_v2
    listed: list[str] = []

    async def spy(**ask: Any) -> Any:
        got = await real(**ask)
        listed.extend(o["Key"] for o in got.get("Contents", []))
        return got

    monkeypatch.setattr(client, "list_objects_v2", spy)
    first = await ws.grep("zqxhit", max_results=3)
    assert [(m.path, m.line) for m in first] == [(m.path, m.line) for m in whole[:3]]
    sessions = {k.split("/")[2] for k in listed if "/sessions/" in f"/{k}"}
    assert len(sessions) < 12, f"listed all {len(sessions)} sessions for 3 matches"


async def test_a_large_download_checks_its_crc32_a_megabyte_at_a_time(
    ws: S3Workspace, hashed: list[tuple[str, int, bool]]
) -> None:
    """aiobotocore checks a GET's CRC32 on the loop's thread over what each read returns:
    one read of the whole body hashed 100 MB in one go (~0.1 s without a yield)."""
    ref = await ws.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output=BIG))
    await ws.offload_context("s1", [Msg("tool", BIG, "user")])
    hashed.clear()
    assert await ws.read_bytes(ref) == BIG.encode()
    assert [m.content for m in await ws.load_context("s1")] == [BIG]
    on_loop = [(what, size) for what, size, here in hashed if here]
    assert not on_loop, f"over 1 MB hashed at once on the event loop's thread: {on_loop}"
