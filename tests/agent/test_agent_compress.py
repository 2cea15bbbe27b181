from typing import Any

from contextfold._exceptions import CompressionError
from contextfold.context import CompressionEvent, ContextConfig
from contextfold.message import HintBlock
from contextfold.model import ScriptedModel, tool_reply
from contextfold.tool import Toolkit

from .agent_support import Calls, assert_valid, make_agent


def event(trigger: Any) -> CompressionEvent:
    return CompressionEvent(
        trigger=trigger,
        method="summary",
        tokens_before=900,
        tokens_after=200,
        messages_removed=6,
        messages_kept=2,
        duration_s=0.0,
    )


async def test_compress_context_uses_agent_config_by_default() -> None:
    config = ContextConfig(trigger_ratio=0.7)
    agent = make_agent(ScriptedModel(), context_config=config)
    calls = Calls(agent)
    assert await agent.compress_context() is None
    assert calls.compress == [
        {
            "config": config,
            "instructions": None,
            "force": False,
            "threshold_ratio": None,
            "trigger": "manual",
        }
    ]


async def test_compress_context_passes_override_instructions_and_force() -> None:
    agent = make_agent(ScriptedModel())
    calls = Calls(agent)
    override = ContextConfig(trigger_ratio=0.5, reserve_ratio=0.1)
    await agent.compress_context(
        context_config=override, instructions="keep every path", force=True
    )
    (call,) = calls.compress
    assert call["config"] is override
    assert call["instructions"] == HintBlock(hint="keep every path")
    assert call["force"] is True


async def test_compress_tool_is_offered_only_when_enabled() -> None:
    off, on = ScriptedModel(["ok"]), ScriptedModel(["ok"])
    await make_agent(off).reply("hi")
    await make_agent(on, context_config=ContextConfig(compression_tool_enabled=True)).reply("hi")
    assert "CompressContext" not in off.requests[0].tool_names
    assert on.requests[0].tool_names == ["Read", "Grep", "Glob", "Search", "CompressContext"]


async def test_compress_tool_compresses_at_the_hint_threshold() -> None:
    config = ContextConfig(
        trigger_ratio=0.8, context_buffer_ratio=0.3, compression_tool_enabled=True
    )
    model = ScriptedModel(
        [tool_reply(("CompressContext", {"instructions": "keep ids"})), "continuing"]
    )
    agent = make_agent(model, context_config=config)
    seen: list[dict[str, Any]] = []

    async def compress(system_prompt: str, tools: Any, **kw: Any) -> CompressionEvent:
        seen.append(kw)
        return event("tool")

    agent.engine.compress = compress  # type: ignore[method-assign]
    await agent.reply("work")
    (call,) = seen
    assert call["trigger"] == "tool"
    assert call["threshold_ratio"] == config.hint_ratio
    assert call["instructions"] == HintBlock(hint="keep ids")
    result = model.requests[1].messages[-1].tool_results[0]
    assert not result.is_error
    assert "Compressed 6 earlier messages" in result.text()
    assert_valid(model)


async def test_compress_tool_failure_is_an_error_result_and_context_is_kept() -> None:
    config = ContextConfig(compression_tool_enabled=True)
    model = ScriptedModel([tool_reply(("CompressContext", {})), "carry on"])
    agent = make_agent(model, context_config=config)

    async def compress(system_prompt: str, tools: Any, **kw: Any) -> CompressionEvent:
        raise CompressionError("summary failed 3 times")

    agent.engine.compress = compress  # type: ignore[method-assign]
    reply = await agent.reply("work")
    result = model.requests[1].messages[-1].tool_results[0]
    assert result.is_error
    assert "summary failed 3 times" in result.text()
    assert "context is unchanged" in result.text()
    assert reply.text == "carry on"
    assert [m.role for m in agent.context] == ["user", "assistant", "user", "assistant"]


SUMMARY = {
    "task_overview": "Fetch data three times.",
    "current_state": "Fetched three times.",
    "important_discoveries": "The data repeats.",
    "next_steps": "Answer.",
    "context_to_preserve": "none",
}


async def test_compress_tool_folds_history_mid_turn_with_the_real_engine() -> None:
    toolkit = Toolkit()
    toolkit.register(lambda: "data " * 400, name="fetch")
    model = ScriptedModel(
        [
            tool_reply(("fetch", {})),
            tool_reply(("fetch", {})),
            tool_reply(("fetch", {})),
            tool_reply(("CompressContext", {})),
            "done",
        ],
        context_size=3000,
    )
    agent = make_agent(
        model,
        toolkit,
        summarizer=ScriptedModel([SUMMARY]),
        context_config=ContextConfig(
            trigger_ratio=0.9,
            context_buffer_ratio=0.6,
            reserve_ratio=0.05,
            compression_tool_enabled=True,
        ),
    )
    assert (await agent.reply("go")).text == "done"
    result = model.requests[4].messages[-1].tool_results[0]
    # The user's request in progress ("go") is kept, not folded: 6 of the 7 earlier.
    assert result.text().startswith("Compressed 6 earlier messages")
    assert agent.summary is not None
    last = model.requests[4].messages
    assert last[1].id == agent.summary.id
    assert [(m.role, len(m.tool_calls), len(m.tool_results)) for m in last[2:]] == [
        ("user", 0, 0),
        ("assistant", 1, 0),
        ("user", 0, 1),
    ]
    assert len(last) < len(model.requests[3].messages)
    assert_valid(model)
