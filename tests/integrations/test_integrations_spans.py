"""Spans, not only events, in a framework's loop: ``contextfold.fold`` per call and
``contextfold.compress`` per compaction, with no span of the user's own open (issue 26:
LangChain without a span of the user's own gave 0 spans and the events were dropped)."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs contextfold[otel]")
pytest.importorskip("langchain_core", reason="needs contextfold[langchain]")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contextfold.context import ContextConfig, ContextEngine, ModelSummarizer
from contextfold.integrations import HistoryFolder
from contextfold.integrations.langchain import LangChainCodec
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock
from contextfold.model import ScriptedModel
from contextfold.workspace import MemoryWorkspace
from tests.golden.harness import SYSTEM, log_text

FIELDS = {
    "task_overview": "Check the services.",
    "current_state": "Logs read.",
    "important_discoveries": "Errors.",
    "next_steps": "More logs.",
    "context_to_preserve": "none",
}


async def test_each_call_and_each_compaction_is_a_span_with_usage_and_no_content() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    summaries = ScriptedModel(lambda request: FIELDS, context_size=16_000)
    workspace = MemoryWorkspace()
    await workspace.initialize()
    engine = ContextEngine(
        counter=summaries.token_counter,
        context_size=6000,
        summarizer=ModelSummarizer(summaries),
        config=ContextConfig(trigger_ratio=0.7, reserve_ratio=0.1, tool_result_limit=600),
        offloader=workspace,
        session_id="thread-1",
    )
    codec = LangChainCodec()
    folder: HistoryFolder[Any] = HistoryFolder(
        engine, codec, rewrites_history=True, tracer_provider=provider
    )
    history: list[Any] = codec.from_msg(Msg("user", "Check service 0 and report.", "user"))
    calls = 0
    for c in range(8):
        folded = await folder.fold(history, SYSTEM)
        calls += 1
        call = ToolCallBlock(id=f"t0-{c}", name="read_log", input={"service": 0, "call": c})
        result = ToolResultBlock(id=call.id, name="read_log", output=log_text(0, c))
        history = [
            *folded.history,
            *codec.from_msg(Msg("assistant", [call], "assistant")),
            *codec.from_msg(Msg("tool", [result], "user")),
        ]
    spans = exporter.get_finished_spans()
    folds = [s for s in spans if s.name == "contextfold.fold"]
    compressions = [s for s in spans if s.name == "contextfold.compress"]
    assert len(folds) == calls
    assert compressions, "a compaction happened and has a span"
    assert all(
        c.parent is not None and c.parent.span_id in {f.context.span_id for f in folds}
        for c in compressions
    )
    assert all((f.attributes or {}).get("contextfold.tokens.total") for f in folds)
    assert all((f.attributes or {}).get("gen_ai.conversation.id") == "thread-1" for f in folds)
    assert any(e.name == "contextfold.truncation" for f in folds for e in f.events)
    text = json.dumps([dict(s.attributes or {}) for s in spans], default=str)
    text += json.dumps([dict(e.attributes or {}) for s in spans for e in s.events], default=str)
    assert "svc0 call0 line" not in text
    assert "Check service 0" not in text


def test_a_background_compaction_phase_is_a_span_event() -> None:
    from contextfold.context import BackgroundCompactionEvent
    from contextfold.integrations.otel import record_event

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("step") as span:
        record_event(span, BackgroundCompactionEvent(phase="discarded", reason="stale"))
        record_event(span, BackgroundCompactionEvent(phase="applied", waited_s=0.25))
    (finished,) = exporter.get_finished_spans()
    found = [(e.name, dict(e.attributes or {})) for e in finished.events]
    assert [name for name, _ in found] == ["contextfold.background_compaction"] * 2
    assert found[0][1]["contextfold.background.reason"] == "stale"
    assert found[1][1]["contextfold.waited_s"] == 0.25
