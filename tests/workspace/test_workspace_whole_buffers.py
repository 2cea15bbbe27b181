"""A large offload is never one ``bytes`` object in this process (issue 28, point 7).

Freeing a 100 MB ``bytes`` object is one ``free`` (``munmap`` of its pages) that holds the
GIL: 12 ms on an idle machine, 40 to 120 ms with three processes spinning beside it, in
whichever thread drops it last. A Local offload of a 100 MB message dropped its serialized
line on the event loop and held it that long (``benchmarks/hostile_large_items.py
--busy 3``). These tests check the structure, not the timing: while the backend writes,
no block over 2 MB allocated by ``contextfold`` is alive in this process (traced with
``tracemalloc``), the backend is given the body in pieces, and the pieces are freed
before the call returns; the stored bytes are unchanged.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextfold.message import Msg, ToolResultBlock
from contextfold.workspace import LocalWorkspace

LINE = "2026-12-04T05:00:00Z INFO worker-7 request served in 12 ms, status 200\n"
BIG = "zqxfirst line\n" + LINE * 120_000 + 'ERROR "quoted" \\ at the end\n'
"""About 8.6 MB."""
LIMIT = 2 << 20


def _largest_block() -> int:
    """The largest block alive that ``contextfold`` code allocated."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, "*/contextfold/*", all_frames=True)]
    )
    return max((trace.size for trace in snapshot.traces), default=0)


def _spy(
    monkeypatch: pytest.MonkeyPatch, name: str, seen: list[tuple[int, Any, int]]
) -> Callable[..., Any]:
    real = getattr(LocalWorkspace, name)

    def spy(self: LocalWorkspace, *args: Any) -> Any:
        body = args[-1]
        size = sum(map(len, body)) if isinstance(body, list) else len(body)
        seen.append((_largest_block(), body, size))
        return real(self, *args)

    monkeypatch.setattr(LocalWorkspace, name, spy)
    return spy


@pytest.fixture
def traced() -> Any:
    tracemalloc.start(8)
    yield
    tracemalloc.stop()


async def test_a_large_context_offload_reaches_the_file_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, traced: None
) -> None:
    seen: list[tuple[int, Any, int]] = []
    _spy(monkeypatch, "_append_sync", seen)
    msg = Msg("tool", BIG, "user")
    async with LocalWorkspace(tmp_path / "w", fsync=False) as ws:
        ref = await ws.offload_context("s1", [msg])
        stored = await ws.read_bytes(ref)
        assert [h.offset for h in await ws.search("zqxfirst")] == [0]
    assert stored == f"{msg.model_dump_json()}\n".encode()
    largest, payload, size = max(seen, key=lambda x: x[2])  # the message's line
    assert size > len(BIG)
    assert largest < LIMIT, f"a {largest:,}-byte block was built in this process"
    assert isinstance(payload, list), "given to the backend in pieces"
    assert payload == [], "the pieces were freed (emptied)"


async def test_a_large_tool_result_reaches_the_file_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, traced: None
) -> None:
    seen: list[tuple[int, Any, int]] = []
    _spy(monkeypatch, "_put_tool_sync", seen)
    async with LocalWorkspace(tmp_path / "w", fsync=False) as ws:
        ref = await ws.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output=BIG))
        assert await ws.read_bytes(ref) == BIG.encode()
        assert [h.ref for h in await ws.search("zqxfirst")] == [ref]
    largest, body, size = seen[0]
    assert size == len(BIG)
    assert largest < LIMIT, f"a {largest:,}-byte block was built in this process"
    assert isinstance(body, list), "given to the backend in pieces"
    assert body == [], "the pieces were freed (emptied)"


def test_the_offload_key_of_a_long_text_is_hashed_a_piece_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine's content key: the escaped text comes back from the worker in pieces,
    each hashed and freed in turn, never as one 8.6 MB object."""
    import hashlib

    from contextfold.context import _offload

    expected = _offload._digest("result", ["t", BIG])
    sizes: list[int] = []
    real = hashlib.sha256

    class Spy:
        def __init__(self, *args: Any) -> None:
            self._hash = real(*args)

        def update(self, data: bytes) -> None:
            sizes.append(len(data))
            self._hash.update(data)

        def hexdigest(self) -> str:
            return self._hash.hexdigest()

    monkeypatch.setattr(_offload.hashlib, "sha256", Spy)
    assert _offload._digest_in_pieces("result", ["t", BIG]) == expected
    assert sum(sizes) > len(BIG)
    assert max(sizes) <= 1 << 20, f"a {max(sizes):,}-byte piece hashed at once"
