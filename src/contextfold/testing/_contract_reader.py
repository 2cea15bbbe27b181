"""The contract's ``WorkspaceReader`` groups: everything offloaded reads back by
reference (and, with ``DataOffloader``, data is stored once, by hash)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from .._exceptions import UnsafePathError, WorkspaceError
from ..message import Base64Source, DataBlock, Msg, TextBlock, ToolResultBlock, URLSource
from ..tool import readback_tools
from ..workspace import WorkspaceReader, WorkspaceSearch, encode_key, parse_ref
from ._contract_base import (
    HYPOTHESIS,
    OTHER_PNG,
    PNG,
    SECRET,
    DataReader,
    Fixtures,
    Reader,
    asyncio_tests,
    hostile_ids,
    image,
    mixed_messages,
    snapshot,
)

__all__ = ["DataReaderTests", "WorkspaceReaderTests"]


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


@asyncio_tests
class WorkspaceReaderTests(Fixtures):
    """``Offloader`` with ``WorkspaceReader``: everything offloaded reads back by reference.

    A context reference reads as one ``Msg`` JSON per line; references also have the
    canonical relative form ``sessions/<encode_key(session)>/context.jsonl`` and
    ``.../tool_result-<encode_key(call id)>[~suffix].txt`` (see ``parse_ref``).
    """

    # -- context log -----------------------------------------------------------------------

    async def test_offloaded_context_reads_back_by_its_reference(self, reader: Reader) -> None:
        ref = await reader.offload_context("s1", [Msg("user", "the secret is 42", "user")])
        lines = (await reader.read(ref)).splitlines()
        assert len(lines) == 1
        assert Msg.from_json(lines[0]).text == "the secret is 42"

    async def test_reference_has_canonical_relative_form(self, reader: Reader) -> None:
        ref = await reader.offload_context("s1", [Msg("user", "x", "user")])
        assert ref.endswith("sessions/s1/context.jsonl")
        assert await reader.read("sessions/s1/context.jsonl") == await reader.read(ref)

    async def test_appends_keep_call_and_message_order(self, reader: Reader) -> None:
        for i in range(0, 30, 3):
            ref = await reader.offload_context(
                "s1", [Msg("user", f"m{i + k}", "user") for k in range(3)]
            )
        assert await _texts(reader, ref) == [f"m{i}" for i in range(30)]

    async def test_messages_round_trip_whole(self, reader: Reader) -> None:
        msgs = mixed_messages()
        ref = await reader.offload_context("s1", msgs)
        assert await _messages(reader, ref, with_data=True) == msgs

    async def test_empty_offload_writes_nothing(self, reader: Reader) -> None:
        await reader.offload_context("s1", [])
        assert await reader.list_items("s1") == []
        assert "s1" not in await reader.list_sessions()

    async def test_unknown_reference_is_a_clear_error(self, reader: Reader) -> None:
        with pytest.raises(WorkspaceError):
            await reader.read("sessions/nobody/context.jsonl")

    # -- tool results ----------------------------------------------------------------------

    async def test_tool_result_is_stored_whole(self, reader: Reader) -> None:
        text = "\n".join(f"line {i}" for i in range(5000))
        ref = await reader.offload_tool_result(
            "s1", ToolResultBlock(id="call_1", name="bash", output=text)
        )
        assert ref.endswith("sessions/s1/tool_result-call_1.txt")
        assert await reader.read(ref) == text

    async def test_same_tool_id_twice_never_overwrites(self, reader: Reader) -> None:
        a = await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="A"))
        b = await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="B"))
        assert a != b
        assert (await reader.read(a), await reader.read(b)) == ("A", "B")

    # -- reading ---------------------------------------------------------------------------

    async def test_read_applies_line_offset_and_limit(self, reader: Reader) -> None:
        text = "\n".join(f"L{i}" for i in range(100))
        ref = await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output=text))
        assert await reader.read(ref, offset=10, limit=3) == "L10\nL11\nL12"
        assert await reader.read(ref, offset=98, limit=50) == "L98\nL99"

    async def test_listing_shows_sessions_items_and_sizes(self, reader: Reader) -> None:
        await reader.offload_context("s1", [Msg("user", "hello", "user")])
        await reader.offload_tool_result("s2", ToolResultBlock(id="c", name="t", output="12345"))
        assert await reader.list_sessions() == ["s1", "s2"]
        items = {(i.path, i.kind, i.session_id, i.size) for i in await reader.list_items()}
        ctx_size = len(await reader.read_bytes("sessions/s1/context.jsonl"))
        assert items == {
            ("sessions/s1/context.jsonl", "context", "s1", ctx_size),
            ("sessions/s2/tool_result-c.txt", "tool_result", "s2", 5),
        }

    async def test_listed_references_are_readable(self, reader: Reader) -> None:
        await reader.offload_context("s1", [Msg("user", [image()], "user")])
        await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="x"))
        for item in await reader.list_items("s1"):
            assert len(await reader.read_bytes(item.ref)) == item.size

    async def test_grep_finds_lines_with_context(self, reader: Reader) -> None:
        text = "alpha\nbeta\nneedle 7\ngamma\ndelta"
        ref = await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output=text))
        [match] = await reader.grep(r"needle \d", context=1)
        assert (match.ref, match.line_number, match.line) == (ref, 3, "needle 7")
        assert (match.before, match.after) == (("beta",), ("gamma",))

    async def test_grep_glob_filters_items(self, reader: Reader) -> None:
        await reader.offload_context("s1", [Msg("user", "needle in context", "user")])
        await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="needle"))
        found = await reader.grep("needle", glob="*.txt")
        assert [m.ref.endswith("tool_result-c.txt") for m in found] == [True]

    async def test_grep_is_confined_to_a_session(self, reader: Reader) -> None:
        await reader.offload_context("s1", [Msg("user", "needle one", "user")])
        await reader.offload_context("s2", [Msg("user", "needle two", "user")])
        found = await reader.grep("needle", session_id="s2")
        assert [Msg.from_json(m.line).text for m in found] == ["needle two"]

    async def test_grep_catastrophic_pattern_times_out(self, reader: Reader) -> None:
        await reader.offload_tool_result(
            "s1", ToolResultBlock(id="c", name="t", output="a" * 40 + "b")
        )
        with pytest.raises(TimeoutError):
            await reader.grep(r"(a|aa)+$", time_limit=0.2)

    async def test_grep_invalid_pattern_is_a_value_error(self, reader: Reader) -> None:
        with pytest.raises(ValueError):
            await reader.grep("(unclosed")

    # -- purge -----------------------------------------------------------------------------

    async def test_purge_removes_only_that_session(self, reader: Reader) -> None:
        await reader.offload_context("s1", [Msg("user", "one", "user")])
        await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="x"))
        ref = await reader.offload_context("s2", [Msg("user", "two", "user")])
        await reader.purge("s1")
        assert await reader.list_sessions() == ["s2"]
        assert await reader.list_items("s1") == []
        assert await _texts(reader, ref) == ["two"]

    async def test_purge_of_unknown_session_is_a_no_op(self, reader: Reader) -> None:
        await reader.offload_context("s1", [Msg("user", "one", "user")])
        await reader.purge("nobody")
        assert await reader.list_sessions() == ["s1"]

    # -- concurrency -----------------------------------------------------------------------

    async def test_concurrent_tasks_lose_nothing(self, reader: Reader) -> None:
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

    @HYPOTHESIS
    @given(session_id=hostile_ids(), tool_id=hostile_ids())
    async def test_hostile_ids_stay_inside_and_round_trip(
        self, reader: Reader, outside: Path | None, session_id: str, tool_id: str
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

    @HYPOTHESIS
    @given(ref=_hostile_refs())
    async def test_hostile_references_are_refused_or_not_found(
        self, reader: Reader, outside: Path | None, ref: str
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

    async def test_empty_session_id_is_refused(self, reader: Reader) -> None:
        with pytest.raises(UnsafePathError):
            await reader.offload_context("", [Msg("user", "x", "user")])

    async def test_traversal_reference_is_unsafe(self, reader: Reader) -> None:
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
        self, reader: Reader
    ) -> None:
        names = [t.__name__ for t in readback_tools(reader)]
        search = ["Search"] if isinstance(reader, WorkspaceSearch) else []
        assert names == ["Read", "Grep", "Glob", *search]

    async def test_read_tool_accepts_the_offload_reference(self, reader: Reader) -> None:
        read, *_ = readback_tools(reader)
        text = "\n".join(f"row {i}" for i in range(500))
        ref = await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output=text))
        out = await read(ref, offset=10, limit=2)
        assert out.splitlines()[:2] == ["    11\trow 10", "    12\trow 11"]
        assert "offset=12" in out
        rel = "sessions/s1/tool_result-c.txt"
        assert await read(rel, offset=10, limit=2) == out

    async def test_grep_and_read_recover_a_compressed_detail(self, reader: Reader) -> None:
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

    async def test_tools_return_errors_as_text(self, reader: Reader) -> None:
        read, grep, *_ = readback_tools(reader, grep_timeout=0.2)
        await reader.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="a" * 40))
        assert (await read("../../etc/passwd")).startswith("Error:")
        assert (await read("sessions/zz/context.jsonl")).startswith("Error:")
        assert (await grep("(")).startswith("Error:")
        assert (await grep(r"(a|aa)+$b")).startswith("Error:")

    async def test_session_confined_tools_refuse_other_sessions(self, reader: Reader) -> None:
        other = await reader.offload_tool_result(
            "s2", ToolResultBlock(id="c", name="t", output=SECRET)
        )
        read, grep, glob, *_ = readback_tools(reader, session_id="s1")
        assert (await read(other)).startswith("Error:")
        assert SECRET not in await grep("TOP")
        assert "s2" not in await glob()


@asyncio_tests
class DataReaderTests(Fixtures):
    """``Offloader``, ``DataOffloader`` and ``WorkspaceReader``: data stored once, by hash,
    outside the context log (``data/<sha256 of the bytes>.<ext>``)."""

    async def test_inline_data_leaves_the_context_line(self, data_reader: DataReader) -> None:
        ref = await data_reader.offload_context("s1", [Msg("user", [image()], "user")])
        line = await data_reader.read(ref)
        assert PNG not in line
        block = Msg.from_json(line).get_blocks(DataBlock)[0]
        assert isinstance(block.source, URLSource)
        assert parse_ref(block.source.url).kind == "data"
        stored = await data_reader.read_bytes(block.source.url)
        assert stored == base64.b64decode(PNG)

    async def test_identical_data_is_stored_once(self, data_reader: DataReader) -> None:
        await data_reader.offload_context("s1", [Msg("user", [image()], "user")])
        await data_reader.offload_context("s2", [Msg("user", [image(), image()], "user")])
        r1 = await data_reader.offload_data("s2", image())
        data = [i for i in await data_reader.list_items() if i.kind == "data"]
        assert len(data) == 1
        assert data[0].ref == r1
        assert data[0].size == len(base64.b64decode(PNG))

    async def test_data_name_is_hash_of_decoded_bytes(self, data_reader: DataReader) -> None:
        ref = await data_reader.offload_data("s1", image())
        assert ref.endswith(f"data/{hashlib.sha256(base64.b64decode(PNG)).hexdigest()}.png")
        assert await data_reader.read_bytes(ref) == base64.b64decode(PNG)

    async def test_session_lists_the_data_it_references(self, data_reader: DataReader) -> None:
        await data_reader.offload_data("s1", image())
        await data_reader.offload_data("s2", image(OTHER_PNG))
        kinds = [(i.kind, i.session_id) for i in await data_reader.list_items("s1")]
        assert kinds == [("data", "s1")]

    async def test_tool_result_data_becomes_a_reference(self, data_reader: DataReader) -> None:
        block = ToolResultBlock(id="c", name="t", output=[TextBlock(text="see"), image()])
        text = await data_reader.read(await data_reader.offload_tool_result("s1", block))
        first, second = text.splitlines()
        assert first == "see"
        ref = second.split(": ", 1)[1].rstrip("]")
        assert await data_reader.read_bytes(ref) == base64.b64decode(PNG)

    async def test_purge_keeps_data_shared_with_other_sessions(
        self, data_reader: DataReader
    ) -> None:
        await data_reader.offload_data("s1", image())
        ref = await data_reader.offload_data("s2", image())
        only_s1 = await data_reader.offload_data("s1", image(OTHER_PNG))
        await data_reader.purge("s1")
        assert await data_reader.read_bytes(ref) == base64.b64decode(PNG)
        with pytest.raises(WorkspaceError):
            await data_reader.read_bytes(only_s1)
