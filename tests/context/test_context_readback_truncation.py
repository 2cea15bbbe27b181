"""Read-back results over the limit: cut with the no-path marker, never offloaded again."""

from __future__ import annotations

from contextfold.context import (
    READBACK_HINT,
    TRUNCATION_MARKER,
    ContextEvent,
    TruncationEvent,
)
from contextfold.context._trim import ToolResultTruncator, escalate
from contextfold.message import READBACK_KEY, Msg, ToolResultBlock

from .ctx_support import RecordingOffloader, call, make_engine, words


def readback_results(assistant: Msg, output: str, *, marked: bool = True) -> Msg:
    (c,) = assistant.tool_calls
    metadata = {READBACK_KEY: True} if marked else {}
    block = ToolResultBlock(id=c.id, name=c.name, output=output, metadata=metadata)
    return Msg("tool", [block], "user")


async def test_marked_result_over_limit_ends_with_hint_then_no_path_marker() -> None:
    engine, _ = make_engine(tool_result_limit=300, offloader=RecordingOffloader())
    asst = call("Read")
    engine.append(asst)
    stored = await engine.add_tool_results(readback_results(asst, words(3000)))
    assert stored.tool_results[0].text().endswith(f"\n{READBACK_HINT}\n{TRUNCATION_MARKER}")


async def test_marked_result_over_limit_is_not_offloaded() -> None:
    offloader = RecordingOffloader()
    engine, _ = make_engine(tool_result_limit=300, offloader=offloader)
    asst = call("Read")
    engine.append(asst)
    await engine.add_tool_results(readback_results(asst, words(3000)))
    assert offloader.results == []


async def test_marked_cut_result_fits_the_limit() -> None:
    engine, _ = make_engine(tool_result_limit=300, offloader=RecordingOffloader())
    asst = call("Grep")
    engine.append(asst)
    stored = await engine.add_tool_results(readback_results(asst, words(3000)))
    assert engine.counter.count_text(stored.tool_results[0].text()) <= 300


async def test_marked_truncation_event_has_no_offload_ref() -> None:
    events: list[ContextEvent] = []
    engine, _ = make_engine(tool_result_limit=300, offloader=RecordingOffloader(), events=events)
    asst = call("Read")
    engine.append(asst)
    await engine.add_tool_results(readback_results(asst, words(3000)))
    (event,) = events
    assert isinstance(event, TruncationEvent)
    assert event.offload_ref is None


async def test_unmarked_result_named_read_is_still_offloaded() -> None:
    offloader = RecordingOffloader()
    engine, _ = make_engine(tool_result_limit=300, offloader=offloader)
    asst = call("Read")
    engine.append(asst)
    stored = await engine.add_tool_results(readback_results(asst, words(3000), marked=False))
    assert [r.id for r in offloader.results] == [asst.tool_calls[0].id]
    assert READBACK_HINT not in stored.tool_results[0].text()


async def test_marked_result_within_limit_is_unchanged() -> None:
    engine, _ = make_engine(tool_result_limit=300, offloader=RecordingOffloader())
    asst = call("Read")
    engine.append(asst)
    msg = readback_results(asst, words(100))
    stored = await engine.add_tool_results(msg)
    assert stored.tool_results[0].text() == msg.tool_results[0].text()


async def test_marked_result_cut_by_escalation_is_not_offloaded() -> None:
    offloader = RecordingOffloader()
    engine, _ = make_engine(tool_result_limit=3000, offloader=offloader)
    asst = call("Read")
    big = readback_results(asst, words(2000))
    escalation = await escalate(
        [asst, big],
        summary_tokens=engine.counter.count_message(Msg("user", "summary", "user")),
        fixed=0,
        target=600,
        counter=engine.counter,
        truncator=ToolResultTruncator(engine.counter, limit=3000, keep="head_tail"),
        offload_result=engine._offload.result,
        offload_context=engine._offload.context,
    )
    (event,) = escalation.truncations
    assert event.offload_ref is None
    assert offloader.results == []
    assert escalation.context[1].tool_results[0].text().endswith(TRUNCATION_MARKER)
