"""Tool-result truncation: exact markers, the limit includes the marker, whole offload."""

from __future__ import annotations

from contextfold.context import ContextEvent, TruncationEvent
from contextfold.context._trim import TRUNCATION_MARKER, ToolResultTruncator, truncation_marker
from contextfold.message import ToolResultBlock

from .ctx_support import RecordingOffloader, call, make_engine, results, words

MARKER_NO_REF = (
    "<<<TRUNCATED>>>\n<system-reminder>The remaining content has been omitted for limited "
    "context.</system-reminder>"
)


def marker_with(ref: str) -> str:
    return (
        "<<<TRUNCATED>>>\n<system-reminder>The remaining content has been omitted for limited "
        f"context. You can refer to the file in '{ref}' for the truncated content if needed."
        "</system-reminder>"
    )


def test_markers_are_the_spec_texts() -> None:
    assert truncation_marker(None) == MARKER_NO_REF
    assert truncation_marker("/p/tool_result-1.txt") == marker_with("/p/tool_result-1.txt")


async def test_result_over_limit_ends_with_marker_without_offloader() -> None:
    engine, _ = make_engine(tool_result_limit=300)
    asst = call("bash")
    engine.append(asst)
    stored = await engine.add_tool_results(results(asst, words(3000)))
    text = stored.tool_results[0].text()
    assert text.endswith(MARKER_NO_REF)


async def test_result_over_limit_names_offloaded_file() -> None:
    offloader = RecordingOffloader()
    engine, _ = make_engine(tool_result_limit=300, offloader=offloader)
    asst = call("bash")
    engine.append(asst)
    stored = await engine.add_tool_results(results(asst, words(3000)))
    call_id = asst.tool_calls[0].id
    assert (
        stored.tool_results[0]
        .text()
        .endswith(marker_with(f"/ws/sessions/s1/tool_result-{call_id}.txt"))
    )


async def test_kept_part_with_marker_fits_the_limit() -> None:
    engine, _ = make_engine(tool_result_limit=300, offloader=RecordingOffloader())
    asst = call("bash")
    engine.append(asst)
    stored = await engine.add_tool_results(results(asst, words(3000)))
    assert engine.counter.count_text(stored.tool_results[0].text()) <= 300


async def test_offloader_receives_the_whole_original() -> None:
    offloader = RecordingOffloader()
    engine, _ = make_engine(tool_result_limit=300, offloader=offloader)
    asst = call("bash")
    engine.append(asst)
    original = words(3000)
    await engine.add_tool_results(results(asst, original))
    assert [r.text() for r in offloader.results] == [original]


async def test_head_tail_is_the_default_and_keeps_the_end() -> None:
    engine, _ = make_engine(tool_result_limit=300)
    asst = call("bash")
    engine.append(asst)
    output = "START " + words(3000) + " Traceback: ValueError at the END"
    stored = await engine.add_tool_results(results(asst, output))
    text = stored.tool_results[0].text()
    assert text.startswith("START")
    assert "ValueError at the END\n<<<TRUNCATED>>>" in text


async def test_head_mode_keeps_only_the_start() -> None:
    engine, _ = make_engine(tool_result_limit=300, truncation_keep="head")
    asst = call("bash")
    engine.append(asst)
    output = "START " + words(3000) + " the END"
    stored = await engine.add_tool_results(results(asst, output))
    text = stored.tool_results[0].text()
    assert text.startswith("START")
    assert "the END" not in text


async def test_result_within_limit_is_stored_unchanged() -> None:
    engine, _ = make_engine(tool_result_limit=300)
    asst = call("bash")
    engine.append(asst)
    msg = results(asst, "short")
    assert await engine.add_tool_results(msg) is msg


async def test_only_oversized_results_of_a_parallel_batch_are_cut() -> None:
    engine, _ = make_engine(tool_result_limit=300)
    asst = call("a", "b")
    engine.append(asst)
    stored = await engine.add_tool_results(results(asst, "small", words(3000)))
    first, second = stored.tool_results
    assert first.text() == "small"
    assert second.text().endswith(TRUNCATION_MARKER)


async def test_truncation_emits_an_event_with_token_counts() -> None:
    events: list[ContextEvent] = []
    offloader = RecordingOffloader()
    engine, _ = make_engine(tool_result_limit=300, offloader=offloader, events=events)
    asst = call("bash")
    engine.append(asst)
    await engine.add_tool_results(results(asst, words(3000)))
    (event,) = events
    assert isinstance(event, TruncationEvent)
    assert event.tokens_before > 1000 >= 300 >= event.tokens_after
    assert event.offload_ref is not None
    assert event.tool_call_id == asst.tool_calls[0].id


async def test_running_total_counts_the_stored_truncated_message() -> None:
    engine, _ = make_engine(tool_result_limit=300)
    asst = call("bash")
    engine.append(asst)
    stored = await engine.add_tool_results(results(asst, words(3000)))
    expected = engine.counter.count_message(asst) + engine.counter.count_message(stored)
    assert engine.context_tokens == expected


def test_truncator_falls_back_to_search_without_slicing_counter() -> None:
    class PlainCounter:
        name = "chars/4"
        exact = False

        def count_text(self, text: str) -> int:
            return (len(text) + 3) // 4

    truncator = ToolResultTruncator(PlainCounter(), limit=100, keep="head_tail")  # type: ignore[arg-type]
    cut = truncator.cut(ToolResultBlock(id="1", name="x", output="y" * 10_000), ref=None)
    assert PlainCounter().count_text(cut.text()) <= 100
    assert cut.text().endswith(TRUNCATION_MARKER)
