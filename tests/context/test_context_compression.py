"""Automatic compression: trigger, split, structured summary, retries and fallback."""

from __future__ import annotations

import pytest

from contextfold._exceptions import CompressionError
from contextfold.context import CompressionEvent, ContextEvent, ModelSummarizer
from contextfold.context._summary import safe_format
from contextfold.message import HintBlock, ToolSpec, check_anthropic_valid, check_openai_valid
from contextfold.model import ScriptedModel

from .ctx_support import (
    SUMMARY,
    RecordingOffloader,
    call,
    fill,
    make_engine,
    results,
    summary,
    user,
    words,
)

BOOM = RuntimeError("summarizer down")


def summarizer_text(model: ScriptedModel, index: int = -1) -> str:
    """Everything the summarizer was sent in one request, as text."""
    return "\n".join(m.text for m in model.requests[index].messages)


async def test_no_compression_below_the_trigger() -> None:
    engine, model = make_engine([summary()])
    await fill(engine, 5)
    await engine.prepare("sys", [])
    assert engine.summary is None
    assert model.requests == []


async def test_compression_above_the_trigger_replaces_older_messages() -> None:
    engine, model = make_engine([summary()])
    await fill(engine, 16)
    before = len(engine.context)
    model_input = await engine.prepare("sys", [])
    assert engine.summary is not None
    assert model_input.summary is engine.summary
    assert len(engine.context) < before
    assert model_input.usage.total <= 0.8 * 4000
    assert model.requests[0].is_summary


async def test_trigger_counts_system_prompt_and_tool_schemas() -> None:
    engine, _ = make_engine([summary()])
    await fill(engine, 5)  # about half the window on its own
    await engine.prepare("sys", [])
    assert engine.summary is None
    tools = [ToolSpec(name="t", description=words(600))]
    await engine.prepare(words(800), tools)
    assert engine.summary is not None


async def test_recent_messages_within_reserve_are_kept() -> None:
    engine, _ = make_engine([summary()], reserve_ratio=0.25)
    await fill(engine, 16)  # 421 tokens per exchange: two fit in 1000, three do not
    last_four = engine.context[-4:]
    await engine.prepare("sys", [])
    assert engine.context == last_four
    assert engine.context_tokens <= 0.25 * 4000


async def test_split_never_separates_a_call_from_its_result() -> None:
    engine, _ = make_engine([summary()], reserve_ratio=0.15)
    await fill(engine, 16)
    model_input = await engine.prepare("sys", [])
    assert check_openai_valid(model_input.messages()) == []
    assert check_anthropic_valid(model_input.messages()) == []


async def test_summary_has_the_five_fields_rendered_with_the_template() -> None:
    engine, _ = make_engine([summary()])
    await fill(engine, 16)
    await engine.prepare("sys", [])
    assert engine.summary is not None
    text = engine.summary.text
    for value in SUMMARY.values():
        assert value in text
    assert text.index("# Task overview") < text.index("# Next steps")
    assert engine.summary.role == "user"


async def test_template_with_literal_braces_does_not_crash() -> None:
    template = 'Data {"k": [1, 2]} {task_overview} | {unknown} | {{x}} | {'
    engine, _ = make_engine([summary()], summary_template=template)
    await fill(engine, 16)
    await engine.prepare("sys", [])
    assert engine.summary is not None
    assert engine.summary.text.startswith('Data {"k": [1, 2]} Fix the failing parser. |  | {x} | {')


def test_safe_format_blanks_missing_fields_and_keeps_other_braces() -> None:
    assert safe_format("a {x} {y} {{z}} { }", {"x": "1"}) == "a 1  {z} { }"


async def test_custom_schema_reaches_the_summarizer_and_renders() -> None:
    schema = {
        "type": "object",
        "properties": {"gist": {"type": "string"}},
        "required": ["gist"],
    }
    engine, model = make_engine(
        [{"gist": "THE GIST"}], summary_schema=schema, summary_template="{gist}"
    )
    await fill(engine, 16)
    await engine.prepare("sys", [])
    assert model.requests[0].tools[0].parameters == schema
    assert engine.summary is not None
    assert engine.summary.text.startswith("THE GIST")


async def test_custom_prompt_gets_the_current_time() -> None:
    engine, model = make_engine([summary()], compression_prompt="Summarize; now is {current_time}.")
    await fill(engine, 16)
    await engine.prepare("sys", [])
    hints = [b for m in model.requests[0].messages for b in m.blocks() if isinstance(b, HintBlock)]
    assert hints[0].hint.startswith("Summarize; now is 20")
    assert "UTC." in hints[0].hint


async def test_summarizer_reads_tool_calls_and_results_as_text() -> None:
    engine, model = make_engine([summary()])
    await fill(engine, 16)
    await engine.prepare("sys", [])
    sent = summarizer_text(model)
    assert "(tool call call_" in sent
    assert "(tool result call_" in sent
    assert check_openai_valid(model.requests[0].messages) == []


async def test_second_compression_folds_the_first_summary_in() -> None:
    engine, model = make_engine(
        [summary(task_overview="FIRST OVERVIEW"), summary(task_overview="SECOND")],
        summary_update="rewrite",
    )
    await fill(engine, 16)
    await engine.prepare("sys", [])
    await fill(engine, 16)
    await engine.prepare("sys", [])
    assert "<previous-summary>" in summarizer_text(model, 1)
    assert "FIRST OVERVIEW" in summarizer_text(model, 1)
    assert engine.summary is not None
    assert "SECOND" in engine.summary.text
    assert "FIRST OVERVIEW" not in engine.summary.text


async def test_failed_attempts_are_retried() -> None:
    events: list[ContextEvent] = []
    engine, model = make_engine([BOOM, BOOM, summary()], summary_attempts=3, events=events)
    await fill(engine, 16)
    await engine.prepare("sys", [])
    (event,) = [e for e in events if isinstance(e, CompressionEvent)]
    assert event.method == "summary"
    assert event.attempts == 3
    assert len(model.requests) == 3


async def test_all_attempts_failing_falls_back_to_dropping_oldest() -> None:
    events: list[ContextEvent] = []
    engine, _ = make_engine([BOOM] * 3, events=events)
    await fill(engine, 16)
    first = engine.context[0]
    model_input = await engine.prepare("sys", [])
    assert engine.summary is not None
    assert "could not be generated (RuntimeError)" in engine.summary.text
    assert first not in engine.context
    assert model_input.usage.total <= 0.8 * 4000
    (event,) = [e for e in events if isinstance(e, CompressionEvent)]
    assert event.method == "truncation"
    assert event.error == "RuntimeError: summarizer down"


async def test_fallback_off_raises_and_leaves_the_context_exactly() -> None:
    engine, _ = make_engine([BOOM] * 3, compression_fallback_to_truncation=False)
    await fill(engine, 16)
    context, tokens = engine.context, engine.context_tokens
    with pytest.raises(CompressionError, match="enable compression_fallback_to_truncation"):
        await engine.prepare("sys", [])
    assert engine.summary is None
    assert engine.context == context
    assert all(a is b for a, b in zip(engine.context, context, strict=True))
    assert engine.context_tokens == tokens


async def test_fallback_off_keeps_an_existing_summary() -> None:
    engine, _ = make_engine([summary(), BOOM, BOOM, BOOM], compression_fallback_to_truncation=False)
    await fill(engine, 16)
    await engine.prepare("sys", [])
    old = engine.summary
    await fill(engine, 16)
    with pytest.raises(CompressionError):
        await engine.prepare("sys", [])
    assert engine.summary is old


async def test_without_offloader_compressed_messages_are_discarded() -> None:
    engine, _ = make_engine([summary()])
    await fill(engine, 16)
    first = engine.context[0]
    await engine.prepare("sys", [])
    assert engine.summary is not None
    assert first.id not in {m.id for m in engine.context}
    assert "saved in" not in engine.summary.text


async def test_with_offloader_compressed_messages_are_offloaded_and_referenced() -> None:
    offloader = RecordingOffloader()
    engine, _ = make_engine([summary()], offloader=offloader)
    await fill(engine, 16)
    before = engine.context
    await engine.prepare("sys", [])
    (batch,) = offloader.contexts
    assert batch == list(before[: len(batch)])
    assert engine.summary is not None
    assert "'/ws/sessions/s1/context.jsonl#1'" in engine.summary.text


async def test_artifact_ledger_keeps_what_the_summarizer_forgot() -> None:
    engine, _ = make_engine([summary(context_to_preserve="")])
    engine.append(user("Please fix /repo/src/parser.py"))
    asst = call("bash", text="I'll run the tests")
    asst.tool_calls[0].input["command"] = "pytest tests/test_parser.py -x"
    engine.append(asst)
    await engine.add_tool_results(
        results(asst, "Traceback (most recent call last):\nValueError: bad token '}'\n")
    )
    engine.append(call_text := user("see `tokenize()` in def tokenize(src)"))
    assert call_text in engine.context
    await fill(engine, 16)
    await engine.prepare("sys", [])
    assert engine.summary is not None
    text = engine.summary.text
    assert "/repo/src/parser.py" in text
    assert "pytest tests/test_parser.py -x" in text
    assert "ValueError: bad token '}'" in text
    assert "tokenize" in text


async def test_artifact_ledger_survives_the_fallback() -> None:
    engine, _ = make_engine([BOOM] * 3)
    engine.append(user("Please fix /repo/src/parser.py"))
    await fill(engine, 8)
    engine.append(current := user("Then run the whole suite."))
    await fill(engine, 8)
    await engine.prepare("sys", [])
    assert engine.summary is not None
    assert "/repo/src/parser.py" in engine.summary.text
    assert engine.context[0] is current  # the request in progress is never folded


async def test_compression_event_reports_tokens_and_what_left() -> None:
    events: list[ContextEvent] = []
    engine, _ = make_engine([summary()], offloader=RecordingOffloader(), events=events)
    await fill(engine, 16)
    n = len(engine.context)
    await engine.prepare("sys", [])
    (event,) = [e for e in events if isinstance(e, CompressionEvent)]
    assert event.trigger == "auto"
    assert event.tokens_before > 3200 >= event.tokens_after
    assert event.messages_removed + event.messages_kept == n
    assert event.duration_s >= 0
    assert event.offload_ref == "/ws/sessions/s1/context.jsonl#1"


async def test_usage_matches_what_is_sent_after_compression() -> None:
    tools = [ToolSpec(name="bash", description="run")]
    engine, _ = make_engine([summary()])
    await fill(engine, 16)
    model_input = await engine.prepare("sys", tools)
    assert model_input.usage.total == engine.counter.count_request(model_input.messages(), tools)


async def test_summarizer_input_is_trimmed_to_its_window_and_says_so() -> None:
    summarizer = ScriptedModel([summary()], context_size=1500)
    engine, model = make_engine([])
    engine.summarizer = ModelSummarizer(summarizer)
    await fill(engine, 16)
    await engine.prepare("sys", [])
    request = summarizer.requests[0]
    assert engine.counter.count_request(request.messages, request.tools) <= 1500 * 0.9
    assert "left out to fit the summarizer's window" in summarizer_text(summarizer)
    assert engine.summary is not None
    assert "did not fit the summarizer's window" in engine.summary.text
    assert model.requests == []


async def test_events_are_logged_as_json_when_info_is_enabled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The JSON is built only for an enabled logger; enabled, it is logged as before.
    engine, _ = make_engine([summary()])
    await fill(engine, 16)
    with caplog.at_level("INFO", logger="contextfold"):
        await engine.prepare("sys", [ToolSpec(name="bash", description="run")])
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("context event")]
    assert any('"type":"compression"' in m for m in logged), logged
    caplog.clear()
    with caplog.at_level("WARNING", logger="contextfold"):
        await fill(engine, 16)
        await engine.prepare("sys", [ToolSpec(name="bash", description="run")])
    assert not [r for r in caplog.records if r.getMessage().startswith("context event")]
