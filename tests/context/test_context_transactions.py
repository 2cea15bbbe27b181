"""Transactions, no compaction loops, escalation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contextfold.context import CompressionEvent, ContextEngine, ContextEvent, TruncationEvent
from contextfold.message import Msg
from contextfold.model import ScriptedReply, ScriptedRequest

from .ctx_support import RecordingOffloader, call, fill, make_engine, results, summary, user, words


async def test_cancellation_during_the_summary_leaves_state_unchanged() -> None:
    started = asyncio.Event()

    async def hang(request: ScriptedRequest) -> ScriptedReply:
        started.set()
        await asyncio.sleep(3600)
        return summary()

    engine, model = make_engine()
    model._function = hang
    await fill(engine, 16)
    context, tokens = engine.context, engine.context_tokens
    task = asyncio.create_task(engine.prepare("sys", []))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.context == context
    assert engine.context_tokens == tokens
    assert engine.summary is None
    assert engine.compressions == 0


async def test_messages_appended_during_the_summary_are_kept() -> None:
    late = user("arrived while summarizing")

    async def append_late(request: ScriptedRequest) -> ScriptedReply:
        engine.append(late)
        return summary()

    engine, model = make_engine()
    model._function = append_late
    await fill(engine, 16)
    model_input = await engine.prepare("sys", [])
    assert engine.context[-1] is late
    assert model_input.context[-1] is late or model_input.context[-2] is late
    assert engine.context_tokens == sum(engine.counter.count_message(m) for m in engine.context)


async def test_at_most_one_compression_per_step_with_huge_late_messages() -> None:
    events: list[ContextEvent] = []

    async def append_huge(request: ScriptedRequest) -> ScriptedReply:
        asst = call("cat")
        engine.append(asst)
        # Under tool_result_limit (50,000) but close to the whole window.
        await engine.add_tool_results(results(asst, words(5000)))
        return summary()

    engine, model = make_engine(events=events, offloader=RecordingOffloader())
    model._function = append_huge
    await fill(engine, 16)
    model_input = await engine.prepare("sys", [])
    compressions = [e for e in events if isinstance(e, CompressionEvent)]
    assert len(compressions) == 1
    assert len(model.requests) == 1
    assert model_input.usage.total - _hint_tokens(engine, model_input) <= 0.8 * 4000
    assert any(isinstance(e, TruncationEvent) for e in events)


async def test_escalation_drops_oldest_kept_messages_when_cutting_is_not_enough() -> None:
    events: list[ContextEvent] = []
    offloader = RecordingOffloader()

    async def append_many(request: ScriptedRequest) -> ScriptedReply:
        for i in range(12):
            engine.append(user(words(300, f"late{i}_")))
        return summary()

    engine, model = make_engine(events=events, offloader=offloader)
    model._function = append_many
    await fill(engine, 16)
    model_input = await engine.prepare("sys", [])
    assert len([e for e in events if isinstance(e, CompressionEvent)]) == 1
    assert model_input.usage.total - _hint_tokens(engine, model_input) <= 0.8 * 4000
    assert engine.summary is not None
    assert "removed without a summary to fit the context window" in engine.summary.text
    assert len(offloader.contexts) == 2


async def test_messages_appended_during_offload_are_kept() -> None:
    late = user("arrived while offloading")

    class Appending(RecordingOffloader):
        async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
            engine.append(late)
            return await super().offload_context(session_id, msgs)

    engine, _ = make_engine([summary()], offloader=Appending())
    await fill(engine, 16)
    await engine.prepare("sys", [])
    assert engine.context[-1] is late


async def test_offloader_failure_leaves_state_unchanged() -> None:
    class Broken(RecordingOffloader):
        async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
            raise OSError("disk full")

    engine, _ = make_engine([summary()], offloader=Broken())
    await fill(engine, 16)
    context = engine.context
    with pytest.raises(OSError, match="disk full"):
        await engine.prepare("sys", [])
    assert engine.context == context
    assert engine.summary is None


def _hint_tokens(engine: ContextEngine, model_input: object) -> int:
    context = model_input.context  # type: ignore[attr-defined]
    if context and context[-1] not in engine.context:
        return engine.counter.count_message(context[-1])
    return 0
