"""The contract's write-only groups: any workspace protocol at all, ``Offloader`` and
``DataOffloader`` (what holds without any way to read back)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Iterable
from pathlib import Path

import pytest
from hypothesis import given

from .._exceptions import ContextfoldError
from ..message import HintBlock, Msg, TextBlock, ThinkingBlock, ToolCallBlock, ToolResultBlock
from ..workspace import DataOffloader, Offloader
from ._contract_base import (
    HYPOTHESIS,
    PROTOCOLS,
    Fixtures,
    asyncio_tests,
    hostile_ids,
    image,
    protocol_methods,
    snapshot,
)

__all__ = ["DataOffloaderTests", "OffloaderTests", "ProtocolTests"]


async def _offload_or_refuse(work: Iterable[Awaitable[str]]) -> None:
    """Await each offload: it returns a reference, or refuses with a contextfold error."""
    for call in work:
        try:
            ref = await call
        except ContextfoldError:
            continue
        assert isinstance(ref, str)
        assert ref


@asyncio_tests
class ProtocolTests(Fixtures):
    async def test_implements_at_least_one_workspace_protocol(self, workspace: object) -> None:
        assert any(isinstance(workspace, p) for p in PROTOCOLS), (
            f"{type(workspace).__name__} implements none of "
            f"{', '.join(p.__name__ for p in PROTOCOLS)}: nothing of it can be used"
        )

    async def test_protocol_methods_are_coroutine_functions(self, workspace: object) -> None:
        not_async = [
            f"{p.__name__}.{name}"
            for p in PROTOCOLS
            if isinstance(workspace, p)
            for name in protocol_methods(p)
            if not inspect.iscoroutinefunction(getattr(workspace, name))
        ]
        assert not_async == [], "the agent awaits these; define them with `async def`"


@asyncio_tests
class OffloaderTests(Fixtures):
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

    @HYPOTHESIS
    @given(session_id=hostile_ids(), tool_id=hostile_ids())
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


@asyncio_tests
class DataOffloaderTests(Fixtures):
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
