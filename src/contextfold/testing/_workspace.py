"""WorkspaceContract: the behaviour every offloader and workspace shows, as a pytest battery.

Written against the protocols of :mod:`contextfold.workspace` only (``Offloader``,
``DataOffloader``, ``WorkspaceReader``, ``SessionStore``), so it runs on any class that
implements some of them, shipped or not. The tests are grouped by protocol; a group whose
protocol the instance lacks is skipped with the reason.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Iterable
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from .._exceptions import ContextfoldError, MissingDependencyError, UnsafePathError, WorkspaceError
from ..message import (
    Base64Source,
    DataBlock,
    HintBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    URLSource,
)
from ..tool import readback_tools
from ..workspace import (
    DataOffloader,
    Offloader,
    SearchHit,
    SessionStore,
    WorkspaceReader,
    WorkspaceSearch,
    encode_key,
    parse_ref,
)

try:
    import pytest
    import pytest_asyncio
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError(exc.name or "pytest", "testing") from exc

__all__ = ["WorkspaceContract"]

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4).decode()
OTHER_PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"other").decode()
SECRET = "TOPSECRET-4f1c"
"""Planted in the ``outside`` directory; no read may ever return it."""

_T = TypeVar("_T")
_PROTOCOLS = (Offloader, DataOffloader, WorkspaceReader, WorkspaceSearch, SessionStore)


class _Reader(Offloader, WorkspaceReader, Protocol):
    """An offloader whose offloads can be read back."""


class _DataReader(Offloader, DataOffloader, WorkspaceReader, Protocol):
    """A reader that also stores data blocks."""


class _ReaderStore(Offloader, WorkspaceReader, SessionStore, Protocol):
    """A reader that also keeps session state."""


class _Searcher(Offloader, WorkspaceReader, WorkspaceSearch, Protocol):
    """A reader that also ranks what it holds."""


def image(data: str = PNG, media_type: str = "image/png") -> DataBlock:
    """An inline (base64) data block."""
    return DataBlock(source=Base64Source(media_type=media_type, data=data))


def mixed_messages() -> list[Msg]:
    """Text, inline images, and a tool result with an image: everything a log must keep."""
    return [
        Msg("user", [TextBlock(text="look"), image()], "user"),
        Msg("assistant", "a picture of bytes", "assistant"),
        Msg(
            "user",
            [ToolResultBlock(id="c1", name="shot", output=[TextBlock(text="ok"), image()])],
            "user",
        ),
    ]


def snapshot(root: Path | None) -> dict[str, bytes]:
    """Every path under ``root`` with its bytes (``<dir>`` for directories)."""
    if root is None:
        return {}
    return {
        str(p): p.read_bytes() if p.is_file() and not p.is_symlink() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


def _methods(protocol: type) -> list[str]:
    return [n for n, v in vars(protocol).items() if not n.startswith("_") and callable(v)]


def _require(workspace: object, *protocols: type) -> None:
    """Skip the test unless ``workspace`` implements every protocol given."""
    missing = [p for p in protocols if not isinstance(workspace, p)]
    if missing:
        names = "; ".join(f"{p.__name__} ({', '.join(_methods(p))})" for p in missing)
        pytest.skip(f"{type(workspace).__name__} does not implement {names}")


async def _messages(reader: WorkspaceReader, ref: str, *, with_data: bool = False) -> list[Msg]:
    """The messages of a context reference (one ``Msg`` JSON per line); with ``with_data``,
    data moved out of the log is read back by its reference and put inline again."""
    msgs = [Msg.from_json(line) for line in (await reader.read(ref)).splitlines()]
    if with_data:
        msgs = [await _inline_data(reader, m) for m in msgs]
    return msgs


async def _inline_data(reader: WorkspaceReader, msg: Msg) -> Msg:
    async def block(b: Any) -> Any:
        if isinstance(b, DataBlock) and isinstance(b.source, URLSource):
            raw = await reader.read_bytes(b.source.url)
            source = Base64Source(media_type=b.media_type, data=base64.b64encode(raw).decode())
            return b.model_copy(update={"source": source})
        if isinstance(b, ToolResultBlock) and not isinstance(b.output, str):
            return b.model_copy(update={"output": [await block(x) for x in b.output]})
        return b

    if isinstance(msg.content, str):
        return msg
    return msg.model_copy(update={"content": [await block(b) for b in msg.content]})


async def _texts(reader: WorkspaceReader, ref: str) -> list[str]:
    return [m.text for m in await _messages(reader, ref)]


def _hostile_ids() -> st.SearchStrategy[str]:
    return st.one_of(
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
            st.sampled_from(["..", "/", ".", "a", "\x00", "é", "%", "~", "\\"]),
            min_size=1,
            max_size=40,
        ).map("".join),
    )


def _hostile_refs() -> st.SearchStrategy[str]:
    parts = [
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
    return st.one_of(
        st.lists(st.sampled_from(parts), min_size=1, max_size=8).map("/".join),
        st.text(max_size=60),
    )


_HYPOTHESIS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
)


async def _offload_or_refuse(work: Iterable[Awaitable[str]]) -> None:
    """Await each offload: it returns a reference, or refuses with a contextfold error."""
    for call in work:
        try:
            ref = await call
        except ContextfoldError:
            continue
        assert isinstance(ref, str)
        assert ref


def _asyncio_tests(cls: type[_T]) -> type[_T]:
    """Mark the class's async tests for pytest-asyncio, so the contract also runs in its
    strict mode (a class-wide mark would warn about the subclasses' sync tests)."""
    for name, test in vars(cls).items():
        inner = getattr(getattr(test, "hypothesis", None), "inner_test", test)
        if name.startswith("test_") and inspect.iscoroutinefunction(inner):
            pytest.mark.asyncio(test)
    return cls


class _Fixtures:
    """The fixtures a test class provides; only ``workspace`` must be overridden."""

    @pytest_asyncio.fixture
    async def workspace(self) -> AsyncIterator[object]:
        """A ready instance; override it (return it, or yield it and clean up after)."""
        raise NotImplementedError(
            f"{type(self).__name__} must override the `workspace` fixture: "
            "an async fixture that yields a ready offloader or workspace"
        )
        yield  # pragma: no cover

    @pytest.fixture
    def outside(self) -> Path | None:
        """A directory next to the store that the workspace must never write into.

        Filesystem backends return one: the contract compares it before and after hostile
        ids, and plants a ``secret.txt`` there that no hostile reference may read.
        ``None`` (the default) skips only these checks.
        """
        return None

    @pytest.fixture
    def offloader(self, workspace: object) -> Offloader:
        _require(workspace, Offloader)
        return cast(Offloader, workspace)

    @pytest.fixture
    def data_offloader(self, workspace: object) -> DataOffloader:
        _require(workspace, DataOffloader)
        return cast(DataOffloader, workspace)

    @pytest.fixture
    def reader(self, workspace: object) -> _Reader:
        _require(workspace, Offloader, WorkspaceReader)
        return cast(_Reader, workspace)

    @pytest.fixture
    def data_reader(self, workspace: object) -> _DataReader:
        _require(workspace, Offloader, DataOffloader, WorkspaceReader)
        return cast(_DataReader, workspace)

    @pytest.fixture
    def store(self, workspace: object) -> SessionStore:
        _require(workspace, SessionStore)
        return cast(SessionStore, workspace)

    @pytest.fixture
    def reader_store(self, workspace: object) -> _ReaderStore:
        _require(workspace, Offloader, WorkspaceReader, SessionStore)
        return cast(_ReaderStore, workspace)

    @pytest.fixture
    def searcher(self, workspace: object) -> _Searcher:
        _require(workspace, Offloader, WorkspaceReader, WorkspaceSearch)
        return cast(_Searcher, workspace)


@_asyncio_tests
class _ProtocolTests(_Fixtures):
    async def test_implements_at_least_one_workspace_protocol(self, workspace: object) -> None:
        assert any(isinstance(workspace, p) for p in _PROTOCOLS), (
            f"{type(workspace).__name__} implements none of "
            f"{', '.join(p.__name__ for p in _PROTOCOLS)}: nothing of it can be used"
        )

    async def test_protocol_methods_are_coroutine_functions(self, workspace: object) -> None:
        not_async = [
            f"{p.__name__}.{name}"
            for p in _PROTOCOLS
            if isinstance(workspace, p)
            for name in _methods(p)
            if not inspect.iscoroutinefunction(getattr(workspace, name))
        ]
        assert not_async == [], "the agent awaits these; define them with `async def`"


@_asyncio_tests
class _OffloaderTests(_Fixtures):
    """``Offloader``: what holds without any way to read back."""

    async def test_context_reference_is_a_non_empty_string(self, offloader: Offloader) -> None:
        ref = await offloader.offload_context("s1", [Msg("user", "hello", "user")])
        assert isinstance(ref, str)
        assert ref

    async def test_tool_result_reference_is_a_non_empty_string(self, offloader: Offloader) -> None:
        block = ToolResultBlock(id="call_1", name="bash", output="total 0")
        ref = await offloader.offload_tool_result("s1", block)
        assert isinstance(ref, str)
        assert ref

    async def test_distinct_tool_results_get_distinct_references(
        self, offloader: Offloader
    ) -> None:
        refs = [
            await offloader.offload_tool_result(
                session, ToolResultBlock(id=call_id, name="t", output=output)
            )
            for session, call_id, output in [
                ("s1", "a", "A"),
                ("s1", "b", "B"),
                ("s1", "a", "A again"),  # the same call id twice must not overwrite
                ("s2", "a", "A elsewhere"),
            ]
        ]
        assert len(set(refs)) == len(refs)

    async def test_repeated_offloads_of_one_session_all_succeed(self, offloader: Offloader) -> None:
        for i in range(20):
            ref = await offloader.offload_context("s1", [Msg("user", f"m{i}", "user")])
            tref = await offloader.offload_tool_result(
                "s1", ToolResultBlock(id=f"c{i}", name="t", output=f"r{i}")
            )
            assert isinstance(ref, str)
            assert isinstance(tref, str)

    async def test_empty_message_list_is_accepted(self, offloader: Offloader) -> None:
        assert isinstance(await offloader.offload_context("s1", []), str)

    async def test_messages_of_every_block_kind_are_accepted(self, offloader: Offloader) -> None:
        call = ToolCallBlock(id="c1", name="shot", input={"w": 2})
        msgs = [
            Msg("user", [TextBlock(text="look"), image()], "user"),
            Msg("assistant", [ThinkingBlock(thinking="hmm", signature="sig"), call], "assistant"),
            Msg(
                "tool",
                [ToolResultBlock(id="c1", name="shot", output=[TextBlock(text="ok"), image()])],
                "user",
            ),
            Msg("user", [HintBlock(hint="be brief")], "user"),
        ]
        assert isinstance(await offloader.offload_context("s1", msgs), str)

    async def test_tool_result_with_data_blocks_is_accepted(self, offloader: Offloader) -> None:
        block = ToolResultBlock(id="c", name="t", output=[TextBlock(text="see"), image()])
        assert isinstance(await offloader.offload_tool_result("s1", block), str)

    async def test_offloading_leaves_the_given_messages_unchanged(
        self, offloader: Offloader
    ) -> None:
        msgs = [Msg("user", [TextBlock(text="look"), image()], "user")]
        block = ToolResultBlock(id="c", name="t", output=[TextBlock(text="see"), image()])
        before = [m.model_copy(deep=True) for m in msgs], block.model_copy(deep=True)
        await offloader.offload_context("s1", msgs)
        await offloader.offload_tool_result("s1", block)
        assert (msgs, block) == before

    async def test_extra_keyword_arguments_are_accepted(self, offloader: Offloader) -> None:
        extra = {"reason": "compression", "contextfold_future_option": 1}
        assert await offloader.offload_context("s1", [Msg("user", "x", "user")], **extra)
        block = ToolResultBlock(id="c", name="t", output="x")
        assert await offloader.offload_tool_result("s1", block, **extra)

    async def test_concurrent_offloads_from_one_event_loop_all_succeed(
        self, offloader: Offloader
    ) -> None:
        async def one(i: int) -> tuple[str, str]:
            ref = await offloader.offload_context("s1", [Msg("user", f"t{i}", "user")])
            tref = await offloader.offload_tool_result(
                "s1", ToolResultBlock(id="same", name="t", output=f"r{i}")
            )
            return ref, tref

        refs = await asyncio.gather(*(one(i) for i in range(100)))
        assert all(isinstance(r, str) and r for pair in refs for r in pair)
        assert len({tref for _, tref in refs}) == 100

    @_HYPOTHESIS
    @given(session_id=_hostile_ids(), tool_id=_hostile_ids())
    async def test_hostile_ids_work_or_raise_a_contextfold_error(
        self, offloader: Offloader, outside: Path | None, session_id: str, tool_id: str
    ) -> None:
        before = snapshot(outside)
        await _offload_or_refuse(
            [
                offloader.offload_context(session_id, [Msg("user", "hostile", "user")]),
                offloader.offload_tool_result(
                    session_id, ToolResultBlock(id=tool_id, name="t", output="T")
                ),
            ]
        )
        assert snapshot(outside) == before

    async def test_empty_session_id_works_or_raises_a_contextfold_error(
        self, offloader: Offloader, outside: Path | None
    ) -> None:
        before = snapshot(outside)
        await _offload_or_refuse([offloader.offload_context("", [Msg("user", "x", "user")])])
        assert snapshot(outside) == before


@_asyncio_tests
class _DataOffloaderTests(_Fixtures):
    """``DataOffloader``: storing images, audio and files on their own."""

    @pytest.mark.parametrize(
        "media_type", ["image/png", "image/jpeg", "audio/wav", "application/pdf"]
    )
    async def test_data_reference_is_a_non_empty_string(
        self, data_offloader: DataOffloader, media_type: str
    ) -> None:
        ref = await data_offloader.offload_data("s1", image(media_type=media_type))
        assert isinstance(ref, str)
        assert ref

    async def test_same_data_twice_and_concurrently_succeeds(
        self, data_offloader: DataOffloader
    ) -> None:
        refs = await asyncio.gather(
            *(data_offloader.offload_data(f"s{i % 3}", image()) for i in range(30))
        )
        assert all(isinstance(r, str) and r for r in refs)


@_asyncio_tests
class _WorkspaceReaderTests(_Fixtures):
    """``Offloader`` with ``WorkspaceReader``: everything offloaded reads back by reference.

    A context reference reads as one ``Msg`` JSON per line; references also have the
    canonical relative form ``sessions/<encode_key(session)>/context.jsonl`` and
    ``.../tool_result-<encode_key(call id)>[~suffix].txt`` (see ``parse_ref``).
    """

    # -- context log -----------------------------------------------------------------------

    async def test_offloaded_context_reads_back_by_its_reference(self, reader: _Reader) -> None:
        ref = await reader.offload_context("s1", [Msg("user", "the secret is 42", "user")])
        lines = (await reader.read(ref)).splitlines()
        assert len(lines) == 1
        assert Msg.from_json(lines[0]).text == "the secret is 42"

    async def test_reference_has_canonical_relative_form(self, reader: _Reader) -> None:
        ref = await reader.offload_context("s1", [Msg("user", "x", "user")])
        assert ref.endswith("sessions/s1/context.jsonl")
        assert await reader.read("sessions/s1/context.jsonl") == await reader.read(ref)

    async def test_appends_keep_call_and_message_order(self, reader: _Reader) -> None:
        for i in range(0, 30, 3):
            ref = await reader.offload_context(
                "s1", [Msg("user", f"m{i + k}", "user") for k in range(3)]
            )
        assert await _texts(reader, ref) == [f"m{i}" for i in range(30)]

    async def test_messages_round_trip_whole(self, reader: _Reader) -> None:
        msgs = mixed_messages()
        ref = await reader.offload_context("s1", msgs)
        assert await _messages(reader, ref, with_data=True) == msgs

    async def test_empty_offload_writes_nothing(self, reader: _Reader) -> None:
        await reader.offload_context("s1", [])
        assert await reader.list_items("s1") == []
        assert "s1" not in await reader.list_sessions()

    async def test_unknown_reference_is_a_clear_error(self, reader: _Reader) -> None:
        with pytest.raises(WorkspaceError):
            await reader.read("sessions/nobody/context.jsonl")

    # -- tool results ----------------------------------------------------------------------

    async def test_tool_result_is_stored_whole(self, reader: _Reader) -> None:
        text = "\n".join(f"line {i}" for i in range(5000))
        ref = await reader.offload_tool_result(
            "s1", ToolResultBlock(id="call_1", name="bash", output=text)
        )
        assert ref.endswith("sessions/s1/tool_result-call_1.txt")
        assert await reader.read(ref) == text

    async def test_same_tool_id_twice_never_overwrites(self, reader: _Reader) -> None:
        a = await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="A"))
        b = await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="B"))
        assert a != b
        assert (await reader.read(a), await reader.read(b)) == ("A", "B")

    # -- reading ---------------------------------------------------------------------------

    async def test_read_applies_line_offset_and_limit(self, reader: _Reader) -> None:
        text = "\n".join(f"L{i}" for i in range(100))
        ref = await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output=text))
        assert await reader.read(ref, offset=10, limit=3) == "L10\nL11\nL12"
        assert await reader.read(ref, offset=98, limit=50) == "L98\nL99"

    async def test_listing_shows_sessions_items_and_sizes(self, reader: _Reader) -> None:
        await reader.offload_context("s1", [Msg("user", "hello", "user")])
        await reader.offload_tool_result("s2", ToolResultBlock(id="c", name="t", output="12345"))
        assert await reader.list_sessions() == ["s1", "s2"]
        items = {(i.path, i.kind, i.session_id, i.size) for i in await reader.list_items()}
        ctx_size = len(await reader.read_bytes("sessions/s1/context.jsonl"))
        assert items == {
            ("sessions/s1/context.jsonl", "context", "s1", ctx_size),
            ("sessions/s2/tool_result-c.txt", "tool_result", "s2", 5),
        }

    async def test_listed_references_are_readable(self, reader: _Reader) -> None:
        await reader.offload_context("s1", [Msg("user", [image()], "user")])
        await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="x"))
        for item in await reader.list_items("s1"):
            assert len(await reader.read_bytes(item.ref)) == item.size

    async def test_grep_finds_lines_with_context(self, reader: _Reader) -> None:
        text = "alpha\nbeta\nneedle 7\ngamma\ndelta"
        ref = await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output=text))
        [match] = await reader.grep(r"needle \d", context=1)
        assert (match.ref, match.line_number, match.line) == (ref, 3, "needle 7")
        assert (match.before, match.after) == (("beta",), ("gamma",))

    async def test_grep_glob_filters_items(self, reader: _Reader) -> None:
        await reader.offload_context("s1", [Msg("user", "needle in context", "user")])
        await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="needle"))
        found = await reader.grep("needle", glob="*.txt")
        assert [m.ref.endswith("tool_result-c.txt") for m in found] == [True]

    async def test_grep_is_confined_to_a_session(self, reader: _Reader) -> None:
        await reader.offload_context("s1", [Msg("user", "needle one", "user")])
        await reader.offload_context("s2", [Msg("user", "needle two", "user")])
        found = await reader.grep("needle", session_id="s2")
        assert [Msg.from_json(m.line).text for m in found] == ["needle two"]

    async def test_grep_catastrophic_pattern_times_out(self, reader: _Reader) -> None:
        await reader.offload_tool_result(
            "s1", ToolResultBlock(id="c", name="t", output="a" * 40 + "b")
        )
        with pytest.raises(TimeoutError):
            await reader.grep(r"(a|aa)+$", time_limit=0.2)

    async def test_grep_invalid_pattern_is_a_value_error(self, reader: _Reader) -> None:
        with pytest.raises(ValueError):
            await reader.grep("(unclosed")

    # -- purge -----------------------------------------------------------------------------

    async def test_purge_removes_only_that_session(self, reader: _Reader) -> None:
        await reader.offload_context("s1", [Msg("user", "one", "user")])
        await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="x"))
        ref = await reader.offload_context("s2", [Msg("user", "two", "user")])
        await reader.purge("s1")
        assert await reader.list_sessions() == ["s2"]
        assert await reader.list_items("s1") == []
        assert await _texts(reader, ref) == ["two"]

    async def test_purge_of_unknown_session_is_a_no_op(self, reader: _Reader) -> None:
        await reader.offload_context("s1", [Msg("user", "one", "user")])
        await reader.purge("nobody")
        assert await reader.list_sessions() == ["s1"]

    # -- concurrency -----------------------------------------------------------------------

    async def test_concurrent_tasks_lose_nothing(self, reader: _Reader) -> None:
        async def one(i: int) -> str:
            await reader.offload_context("s1", [Msg("user", f"t{i}-{'z' * i}", "user")])
            return await reader.offload_tool_result(
                "s1", ToolResultBlock(id="same", name="t", output=f"r{i}")
            )

        refs = await asyncio.gather(*(one(i) for i in range(200)))
        stored = await _texts(reader, "sessions/s1/context.jsonl")
        assert sorted(t.split("-")[0] for t in stored) == sorted(f"t{i}" for i in range(200))
        assert len(set(refs)) == 200
        assert sorted([await reader.read(r) for r in refs]) == sorted(f"r{i}" for i in range(200))

    # -- hostile ids and paths -------------------------------------------------------------

    @_HYPOTHESIS
    @given(session_id=_hostile_ids(), tool_id=_hostile_ids())
    async def test_hostile_ids_stay_inside_and_round_trip(
        self, reader: _Reader, outside: Path | None, session_id: str, tool_id: str
    ) -> None:
        before = snapshot(outside)
        ref = await reader.offload_context(session_id, [Msg("user", "hostile", "user")])
        tref = await reader.offload_tool_result(
            session_id, ToolResultBlock(id=tool_id, name="t", output="T")
        )
        skey = encode_key(session_id)
        assert ref.endswith(f"sessions/{skey}/context.jsonl")
        assert parse_ref("/".join(tref.split("/")[-3:])).session_key == skey
        assert (await reader.read(tref)) == "T"
        assert session_id in await reader.list_sessions()
        assert (await _texts(reader, ref))[-1] == "hostile"
        await reader.purge(session_id)
        assert session_id not in await reader.list_sessions()
        assert snapshot(outside) == before

    @_HYPOTHESIS
    @given(ref=_hostile_refs())
    async def test_hostile_references_are_refused_or_not_found(
        self, reader: _Reader, outside: Path | None, ref: str
    ) -> None:
        if outside is not None:
            (outside / "secret.txt").write_text(SECRET)
        await reader.offload_context("s", [Msg("user", "inside", "user")])
        try:
            text = await reader.read(ref)
        except WorkspaceError:  # UnsafePathError, or not found
            return
        assert SECRET not in text
        assert parse_ref(ref).rel == ref  # only canonical references can succeed

    async def test_empty_session_id_is_refused(self, reader: _Reader) -> None:
        with pytest.raises(UnsafePathError):
            await reader.offload_context("", [Msg("user", "x", "user")])

    async def test_traversal_reference_is_unsafe(self, reader: _Reader) -> None:
        for ref in (
            "../../etc/passwd",
            "/etc/passwd",
            "sessions/../../etc/passwd",
            "sessions/s1/../../../etc/passwd",
            "data/../../x",
            "sessions/s1/\x00",
        ):
            with pytest.raises(UnsafePathError):
                await reader.read(ref)

    # -- read-back tools ---------------------------------------------------------------------

    async def test_tools_are_named_read_grep_glob_and_search_for_searchers(
        self, reader: _Reader
    ) -> None:
        names = [t.__name__ for t in readback_tools(reader)]
        search = ["Search"] if isinstance(reader, WorkspaceSearch) else []
        assert names == ["Read", "Grep", "Glob", *search]

    async def test_read_tool_accepts_the_offload_reference(self, reader: _Reader) -> None:
        read, *_ = readback_tools(reader)
        text = "\n".join(f"row {i}" for i in range(500))
        ref = await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output=text))
        out = await read(ref, offset=10, limit=2)
        assert out.splitlines()[:2] == ["    11\trow 10", "    12\trow 11"]
        assert "offset=12" in out
        rel = "sessions/s1/tool_result-c.txt"
        assert await read(rel, offset=10, limit=2) == out

    async def test_grep_and_read_recover_a_compressed_detail(self, reader: _Reader) -> None:
        read, grep, glob, *_ = readback_tools(reader, session_id="s1")
        await reader.offload_context(
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

    async def test_tools_return_errors_as_text(self, reader: _Reader) -> None:
        read, grep, *_ = readback_tools(reader, grep_timeout=0.2)
        await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="a" * 40))
        assert (await read("../../etc/passwd")).startswith("Error:")
        assert (await read("sessions/zz/context.jsonl")).startswith("Error:")
        assert (await grep("(")).startswith("Error:")
        assert (await grep(r"(a|aa)+$b")).startswith("Error:")

    async def test_session_confined_tools_refuse_other_sessions(self, reader: _Reader) -> None:
        other = await reader.offload_tool_result(
            "s2", ToolResultBlock(id="c", name="t", output=SECRET)
        )
        read, grep, glob, *_ = readback_tools(reader, session_id="s1")
        assert (await read(other)).startswith("Error:")
        assert SECRET not in await grep("TOP")
        assert "s2" not in await glob()


@_asyncio_tests
class _DataReaderTests(_Fixtures):
    """``Offloader``, ``DataOffloader`` and ``WorkspaceReader``: data stored once, by hash,
    outside the context log (``data/<sha256 of the bytes>.<ext>``)."""

    async def test_inline_data_leaves_the_context_line(self, data_reader: _DataReader) -> None:
        ref = await data_reader.offload_context("s1", [Msg("user", [image()], "user")])
        line = await data_reader.read(ref)
        assert PNG not in line
        block = Msg.from_json(line).get_blocks(DataBlock)[0]
        assert isinstance(block.source, URLSource)
        assert parse_ref(block.source.url).kind == "data"
        stored = await data_reader.read_bytes(block.source.url)
        assert stored == base64.b64decode(PNG)

    async def test_identical_data_is_stored_once(self, data_reader: _DataReader) -> None:
        await data_reader.offload_context("s1", [Msg("user", [image()], "user")])
        await data_reader.offload_context("s2", [Msg("user", [image(), image()], "user")])
        r1 = await data_reader.offload_data("s2", image())
        data = [i for i in await data_reader.list_items() if i.kind == "data"]
        assert len(data) == 1
        assert data[0].ref == r1
        assert data[0].size == len(base64.b64decode(PNG))

    async def test_data_name_is_hash_of_decoded_bytes(self, data_reader: _DataReader) -> None:
        ref = await data_reader.offload_data("s1", image())
        assert ref.endswith(f"data/{hashlib.sha256(base64.b64decode(PNG)).hexdigest()}.png")
        assert await data_reader.read_bytes(ref) == base64.b64decode(PNG)

    async def test_session_lists_the_data_it_references(self, data_reader: _DataReader) -> None:
        await data_reader.offload_data("s1", image())
        await data_reader.offload_data("s2", image(OTHER_PNG))
        kinds = [(i.kind, i.session_id) for i in await data_reader.list_items("s1")]
        assert kinds == [("data", "s1")]

    async def test_tool_result_data_becomes_a_reference(self, data_reader: _DataReader) -> None:
        block = ToolResultBlock(id="c", name="t", output=[TextBlock(text="see"), image()])
        text = await data_reader.read(await data_reader.offload_tool_result("s1", block))
        first, second = text.splitlines()
        assert first == "see"
        ref = second.split(": ", 1)[1].rstrip("]")
        assert await data_reader.read_bytes(ref) == base64.b64decode(PNG)

    async def test_purge_keeps_data_shared_with_other_sessions(
        self, data_reader: _DataReader
    ) -> None:
        await data_reader.offload_data("s1", image())
        ref = await data_reader.offload_data("s2", image())
        only_s1 = await data_reader.offload_data("s1", image(OTHER_PNG))
        await data_reader.purge("s1")
        assert await data_reader.read_bytes(ref) == base64.b64decode(PNG)
        with pytest.raises(WorkspaceError):
            await data_reader.read_bytes(only_s1)


@_asyncio_tests
class _SessionStoreTests(_Fixtures):
    """``SessionStore``: the agent's saved state per session."""

    async def test_state_saves_and_loads(self, store: SessionStore) -> None:
        await store.save_state("s1", '{"summary": "v1"}')
        await store.save_state("s1", '{"summary": "v2"}')
        assert json.loads(await store.load_state("s1") or "") == {"summary": "v2"}

    async def test_missing_state_is_none(self, store: SessionStore) -> None:
        assert await store.load_state("never") is None

    async def test_sessions_keep_separate_states(self, store: SessionStore) -> None:
        await store.save_state("s1", '{"n": 1}')
        await store.save_state("s2", '{"n": 2}')
        assert (await store.load_state("s1"), await store.load_state("s2")) == (
            '{"n": 1}',
            '{"n": 2}',
        )

    async def test_large_unicode_state_round_trips_exactly(self, store: SessionStore) -> None:
        state = '{"text": "' + "é🙂\\n" * 50_000 + '"}'
        await store.save_state("s1", state)
        assert await store.load_state("s1") == state

    async def test_hostile_session_ids_keep_their_state_or_raise_a_contextfold_error(
        self, store: SessionStore
    ) -> None:
        for session_id in ("../x", "/abs", "a\x00b", "x" * 1000, "sessions/s1"):
            try:
                await store.save_state(session_id, f'{{"id": {len(session_id)}}}')
            except ContextfoldError:
                continue
            assert await store.load_state(session_id) == f'{{"id": {len(session_id)}}}'
        assert await store.load_state("x") is None  # "../x" must not land on "x"


@_asyncio_tests
class _ReaderStoreTests(_Fixtures):
    """A reader that is also a ``SessionStore``: purge covers the state."""

    async def test_purge_removes_the_session_state(self, reader_store: _ReaderStore) -> None:
        await reader_store.save_state("s1", "{}")
        await reader_store.save_state("s2", "{}")
        await reader_store.purge("s1")
        assert await reader_store.load_state("s1") is None
        assert await reader_store.load_state("s2") == "{}"
        assert "s1" not in await reader_store.list_sessions()


async def _opened(searcher: _Searcher, hit: SearchHit) -> str:
    """What ``Read`` shows for a hit: the message of a context line, or the tool result."""
    if hit.kind == "context":
        return Msg.from_json(await searcher.read(hit.ref, offset=hit.offset, limit=1)).text
    return await searcher.read(hit.ref)


@_asyncio_tests
class _SearchTests(_Fixtures):
    """``WorkspaceSearch``: ranked search over offloaded messages and tool results."""

    async def test_a_hit_opens_the_message_that_holds_the_words(self, searcher: _Searcher) -> None:
        await searcher.offload_context(
            "s1",
            [
                Msg("user", "deploy to the staging cluster", "user"),
                Msg("assistant", "the deploy token is ZETA-9931", "assistant"),
                Msg("user", "thanks, unrelated chatter now", "user"),
            ],
        )
        hits = await searcher.search("deploy token")
        assert (hits[0].kind, hits[0].offset, hits[0].session_id) == ("context", 1, "s1")
        assert hits[0].path == "sessions/s1/context.jsonl"
        assert await _opened(searcher, hits[0]) == "the deploy token is ZETA-9931"
        assert hits[0].ref in str(hits[0])

    async def test_a_tool_result_hit_names_its_call_id(self, searcher: _Searcher) -> None:
        text = "FAILED tests/test_lexer.py::test_unicode - AssertionError"
        ref = await searcher.offload_tool_result(
            "s1", ToolResultBlock(id="call_77", name="bash", output=text)
        )
        [hit] = await searcher.search("lexer unicode AssertionError")
        assert (hit.ref, hit.kind, hit.offset) == (ref, "tool_result", 0)
        assert "call_77" in hit.ref
        assert await _opened(searcher, hit) == text
        assert str(hit) == ref

    async def test_more_matching_words_rank_higher(self, searcher: _Searcher) -> None:
        await searcher.offload_context(
            "s1",
            [
                Msg("user", "the weather is nice", "user"),
                Msg("user", "a test of the lexer", "user"),
                Msg("user", "the failing test in the parser module", "user"),
                Msg("user", "lunch plans", "user"),
            ],
        )
        hits = await searcher.search("failing parser test")
        assert [h.offset for h in hits] == [2, 1]
        assert hits[0].score > hits[1].score

    @pytest.mark.parametrize(
        ("text", "query"),
        [
            ("raised in Foo.parse_args at line 3", "parse_args"),
            ("raised in Foo.parse_args at line 3", "args"),
            ("raised in Foo.parse_args at line 3", "Foo.parse_args"),
            ("edit src/app/models.py first", "models"),
            ("edit src/app/models.py first", "src/app/models.py"),
            ("call getUserName() here", "user name"),
            ("call getUserName() here", "getUserName"),
            ("HTTPServer refused", "server"),
            ("the snake_case_name holds", "case"),
        ],
    )
    async def test_code_names_and_paths_match_whole_and_in_parts(
        self, searcher: _Searcher, text: str, query: str
    ) -> None:
        await searcher.offload_context("s1", [Msg("user", "nothing to see", "user")])
        await searcher.offload_context("s1", [Msg("user", text, "user")])
        hits = await searcher.search(query)
        assert [h.offset for h in hits] == [1]

    async def test_snippet_marks_the_matched_words(self, searcher: _Searcher) -> None:
        await searcher.offload_tool_result(
            "s1",
            ToolResultBlock(id="c", name="t", output="x " * 500 + "the deploy token " + "y " * 500),
        )
        [hit] = await searcher.search("token")
        assert "**token**" in hit.snippet
        assert len(hit.snippet) < 400

    async def test_search_is_confined_to_a_session(self, searcher: _Searcher) -> None:
        await searcher.offload_context("s1", [Msg("user", "needle one", "user")])
        await searcher.offload_context("s2", [Msg("user", "needle two", "user")])
        await searcher.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="needle"))
        hits = await searcher.search("needle", session_id="s2")
        assert [(h.session_id, h.path) for h in hits] == [("s2", "sessions/s2/context.jsonl")]
        assert len(await searcher.search("needle")) == 3
        assert await searcher.search("needle", session_id="nobody") == []

    async def test_purged_content_is_never_found(self, searcher: _Searcher) -> None:
        await searcher.offload_context("s1", [Msg("user", "needle one", "user")])
        await searcher.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="needle"))
        await searcher.offload_context("s2", [Msg("user", "needle two", "user")])
        await searcher.purge("s1")
        assert [h.session_id for h in await searcher.search("needle")] == ["s2"]

    async def test_each_offload_is_found_at_its_line(self, searcher: _Searcher) -> None:
        for i in range(0, 60, 3):
            await searcher.offload_context(
                "s1", [Msg("user", f"entry marker{i + k}", "user") for k in range(3)]
            )
            if i % 15 == 0:  # searches between offloads: the index grows as they come
                hit = (await searcher.search(f"marker{i}"))[0]
                assert hit.offset == i
        for i in (0, 31, 59):  # the whole word ranks first; "marker" alone matches all
            hit = (await searcher.search(f"marker{i}"))[0]
            assert (hit.offset, await _opened(searcher, hit)) == (i, f"entry marker{i}")

    async def test_concurrent_offloads_are_found_at_their_lines(self, searcher: _Searcher) -> None:
        async def one(i: int) -> None:
            await searcher.offload_context(
                "s1",
                [Msg("user", f"first word{i}a", "user"), Msg("user", f"then word{i}b", "user")],
            )

        await asyncio.gather(*(one(i) for i in range(40)))
        for i in range(0, 40, 7):
            for part, text in (("a", f"first word{i}a"), ("b", f"then word{i}b")):
                hit = (await searcher.search(f"word{i}{part}"))[0]
                assert await _opened(searcher, hit) == text

    async def test_limit_caps_the_hits(self, searcher: _Searcher) -> None:
        await searcher.offload_context(
            "s1", [Msg("user", f"common {i}", "user") for i in range(30)]
        )
        assert len(await searcher.search("common", limit=4)) == 4
        assert len(await searcher.search("common")) == 10

    @pytest.mark.parametrize("query", ["x" * 1001, "", "   ", "(((", "the of and"])
    async def test_overlong_or_wordless_query_is_a_value_error(
        self, searcher: _Searcher, query: str
    ) -> None:
        with pytest.raises(ValueError):
            await searcher.search(query)

    async def test_search_past_its_time_limit_is_a_timeout_error(self, searcher: _Searcher) -> None:
        await searcher.offload_context("s1", [Msg("user", "needle", "user")])
        with pytest.raises(TimeoutError, match="did not finish"):
            await searcher.search("needle", time_limit=0.0)

    @_HYPOTHESIS
    @given(query=st.text(max_size=120))
    async def test_hostile_queries_answer_or_refuse(self, searcher: _Searcher, query: str) -> None:
        await searcher.offload_context("mine", [Msg("user", "my own words", "user")])
        await searcher.offload_context("theirs", [Msg("user", f"{SECRET} words", "user")])
        try:
            hits = await searcher.search(query, session_id="mine")
        except ValueError:
            return
        assert all(h.session_id == "mine" and SECRET not in h.snippet for h in hits)

    async def test_search_tool_shows_the_read_call_of_each_hit(self, searcher: _Searcher) -> None:
        ref = await searcher.offload_context(
            "s1", [Msg("user", "hello", "user"), Msg("assistant", "the port is 8443", "assistant")]
        )
        tools = {t.__name__: t for t in readback_tools(searcher, session_id="s1")}
        out = await tools["Search"]("port")
        assert out.splitlines()[0].startswith(f"1. {ref} (line 2) score ")
        assert "the **port** is 8443" in out
        assert f"Read(path={ref!r}, offset=1, limit=1)" in out
        read_out = await tools["Read"](ref, offset=1, limit=1)
        assert "8443" in read_out

    async def test_search_tool_is_confined_and_reports_errors_as_text(
        self, searcher: _Searcher
    ) -> None:
        await searcher.offload_context("s2", [Msg("user", f"{SECRET} needle", "user")])
        tools = {t.__name__: t for t in readback_tools(searcher, session_id="s1")}
        assert (await tools["Search"]("needle")).startswith("No offloaded items match")
        assert (await tools["Search"]("needle", session="s2")).startswith("Error:")
        assert (await tools["Search"]("(((")).startswith("Error:")
        assert (await tools["Search"]("x" * 2000)).startswith("Error:")
        free = {t.__name__: t for t in readback_tools(searcher)}
        assert SECRET in await free["Search"]("needle", session="s2")


class WorkspaceContract(
    _ProtocolTests,
    _OffloaderTests,
    _DataOffloaderTests,
    _WorkspaceReaderTests,
    _DataReaderTests,
    _SearchTests,
    _SessionStoreTests,
    _ReaderStoreTests,
):
    """Behaviour tests for an offloader or workspace; subclass it and override ``workspace``.

    ::

        from contextfold.testing import WorkspaceContract

        class TestMyOffloader(WorkspaceContract):
            @pytest.fixture
            async def workspace(self):
                yield MyOffloader(...)  # ready to use; clean up after the yield

    Groups, each skipped (with the reason) when the instance lacks its protocol:

    * ``Offloader``: references are non-empty strings, distinct tool results get distinct
      references, repeated, concurrent and keyword-carrying offloads succeed, the messages
      given are not changed, hostile ids work or raise a ``ContextfoldError``.
    * ``DataOffloader``: data of any media type, repeated and concurrent, succeeds.
    * ``Offloader`` + ``WorkspaceReader``: round trips by the returned reference and by the
      canonical form, order, listing, grep (regex, glob, session, time limit), purge,
      confinement (hostile ids and references), the ``Read``/``Grep``/``Glob`` tools.
    * ... + ``DataOffloader``: data moved out of context lines, stored once by hash.
    * ... + ``WorkspaceSearch``: hits open the message or tool result holding the words
      (at the right line, after concurrent offloads too), code names match in parts,
      ranking, snippets, session confinement, purge, bounded queries, the ``Search`` tool.
    * ``SessionStore``: save, load, separate sessions, exact round trip.

    Hostile ids must never write outside: a filesystem backend overrides ``outside`` to
    return a directory beside its store. The tests are async: with pytest-asyncio in strict
    mode, decorate the override with ``@pytest_asyncio.fixture``.
    """
