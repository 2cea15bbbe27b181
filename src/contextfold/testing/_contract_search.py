"""The contract's ``WorkspaceSearch`` group: ranked search over offloaded messages and
tool results."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ..message import Msg, ToolResultBlock
from ..tool import readback_tools
from ..workspace import SearchHit
from ._contract_base import HYPOTHESIS, SECRET, Fixtures, Searcher, asyncio_tests

__all__ = ["SearchTests"]


async def _opened(searcher: Searcher, hit: SearchHit) -> str:
    """What ``Read`` shows for a hit: the message of a context line, or the tool result."""
    if hit.kind == "context":
        return Msg.from_json(await searcher.read(hit.ref, offset=hit.offset, limit=1)).text
    return await searcher.read(hit.ref)


@asyncio_tests
class SearchTests(Fixtures):
    """``WorkspaceSearch``: ranked search over offloaded messages and tool results."""

    async def test_a_hit_opens_the_message_that_holds_the_words(self, searcher: Searcher) -> None:
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

    async def test_a_tool_result_hit_names_its_call_id(self, searcher: Searcher) -> None:
        text = "FAILED tests/test_lexer.py::test_unicode - AssertionError"
        ref = await searcher.offload_tool_result(
            "s1", ToolResultBlock(id="call_77", name="bash", output=text)
        )
        [hit] = await searcher.search("lexer unicode AssertionError")
        assert (hit.ref, hit.kind, hit.offset) == (ref, "tool_result", 0)
        assert "call_77" in hit.ref
        assert await _opened(searcher, hit) == text
        assert str(hit) == ref

    async def test_more_matching_words_rank_higher(self, searcher: Searcher) -> None:
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
        self, searcher: Searcher, text: str, query: str
    ) -> None:
        await searcher.offload_context("s1", [Msg("user", "nothing to see", "user")])
        await searcher.offload_context("s1", [Msg("user", text, "user")])
        hits = await searcher.search(query)
        assert [h.offset for h in hits] == [1]

    async def test_snippet_marks_the_matched_words(self, searcher: Searcher) -> None:
        await searcher.offload_tool_result(
            "s1",
            ToolResultBlock(id="c", name="t", output="x " * 500 + "the deploy token " + "y " * 500),
        )
        [hit] = await searcher.search("token")
        assert "**token**" in hit.snippet
        assert len(hit.snippet) < 400

    async def test_search_is_confined_to_a_session(self, searcher: Searcher) -> None:
        await searcher.offload_context("s1", [Msg("user", "needle one", "user")])
        await searcher.offload_context("s2", [Msg("user", "needle two", "user")])
        await searcher.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="needle"))
        hits = await searcher.search("needle", session_id="s2")
        assert [(h.session_id, h.path) for h in hits] == [("s2", "sessions/s2/context.jsonl")]
        assert len(await searcher.search("needle")) == 3
        assert await searcher.search("needle", session_id="nobody") == []

    async def test_purged_content_is_never_found(self, searcher: Searcher) -> None:
        await searcher.offload_context("s1", [Msg("user", "needle one", "user")])
        await searcher.offload_tool_result("s1", ToolResultBlock(id="c", name="t", output="needle"))
        await searcher.offload_context("s2", [Msg("user", "needle two", "user")])
        await searcher.purge("s1")
        assert [h.session_id for h in await searcher.search("needle")] == ["s2"]

    async def test_each_offload_is_found_at_its_line(self, searcher: Searcher) -> None:
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

    async def test_concurrent_offloads_are_found_at_their_lines(self, searcher: Searcher) -> None:
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

    async def test_limit_caps_the_hits(self, searcher: Searcher) -> None:
        await searcher.offload_context(
            "s1", [Msg("user", f"common {i}", "user") for i in range(30)]
        )
        assert len(await searcher.search("common", limit=4)) == 4
        assert len(await searcher.search("common")) == 10

    @pytest.mark.parametrize("query", ["x" * 1001, "", "   ", "(((", "the of and"])
    async def test_overlong_or_wordless_query_is_a_value_error(
        self, searcher: Searcher, query: str
    ) -> None:
        with pytest.raises(ValueError):
            await searcher.search(query)

    async def test_search_past_its_time_limit_is_a_timeout_error(self, searcher: Searcher) -> None:
        await searcher.offload_context("s1", [Msg("user", "needle", "user")])
        with pytest.raises(TimeoutError, match="did not finish"):
            await searcher.search("needle", time_limit=0.0)

    @HYPOTHESIS
    @given(query=st.text(max_size=120))
    async def test_hostile_queries_answer_or_refuse(self, searcher: Searcher, query: str) -> None:
        await searcher.offload_context("mine", [Msg("user", "my own words", "user")])
        await searcher.offload_context("theirs", [Msg("user", f"{SECRET} words", "user")])
        try:
            hits = await searcher.search(query, session_id="mine")
        except ValueError:
            return
        assert all(h.session_id == "mine" and SECRET not in h.snippet for h in hits)

    async def test_search_tool_shows_the_read_call_of_each_hit(self, searcher: Searcher) -> None:
        await searcher.offload_context(
            "s1", [Msg("user", "hello", "user"), Msg("assistant", "the port is 8443", "assistant")]
        )
        ref = "sessions/s1/context.jsonl"  # the relative reference, never a host path
        tools = {t.__name__: t for t in readback_tools(searcher, session_id="s1")}
        out = await tools["Search"]("port")
        assert out.splitlines()[0].startswith(f"1. {ref} (line 2) score ")
        assert "the **port** is 8443" in out
        assert f"Read(path={ref!r}, offset=1, limit=1)" in out
        read_out = await tools["Read"](ref, offset=1, limit=1)
        assert "8443" in read_out

    async def test_search_tool_is_confined_and_reports_errors_as_text(
        self, searcher: Searcher
    ) -> None:
        await searcher.offload_context("s2", [Msg("user", f"{SECRET} needle", "user")])
        tools = {t.__name__: t for t in readback_tools(searcher, session_id="s1")}
        assert (await tools["Search"]("needle")).startswith("No offloaded items match")
        assert (await tools["Search"]("needle", session="s2")).startswith("Error:")
        assert (await tools["Search"]("(((")).startswith("Error:")
        assert (await tools["Search"]("x" * 2000)).startswith("Error:")
        free = {t.__name__: t for t in readback_tools(searcher)}
        assert SECRET in await free["Search"]("needle", session="s2")
