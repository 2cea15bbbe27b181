"""The workspace contract: behaviour every backend must show (fsspec-style battery).

A backend's test file defines ``class TestXxx(WorkspaceContract)`` and overrides the
``backend`` fixture; every test below then runs against it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold._exceptions import UnsafePathError, WorkspaceError
from contextfold.message import (
    Base64Source,
    DataBlock,
    Msg,
    TextBlock,
    ToolResultBlock,
    URLSource,
)
from contextfold.tool._readback import readback_tools
from contextfold.workspace import (
    BaseWorkspace,
    DataOffloader,
    Offloader,
    SessionStore,
    WorkspaceReader,
    encode_key,
    parse_ref,
)

from . import _ws_proc as workspace_proc

_T = TypeVar("_T")
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4).decode()
OTHER_PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"other").decode()
SECRET = "TOPSECRET-4f1c"


@dataclass
class Backend:
    """How the contract reaches one store."""

    new: Callable[[], Awaitable[BaseWorkspace]]
    """A new, initialized instance over this test's store (the same one each time)."""
    spec: dict[str, Any] | None = None
    """For ``tests/workspace/_ws_proc.py`` workers; ``None``: in-process only."""
    outside: Path | None = None
    """A directory outside the store that must never be touched (filesystem backends)."""
    extra: dict[str, Any] = field(default_factory=dict)


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine from a sync (hypothesis) test."""
    return asyncio.run(coro)


def image(data: str = PNG, media_type: str = "image/png") -> DataBlock:
    return DataBlock(source=Base64Source(media_type=media_type, data=data))


def snapshot(root: Path | None) -> dict[str, bytes]:
    if root is None:
        return {}
    return {
        str(p): p.read_bytes() if p.is_file() and not p.is_symlink() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


hostile_ids = st.one_of(
    st.text(min_size=1, max_size=300),
    st.sampled_from(
        [
            "..",
            ".",
            "../../etc/passwd",
            "/etc/passwd",
            "a/../../b",
            "\x00",
            "a\x00b",
            "~",
            "%2e%2e",
            "%",
            "x" * 1000,
            "🙂/..",
            ".hidden",
            "a\\..\\b",
            "sessions",
            "tool_result-x.txt",
        ]
    ),
    st.lists(
        st.sampled_from(["..", "/", ".", "a", "\x00", "é", "%", "~", "\\"]), min_size=1, max_size=40
    ).map("".join),
)

hostile_refs = st.one_of(
    st.lists(
        st.sampled_from(
            [
                "..",
                ".",
                "",
                "sessions",
                "data",
                "etc",
                "passwd",
                "/",
                "\x00",
                "s",
                "secret.txt",
                "context.jsonl",
                "tool_result-x.txt",
                "outside",
                "%2e%2e",
                "~",
            ]
        ),
        min_size=1,
        max_size=8,
    ).map("/".join),
    st.text(max_size=60),
)

_NO_DEADLINE = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
)


class WorkspaceContract:
    """Behaviour tests; subclasses override the ``backend`` fixture."""

    @pytest.fixture
    def backend(self) -> Backend:
        raise NotImplementedError("override the `backend` fixture")

    @pytest.fixture
    async def workspace(self, backend: Backend) -> AsyncIterator[BaseWorkspace]:
        ws = await backend.new()
        yield ws
        await ws.close()

    # -- protocols -----------------------------------------------------------------------

    async def test_implements_every_workspace_protocol(self, workspace: BaseWorkspace) -> None:
        assert isinstance(workspace, Offloader)
        assert isinstance(workspace, DataOffloader)
        assert isinstance(workspace, WorkspaceReader)
        assert isinstance(workspace, SessionStore)

    async def test_uninitialized_workspace_says_to_initialize(self, backend: Backend) -> None:
        ws = await backend.new()
        await ws.close()
        fresh = type(ws).__new__(type(ws))
        fresh.__dict__.update(ws.__dict__)
        fresh._initialized = False
        with pytest.raises(WorkspaceError, match="initialize"):
            await fresh.offload_context("s", [Msg("user", "hi", "user")])

    # -- context log -----------------------------------------------------------------------

    async def test_offloaded_context_reads_back_by_its_reference(
        self, workspace: BaseWorkspace
    ) -> None:
        ref = await workspace.offload_context("s1", [Msg("user", "the secret is 42", "user")])
        lines = (await workspace.read(ref)).splitlines()
        assert len(lines) == 1
        assert Msg.from_json(lines[0]).text == "the secret is 42"

    async def test_reference_has_canonical_relative_form(self, workspace: BaseWorkspace) -> None:
        ref = await workspace.offload_context("s1", [Msg("user", "x", "user")])
        assert ref.endswith("sessions/s1/context.jsonl")
        assert await workspace.read("sessions/s1/context.jsonl") == await workspace.read(ref)

    async def test_appends_keep_call_and_message_order(self, workspace: BaseWorkspace) -> None:
        for i in range(0, 30, 3):
            await workspace.offload_context(
                "s1", [Msg("user", f"m{i + k}", "user") for k in range(3)]
            )
        assert [m.text for m in await workspace.load_context("s1")] == [f"m{i}" for i in range(30)]

    async def test_messages_round_trip_whole(self, workspace: BaseWorkspace) -> None:
        msgs = [
            Msg("user", [TextBlock(text="look"), image()], "user"),
            Msg("assistant", "a picture of bytes", "assistant"),
            Msg(
                "user",
                [ToolResultBlock(id="c1", name="shot", output=[TextBlock(text="ok"), image()])],
                "user",
            ),
        ]
        await workspace.offload_context("s1", msgs)
        assert await workspace.load_context("s1") == msgs

    async def test_inline_data_leaves_the_context_line(self, workspace: BaseWorkspace) -> None:
        ref = await workspace.offload_context("s1", [Msg("user", [image()], "user")])
        line = await workspace.read(ref)
        assert PNG not in line
        block = Msg.from_json(line).get_blocks(DataBlock)[0]
        assert isinstance(block.source, URLSource)
        assert parse_ref(block.source.url).kind == "data"
        stored = await workspace.read_bytes(block.source.url)
        assert stored == base64.b64decode(PNG)

    async def test_empty_offload_writes_nothing(self, workspace: BaseWorkspace) -> None:
        await workspace.offload_context("s1", [])
        assert await workspace.load_context("s1") == []

    async def test_unknown_reference_is_a_clear_error(self, workspace: BaseWorkspace) -> None:
        with pytest.raises(WorkspaceError, match="no such item"):
            await workspace.read("sessions/nobody/context.jsonl")

    # -- data ------------------------------------------------------------------------------

    async def test_identical_data_is_stored_once(self, workspace: BaseWorkspace) -> None:
        await workspace.offload_context("s1", [Msg("user", [image()], "user")])
        await workspace.offload_context("s2", [Msg("user", [image(), image()], "user")])
        r1 = await workspace.offload_data("s2", image())
        data = [i for i in await workspace.list_items() if i.kind == "data"]
        assert len(data) == 1
        assert data[0].ref == r1
        assert data[0].size == len(base64.b64decode(PNG))

    async def test_data_name_is_hash_of_decoded_bytes(self, workspace: BaseWorkspace) -> None:
        import hashlib

        ref = await workspace.offload_data("s1", image())
        assert ref.endswith(f"data/{hashlib.sha256(base64.b64decode(PNG)).hexdigest()}.png")
        assert await workspace.read_bytes(ref) == base64.b64decode(PNG)

    async def test_session_lists_the_data_it_references(self, workspace: BaseWorkspace) -> None:
        await workspace.offload_data("s1", image())
        await workspace.offload_data("s2", image(OTHER_PNG))
        kinds = [(i.kind, i.session_id) for i in await workspace.list_items("s1")]
        assert kinds == [("data", "s1")]

    # -- tool results ----------------------------------------------------------------------

    async def test_tool_result_is_stored_whole(self, workspace: BaseWorkspace) -> None:
        text = "\n".join(f"line {i}" for i in range(5000))
        ref = await workspace.offload_tool_result(
            "s1", ToolResultBlock(id="call_1", name="bash", output=text)
        )
        assert ref.endswith("sessions/s1/tool_result-call_1.txt")
        assert await workspace.read(ref) == text

    async def test_same_tool_id_twice_never_overwrites(self, workspace: BaseWorkspace) -> None:
        a = await workspace.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="A"))
        b = await workspace.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="B"))
        assert a != b
        assert (await workspace.read(a), await workspace.read(b)) == ("A", "B")

    async def test_tool_result_data_becomes_a_reference(self, workspace: BaseWorkspace) -> None:
        block = ToolResultBlock(id="c", name="t", output=[TextBlock(text="see"), image()])
        text = await workspace.read(await workspace.offload_tool_result("s1", block))
        first, second = text.splitlines()
        assert first == "see"
        ref = second.split(": ", 1)[1].rstrip("]")
        assert await workspace.read_bytes(ref) == base64.b64decode(PNG)

    # -- reading ---------------------------------------------------------------------------

    async def test_read_applies_line_offset_and_limit(self, workspace: BaseWorkspace) -> None:
        text = "\n".join(f"L{i}" for i in range(100))
        ref = await workspace.offload_tool_result(
            "s1", ToolResultBlock(id="c", name="t", output=text)
        )
        assert await workspace.read(ref, offset=10, limit=3) == "L10\nL11\nL12"
        assert await workspace.read(ref, offset=98, limit=50) == "L98\nL99"

    async def test_listing_shows_sessions_items_and_sizes(self, workspace: BaseWorkspace) -> None:
        await workspace.offload_context("s1", [Msg("user", "hello", "user")])
        await workspace.offload_tool_result("s2", ToolResultBlock(id="c", name="t", output="12345"))
        assert await workspace.list_sessions() == ["s1", "s2"]
        items = {(i.path, i.kind, i.session_id, i.size) for i in await workspace.list_items()}
        ctx_size = len(await workspace.read_bytes("sessions/s1/context.jsonl"))
        assert items == {
            ("sessions/s1/context.jsonl", "context", "s1", ctx_size),
            ("sessions/s2/tool_result-c.txt", "tool_result", "s2", 5),
        }

    async def test_listed_references_are_readable(self, workspace: BaseWorkspace) -> None:
        await workspace.offload_context("s1", [Msg("user", [image()], "user")])
        await workspace.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="x"))
        for item in await workspace.list_items("s1"):
            assert len(await workspace.read_bytes(item.ref)) == item.size

    async def test_grep_finds_lines_with_context(self, workspace: BaseWorkspace) -> None:
        text = "alpha\nbeta\nneedle 7\ngamma\ndelta"
        ref = await workspace.offload_tool_result(
            "s1", ToolResultBlock(id="c", name="t", output=text)
        )
        [match] = await workspace.grep(r"needle \d", context=1)
        assert (match.ref, match.line_number, match.line) == (ref, 3, "needle 7")
        assert (match.before, match.after) == (("beta",), ("gamma",))

    async def test_grep_glob_filters_items(self, workspace: BaseWorkspace) -> None:
        await workspace.offload_context("s1", [Msg("user", "needle in context", "user")])
        await workspace.offload_tool_result(
            "s1", ToolResultBlock(id="c", name="t", output="needle")
        )
        found = await workspace.grep("needle", glob="*.txt")
        assert [m.ref.endswith("tool_result-c.txt") for m in found] == [True]

    async def test_grep_is_confined_to_a_session(self, workspace: BaseWorkspace) -> None:
        await workspace.offload_context("s1", [Msg("user", "needle one", "user")])
        await workspace.offload_context("s2", [Msg("user", "needle two", "user")])
        found = await workspace.grep("needle", session_id="s2")
        assert [Msg.from_json(m.line).text for m in found] == ["needle two"]

    async def test_grep_catastrophic_pattern_times_out(self, workspace: BaseWorkspace) -> None:
        await workspace.offload_tool_result(
            "s1", ToolResultBlock(id="c", name="t", output="a" * 40 + "b")
        )
        with pytest.raises(TimeoutError, match="did not finish"):
            await workspace.grep(r"(a|aa)+$", time_limit=0.2)

    async def test_grep_invalid_pattern_is_a_value_error(self, workspace: BaseWorkspace) -> None:
        with pytest.raises(ValueError, match="invalid regular expression"):
            await workspace.grep("(unclosed")

    async def test_grep_huge_repeat_count_is_a_value_error(self, workspace: BaseWorkspace) -> None:
        with pytest.raises(ValueError, match="repeats too much"):
            await workspace.grep("((a{1000}){1000}){1000}")

    # -- purge -----------------------------------------------------------------------------

    async def test_purge_removes_only_that_session(self, workspace: BaseWorkspace) -> None:
        await workspace.offload_context("s1", [Msg("user", "one", "user")])
        await workspace.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="x"))
        await workspace.save_state("s1", "{}")
        await workspace.offload_context("s2", [Msg("user", "two", "user")])
        await workspace.purge("s1")
        assert await workspace.list_sessions() == ["s2"]
        assert await workspace.list_items("s1") == []
        assert await workspace.load_state("s1") is None
        assert [m.text for m in await workspace.load_context("s2")] == ["two"]

    async def test_purge_keeps_data_shared_with_other_sessions(
        self, workspace: BaseWorkspace
    ) -> None:
        await workspace.offload_data("s1", image())
        ref = await workspace.offload_data("s2", image())
        only_s1 = await workspace.offload_data("s1", image(OTHER_PNG))
        await workspace.purge("s1")
        assert await workspace.read_bytes(ref) == base64.b64decode(PNG)
        with pytest.raises(WorkspaceError, match="no such item"):
            await workspace.read_bytes(only_s1)

    async def test_purge_of_unknown_session_is_a_no_op(self, workspace: BaseWorkspace) -> None:
        await workspace.offload_context("s1", [Msg("user", "one", "user")])
        await workspace.purge("nobody")
        assert await workspace.list_sessions() == ["s1"]

    # -- session state ---------------------------------------------------------------------

    async def test_state_saves_and_loads(self, workspace: BaseWorkspace) -> None:
        await workspace.save_state("s1", '{"summary": "v1"}')
        await workspace.save_state("s1", '{"summary": "v2"}')
        assert json.loads(await workspace.load_state("s1") or "") == {"summary": "v2"}

    async def test_missing_state_is_none(self, workspace: BaseWorkspace) -> None:
        assert await workspace.load_state("never") is None

    async def test_invalid_state_json_is_rejected(self, workspace: BaseWorkspace) -> None:
        with pytest.raises(WorkspaceError, match="not valid JSON"):
            await workspace.save_state("s1", "{nope")

    async def test_state_is_visible_to_another_instance(self, backend: Backend) -> None:
        a, b = await backend.new(), await backend.new()
        await a.save_state("s1", '{"k": 1}')
        assert await b.load_state("s1") == '{"k": 1}'
        await a.close()
        await b.close()

    # -- concurrency -----------------------------------------------------------------------

    async def test_concurrent_tasks_lose_nothing(self, workspace: BaseWorkspace) -> None:
        async def one(i: int) -> str:
            await workspace.offload_context("s1", [Msg("user", f"t{i}-{'z' * i}", "user")])
            return await workspace.offload_tool_result(
                "s1", ToolResultBlock(id="same", name="t", output=f"r{i}")
            )

        refs = await asyncio.gather(*(one(i) for i in range(200)))
        texts = sorted(m.text.split("-")[0] for m in await workspace.load_context("s1"))
        assert texts == sorted(f"t{i}" for i in range(200))
        assert len(set(refs)) == 200
        assert sorted([await workspace.read(r) for r in refs]) == sorted(
            f"r{i}" for i in range(200)
        )

    def test_many_processes_append_to_one_session(self, backend: Backend, tmp_path: Path) -> None:
        if backend.spec is None:
            pytest.skip("in-process backend: no multi-process sharing")
        procs = [workspace_proc.start(backend.spec, "append", w, 200, 1) for w in range(16)]
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
        assert sorted(got) == sorted(f"w{w}-{i}" for w in range(16) for i in range(200))
        for w in range(16):  # each writer's own lines stay in its order
            mine = [int(x.split("-")[1]) for x in got if x.startswith(f"w{w}-")]
            assert mine == list(range(200))

    def test_many_processes_with_clashing_tool_ids(self, backend: Backend, tmp_path: Path) -> None:
        if backend.spec is None:
            pytest.skip("in-process backend: no multi-process sharing")
        outs = [tmp_path / f"refs{w}" for w in range(16)]
        fds = [os.open(p, os.O_WRONLY | os.O_CREAT) for p in outs]
        procs = [workspace_proc.start(backend.spec, "tools", w, 200, fds[w]) for w in range(16)]
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

        assert len(set(refs)) == 16 * 200
        assert sorted(run(check())) == sorted(f"w{w}-{i}" for w in range(16) for i in range(200))

    # -- hostile ids and paths -------------------------------------------------------------

    @_NO_DEADLINE
    @given(session_id=hostile_ids, tool_id=hostile_ids)
    def test_hostile_ids_stay_inside_and_round_trip(
        self, backend: Backend, session_id: str, tool_id: str
    ) -> None:
        before = snapshot(backend.outside)

        async def go() -> None:
            ws = await backend.new()
            try:
                ref = await ws.offload_context(session_id, [Msg("user", "hostile", "user")])
                tref = await ws.offload_tool_result(
                    session_id, ToolResultBlock(id=tool_id, name="t", output="T")
                )
                skey = encode_key(session_id)
                assert ref.endswith(f"sessions/{skey}/context.jsonl")
                assert parse_ref("/".join(tref.split("/")[-3:])).session_key == skey
                assert (await ws.read(tref)) == "T"
                assert session_id in await ws.list_sessions()
                assert [m.text for m in await ws.load_context(session_id)][-1] == "hostile"
                await ws.purge(session_id)
                assert session_id not in await ws.list_sessions()
            finally:
                await ws.close()

        run(go())
        assert snapshot(backend.outside) == before

    @_NO_DEADLINE
    @given(ref=hostile_refs)
    def test_hostile_references_are_refused_or_not_found(self, backend: Backend, ref: str) -> None:
        async def go() -> None:
            ws = await backend.new()
            try:
                await ws.offload_context("s", [Msg("user", "inside", "user")])
                try:
                    text = await ws.read(ref)
                except UnsafePathError:
                    return
                except WorkspaceError as exc:
                    if "no such item" not in str(exc):
                        raise
                    return
                assert SECRET not in text
                assert parse_ref(ref).rel == ref  # only canonical references can succeed
            finally:
                await ws.close()

        run(go())

    async def test_empty_session_id_is_refused(self, workspace: BaseWorkspace) -> None:
        with pytest.raises(UnsafePathError, match="non-empty"):
            await workspace.offload_context("", [Msg("user", "x", "user")])

    async def test_traversal_reference_is_unsafe(self, workspace: BaseWorkspace) -> None:
        for ref in (
            "../../etc/passwd",
            "/etc/passwd",
            "sessions/../../etc/passwd",
            "sessions/s1/../../../etc/passwd",
            "data/../../x",
            "sessions/s1/\x00",
        ):
            with pytest.raises(UnsafePathError):
                await workspace.read(ref)

    # -- read-back tools ---------------------------------------------------------------------

    async def test_tools_are_named_read_grep_glob(self, workspace: BaseWorkspace) -> None:
        assert [t.__name__ for t in readback_tools(workspace)] == ["Read", "Grep", "Glob"]

    async def test_read_tool_accepts_the_offload_reference(self, workspace: BaseWorkspace) -> None:
        read, _, _ = readback_tools(workspace)
        text = "\n".join(f"row {i}" for i in range(500))
        ref = await workspace.offload_tool_result(
            "s1", ToolResultBlock(id="c", name="t", output=text)
        )
        out = await read(ref, offset=10, limit=2)
        assert out.splitlines()[:2] == ["    11\trow 10", "    12\trow 11"]
        assert "offset=12" in out
        rel = "sessions/s1/tool_result-c.txt"
        assert await read(rel, offset=10, limit=2) == out

    async def test_grep_and_read_recover_a_compressed_detail(
        self, workspace: BaseWorkspace
    ) -> None:
        read, grep, glob = readback_tools(workspace, session_id="s1")
        await workspace.offload_context(
            "s1",
            [
                Msg("user", "deploy to cluster", "user"),
                Msg("assistant", "the deploy token is ZETA-9931", "assistant"),
            ],
        )
        listing = await glob()
        assert "context.jsonl" in listing
        hits = await grep(r"token is [A-Z]+-\d+")
        ref, line_no = hits.splitlines()[0].split(":")[:2]
        assert "ZETA-9931" in await read(ref, offset=int(line_no) - 1, limit=1)

    async def test_tools_return_errors_as_text(self, workspace: BaseWorkspace) -> None:
        read, grep, _ = readback_tools(workspace, grep_timeout=0.2)
        await workspace.offload_tool_result(
            "s1", ToolResultBlock(id="c", name="t", output="a" * 40)
        )
        assert (await read("../../etc/passwd")).startswith("Error:")
        assert (await read("sessions/zz/context.jsonl")).startswith("Error:")
        assert (await grep("(")).startswith("Error:")
        assert "did not finish" in await grep(r"(a|aa)+$b")

    async def test_session_confined_tools_refuse_other_sessions(
        self, workspace: BaseWorkspace
    ) -> None:
        other = await workspace.offload_tool_result(
            "s2", ToolResultBlock(id="c", name="t", output=SECRET)
        )
        read, grep, glob = readback_tools(workspace, session_id="s1")
        assert (await read(other)).startswith("Error:")
        assert SECRET not in await grep("TOP")
        assert "s2" not in await glob()
