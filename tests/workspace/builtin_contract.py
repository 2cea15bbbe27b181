"""What the built-in backends (``BaseWorkspace`` subclasses) show beyond the public contract.

A backend's test file defines ``class TestXxx(BuiltinWorkspaceTests, WorkspaceContract)``
and overrides the ``backend`` fixture: the public :class:`WorkspaceContract` runs on the
workspace it opens, and the tests below cover what only ``BaseWorkspace`` promises
(``initialize``, ``load_context``, JSON-checked state, several instances or processes over
one store, the wording of its errors).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from contextfold import UnsafePathError, WorkspaceError
from contextfold.message import Msg, ToolResultBlock
from contextfold.testing._contract_base import SECRET, image, mixed_messages, snapshot
from contextfold.tool import readback_tools
from contextfold.workspace import BaseWorkspace

from . import _ws_proc as workspace_proc

__all__ = ["SECRET", "Backend", "BuiltinWorkspaceTests", "image", "run", "snapshot"]

_T = TypeVar("_T")


@dataclass
class Backend:
    """How the tests reach one store."""

    new: Callable[[], Awaitable[BaseWorkspace]]
    """A new, initialized instance over this test's store (the same one each time)."""
    spec: dict[str, Any] | None = None
    """For ``tests/workspace/_ws_proc.py`` workers; ``None``: in-process only."""
    outside: Path | None = None
    """A directory outside the store that must never be touched (filesystem backends)."""
    extra: dict[str, Any] = field(default_factory=dict)
    writers: int = 16
    """Processes in the multi-process tests."""
    writes: int = 200
    """Writes per process in the multi-process tests."""


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine from a sync (hypothesis) test."""
    return asyncio.run(coro)


class BuiltinWorkspaceTests:
    """Tests of ``BaseWorkspace`` behaviour; subclasses override the ``backend`` fixture."""

    @pytest.fixture
    def backend(self) -> Backend:
        raise NotImplementedError("override the `backend` fixture")

    @pytest.fixture
    async def workspace(self, backend: Backend) -> AsyncIterator[BaseWorkspace]:
        ws = await backend.new()
        yield ws
        await ws.close()

    @pytest.fixture
    def outside(self, backend: Backend) -> Path | None:
        return backend.outside

    async def test_uninitialized_workspace_says_to_initialize(self, backend: Backend) -> None:
        ws = await backend.new()
        await ws.close()
        fresh = type(ws).__new__(type(ws))
        fresh.__dict__.update(ws.__dict__)
        fresh._initialized = False
        with pytest.raises(WorkspaceError, match="initialize"):
            await fresh.offload_context("s", [Msg("user", "hi", "user")])

    async def test_load_context_puts_the_data_back(self, workspace: BaseWorkspace) -> None:
        msgs = mixed_messages()
        await workspace.offload_context("s1", msgs)
        assert await workspace.load_context("s1") == msgs

    async def test_invalid_state_json_is_rejected(self, workspace: BaseWorkspace) -> None:
        with pytest.raises(WorkspaceError, match="not valid JSON"):
            await workspace.save_state("s1", "{nope")

    async def test_state_is_visible_to_another_instance(self, backend: Backend) -> None:
        a, b = await backend.new(), await backend.new()
        await a.save_state("s1", '{"k": 1}')
        assert await b.load_state("s1") == '{"k": 1}'
        await a.close()
        await b.close()

    async def test_grep_huge_repeat_count_is_a_value_error(self, workspace: BaseWorkspace) -> None:
        with pytest.raises(ValueError, match="repeats too much"):
            await workspace.grep("((a{1000}){1000}){1000}")

    async def test_surrogate_session_ids_round_trip(self, workspace: BaseWorkspace) -> None:
        # Lone surrogates (from os.fsdecode, or JSON's "\\udc80") are accepted by every
        # built-in backend alike: stored reversibly, listed and read back as given.
        ids = ["\udc80", "a\ud800b", "\udcff/..", "x" * 150 + "\udc80"]
        for sid in ids:
            await workspace.offload_context(sid, [Msg("user", f"in {len(sid)}", "user")])
            await workspace.offload_tool_result(
                sid, ToolResultBlock(id="\udc81", name="t", output="r")
            )
            await workspace.save_state(sid, f'{{"n": {len(sid)}}}')
        assert set(ids) <= set(await workspace.list_sessions())
        for sid in ids:
            assert await workspace.load_state(sid) == f'{{"n": {len(sid)}}}'
            assert [m.text for m in await workspace.load_context(sid)] == [f"in {len(sid)}"]
            assert {i.session_id for i in await workspace.list_items(sid)} == {sid}

    # -- the wording of errors (the read-back tools show it to the model) -------------------

    async def test_unknown_reference_says_no_such_item(self, workspace: BaseWorkspace) -> None:
        with pytest.raises(WorkspaceError, match="no such item"):
            await workspace.read("sessions/nobody/context.jsonl")

    async def test_purged_data_says_no_such_item(self, workspace: BaseWorkspace) -> None:
        only_s1 = await workspace.offload_data("s1", image())
        await workspace.purge("s1")
        with pytest.raises(WorkspaceError, match="no such item"):
            await workspace.read_bytes(only_s1)

    async def test_empty_session_id_says_non_empty(self, workspace: BaseWorkspace) -> None:
        with pytest.raises(UnsafePathError, match="non-empty"):
            await workspace.offload_context("", [Msg("user", "x", "user")])

    async def test_invalid_pattern_says_invalid_regular_expression(
        self, workspace: BaseWorkspace
    ) -> None:
        with pytest.raises(ValueError, match="invalid regular expression"):
            await workspace.grep("(unclosed")

    async def test_grep_timeout_says_did_not_finish(self, workspace: BaseWorkspace) -> None:
        await workspace.offload_tool_result(
            "s1", ToolResultBlock(id="c", name="t", output="a" * 40 + "b")
        )
        with pytest.raises(TimeoutError, match="did not finish"):
            await workspace.grep(r"(a|aa)+$", time_limit=0.2)
        _, grep, *_ = readback_tools(workspace, grep_timeout=0.2)
        assert "did not finish" in await grep(r"(a|aa)+$b")

    # -- several processes over one store ------------------------------------------------------

    def test_many_processes_append_to_one_session(self, backend: Backend, tmp_path: Path) -> None:
        if backend.spec is None:
            pytest.skip("in-process backend: no multi-process sharing")
        nw, n = backend.writers, backend.writes
        procs = [workspace_proc.start(backend.spec, "append", w, n, 1) for w in range(nw)]
        for p in procs:
            p.join(240)
            assert p.exitcode == 0

        async def check() -> list[str]:
            ws = await backend.new()
            try:
                raw = await ws.read_bytes("sessions/shared/context.jsonl")
                return [
                    Msg.model_validate_json(line).text.split(" ")[0] for line in raw.splitlines()
                ]
            finally:
                await ws.close()

        got = run(check())
        assert sorted(got) == sorted(f"w{w}-{i}" for w in range(nw) for i in range(n))
        for w in range(nw):  # each writer's own lines stay in its order
            mine = [int(x.split("-")[1]) for x in got if x.startswith(f"w{w}-")]
            assert mine == list(range(n))

    def test_many_processes_with_clashing_tool_ids(self, backend: Backend, tmp_path: Path) -> None:
        if backend.spec is None:
            pytest.skip("in-process backend: no multi-process sharing")
        nw, n = backend.writers, backend.writes
        outs = [tmp_path / f"refs{w}" for w in range(nw)]
        fds = [os.open(p, os.O_WRONLY | os.O_CREAT) for p in outs]
        procs = [workspace_proc.start(backend.spec, "tools", w, n, fds[w]) for w in range(nw)]
        for p in procs:
            p.join(240)
            assert p.exitcode == 0
        for fd in fds:
            os.close(fd)
        refs = [r for p in outs for r in p.read_text().split()]

        async def check() -> list[str]:
            ws = await backend.new()
            try:
                return [await ws.read(r) for r in refs]
            finally:
                await ws.close()

        assert len(set(refs)) == nw * n
        assert sorted(run(check())) == sorted(f"w{w}-{i}" for w in range(nw) for i in range(n))
