"""Manual and agent-initiated compression, overflow recovery and usage hints."""

from __future__ import annotations

import pytest

from contextfold._exceptions import CompressionError
from contextfold.context import ContextConfig, ContextEvent, UsageHintEvent
from contextfold.message import HintBlock, check_openai_valid

from .ctx_support import call, fill, make_engine, results, summary

BOOM = RuntimeError("summarizer down")


async def test_manual_compress_is_a_no_op_below_the_threshold() -> None:
    engine, model = make_engine([summary()])
    await fill(engine, 5)
    assert await engine.compress("sys", []) is None
    assert engine.summary is None
    assert model.requests == []


async def test_manual_compress_above_the_threshold_compresses() -> None:
    engine, _ = make_engine([summary()])
    await fill(engine, 16)
    event = await engine.compress("sys", [])
    assert event is not None
    assert event.trigger == "manual"
    assert engine.summary is not None


async def test_force_compresses_below_the_threshold() -> None:
    engine, _ = make_engine([summary()])
    await fill(engine, 3)
    event = await engine.compress("sys", [], force=True)
    assert event is not None
    assert engine.summary is not None


async def test_one_off_config_overrides_the_engine_config() -> None:
    engine, _ = make_engine([summary()])
    await fill(engine, 5)  # about half the window: below 0.8
    override = ContextConfig(trigger_ratio=0.4, reserve_ratio=0.1)
    event = await engine.compress("sys", [], config=override)
    assert event is not None
    assert engine.config.trigger_ratio == 0.8
    # What stays is the newest exchange (a call and its result), which is always kept.
    assert [m.role for m in engine.context] == ["assistant", "user"]
    assert engine.context_tokens <= 0.1 * 4000 + 40


async def test_instructions_steer_the_summarizer() -> None:
    engine, model = make_engine([summary()])
    await fill(engine, 16)
    hint = HintBlock(hint="Keep every file path and API signature.")
    await engine.compress("sys", [], instructions=hint)
    sent = [b for m in model.requests[0].messages for b in m.blocks() if isinstance(b, HintBlock)]
    assert hint in sent


async def test_tool_threshold_is_the_hint_ratio() -> None:
    engine, _ = make_engine([summary()])
    await fill(engine, 7)  # 0.6 < usage < 0.8
    usage = engine.usage("sys", [])
    assert 0.6 < usage.ratio < 0.8
    event = await engine.compress(
        "sys", [], threshold_ratio=engine.config.hint_ratio, trigger="tool"
    )
    assert event is not None
    assert event.trigger == "tool"


async def test_tool_below_the_hint_ratio_changes_nothing() -> None:
    engine, model = make_engine([summary()])
    await fill(engine, 4)
    result = await engine.compress(
        "sys", [], threshold_ratio=engine.config.hint_ratio, trigger="tool"
    )
    assert result is None
    assert model.requests == []


async def test_tool_failure_raises_and_never_falls_back() -> None:
    engine, _ = make_engine([BOOM] * 3, compression_fallback_to_truncation=True)
    await fill(engine, 16)
    context = engine.context
    with pytest.raises(CompressionError):
        await engine.compress("sys", [], trigger="tool")
    assert engine.context == context
    assert engine.summary is None


async def test_overflow_recovery_forces_one_compression() -> None:
    engine, _ = make_engine([summary()])
    await fill(engine, 4)  # our count says it fits; the provider disagreed
    event = await engine.compress("sys", [], force=True, trigger="overflow")
    assert event is not None
    assert event.trigger == "overflow"
    model_input = await engine.prepare("sys", [])
    assert model_input.summary is not None
    assert engine.compressions == 1


async def test_overflow_recovery_with_nothing_to_compress_returns_none() -> None:
    engine, model = make_engine([summary()])
    assert await engine.compress("sys", [], force=True, trigger="overflow") is None
    assert model.requests == []


async def test_usage_hint_is_added_past_the_hint_ratio_but_not_stored() -> None:
    events: list[ContextEvent] = []
    engine, _ = make_engine(events=events)
    await fill(engine, 7)
    model_input = await engine.prepare("sys", [])
    hint = model_input.context[-1]
    assert hint.role == "user"
    assert isinstance(hint.content, list)
    assert isinstance(hint.content[0], HintBlock)
    assert "Context usage:" in hint.text
    assert hint not in engine.context
    assert model_input.context[:-1] == engine.context
    assert any(isinstance(e, UsageHintEvent) for e in events)


async def test_usage_hint_is_counted_in_usage() -> None:
    engine, _ = make_engine()
    await fill(engine, 7)
    model_input = await engine.prepare("sys", [])
    assert model_input.usage.total == engine.counter.count_request(model_input.messages(), [])


async def test_usage_hint_mentions_the_tool_only_when_enabled() -> None:
    off, _ = make_engine()
    on, _ = make_engine(compression_tool_enabled=True)
    await fill(off, 7)
    await fill(on, 7)
    assert "CompressContext" not in (await off.prepare("sys", [])).context[-1].text
    assert "CompressContext" in (await on.prepare("sys", [])).context[-1].text


async def test_no_usage_hint_while_a_task_is_in_progress() -> None:
    engine, _ = make_engine()
    await fill(engine, 7)
    model_input = await engine.prepare("sys", [], task_in_progress=True)
    assert model_input.context == engine.context


async def test_no_usage_hint_below_the_hint_ratio() -> None:
    engine, _ = make_engine()
    await fill(engine, 3)
    model_input = await engine.prepare("sys", [])
    assert model_input.context == engine.context


async def test_usage_hint_is_checked_at_every_step() -> None:
    engine, _ = make_engine()
    await fill(engine, 3)
    first = await engine.prepare("sys", [])
    await fill(engine, 4)
    second = await engine.prepare("sys", [])
    assert first.context == engine.context[: len(first.context)]
    assert "Context usage:" in second.context[-1].text


async def test_tool_compression_keeps_its_own_pending_call() -> None:
    engine, _ = make_engine([summary()])
    await fill(engine, 16)
    pending = call("CompressContext")
    engine.append(pending)  # the call being executed right now has no result yet
    assert await engine.compress("sys", [], trigger="tool", threshold_ratio=0.6) is not None
    assert engine.context[-1] is pending
    await engine.add_tool_results(results(pending, "compressed"))
    model_input = await engine.prepare("sys", [])
    assert check_openai_valid(model_input.messages()) == []
