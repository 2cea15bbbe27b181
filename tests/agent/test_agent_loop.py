import asyncio
from typing import Any

import pytest

from contextfold._exceptions import ContextWindowExceededError
from contextfold.agent import Agent
from contextfold.context import CompressionEvent, ContextConfig
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock
from contextfold.model import ScriptedModel, text_reply, tool_reply
from contextfold.tool import Toolkit

from .agent_support import Calls, assert_valid, make_agent


class MemoryOffloader:
    async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
        return f"mem://{session_id}/context"

    async def offload_tool_result(
        self, session_id: str, tool_result: ToolResultBlock, **kwargs: Any
    ) -> str:
        return f"mem://{session_id}/{tool_result.id}"


async def test_spec_example_runs_as_written() -> None:
    model = ScriptedModel(["Hello there."])
    toolkit = Toolkit()
    agent = Agent(
        name="my_agent",
        system_prompt="...",
        model=model,
        toolkit=toolkit,
        context_config=ContextConfig(trigger_ratio=0.8, reserve_ratio=0.1, tool_result_limit=3000),
        offloader=MemoryOffloader(),
    )
    reply = await agent.reply(Msg("user", "...", "user"))
    assert reply.role == "assistant"
    assert reply.name == "my_agent"
    assert reply.text == "Hello there."
    assert_valid(model)


def test_buffer_not_below_trigger_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="context_buffer_ratio"):
        make_agent(
            ScriptedModel(),
            context_config=ContextConfig(trigger_ratio=0.5, context_buffer_ratio=0.5),
        )


async def test_call_is_the_same_as_reply() -> None:
    model = ScriptedModel(["one"])
    agent = make_agent(model)
    reply = await agent(Msg("user", "hi", "user"))
    assert reply.text == "one"
    assert [m.text for m in agent.context] == ["hi", "one"]


async def test_request_is_system_prompt_then_context() -> None:
    model = ScriptedModel(["a", "b"])
    agent = make_agent(model)
    await agent.reply(Msg("user", "first", "user"))
    await agent.reply("second")
    sent = model.requests[1].messages
    assert [(m.role, m.text) for m in sent] == [
        ("system", "You are helpful."),
        ("user", "first"),
        ("assistant", "a"),
        ("user", "second"),
    ]
    assert_valid(model)


async def test_tool_call_result_is_observed_in_next_step() -> None:
    toolkit = Toolkit()

    @toolkit.register
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    model = ScriptedModel([tool_reply(("add", {"a": 2, "b": 3})), "It is 5."])
    agent = make_agent(model, toolkit)
    reply = await agent.reply("What is 2+3?")
    assert reply.text == "It is 5."
    # The read-back tools come first: without an offloader the agent keeps what leaves
    # the context in memory, readable.
    assert model.requests[0].tool_names == ["Read", "Grep", "Glob", "Search", "add"]
    last = model.requests[1].messages[-1]
    assert last.role == "user"
    assert [(r.name, r.output, r.is_error) for r in last.tool_results] == [("add", "5", False)]
    assert_valid(model)


async def test_model_input_is_prepared_once_per_step() -> None:
    toolkit = Toolkit()
    toolkit.register(lambda: "x", name="noop")
    model = ScriptedModel([tool_reply(("noop", {})), tool_reply(("noop", {})), "done"])
    agent = make_agent(model, toolkit)
    calls = Calls(agent)
    await agent.reply("go")
    assert len(calls.prepare) == len(model.requests) == 3


async def test_parallel_calls_run_concurrently_and_results_keep_call_order() -> None:
    toolkit = Toolkit()
    second_done = asyncio.Event()
    finished: list[str] = []

    @toolkit.register
    async def slow() -> str:
        # Can only finish once `fast` has run, which proves the calls overlap.
        await asyncio.wait_for(second_done.wait(), timeout=10)
        finished.append("slow")
        return "slow result"

    @toolkit.register
    async def fast() -> str:
        finished.append("fast")
        second_done.set()
        return "fast result"

    model = ScriptedModel([tool_reply(("slow", {}), ("fast", {})), "ok"])
    agent = make_agent(model, toolkit)
    await agent.reply("go")
    assert finished == ["fast", "slow"]
    results = model.requests[1].messages[-1].tool_results
    assert [r.output for r in results] == ["slow result", "fast result"]
    calls = model.requests[1].messages[-2].tool_calls
    assert [r.id for r in results] == [c.id for c in calls]
    assert_valid(model)


async def test_tool_results_of_one_turn_share_one_user_message() -> None:
    toolkit = Toolkit()
    toolkit.register(lambda: "a", name="ta")
    toolkit.register(lambda: "b", name="tb")
    model = ScriptedModel([tool_reply(("ta", {}), ("tb", {})), "ok"])
    agent = make_agent(model, toolkit)
    await agent.reply("go")
    roles = [(m.role, len(m.tool_calls), len(m.tool_results)) for m in agent.context]
    assert roles == [("user", 0, 0), ("assistant", 2, 0), ("user", 0, 2), ("assistant", 0, 0)]


async def test_sequential_mode_runs_calls_one_after_another() -> None:
    order: list[str] = []
    toolkit = Toolkit()

    @toolkit.register
    async def first() -> str:
        order.append("first start")
        await asyncio.sleep(0)
        order.append("first end")
        return "1"

    @toolkit.register
    async def second() -> str:
        order.append("second")
        return "2"

    model = ScriptedModel([tool_reply(("first", {}), ("second", {})), "ok"])
    await make_agent(model, toolkit, parallel_tool_calls=False).reply("go")
    assert order == ["first start", "first end", "second"]


async def test_tool_error_is_reported_to_model_and_loop_continues() -> None:
    toolkit = Toolkit()

    @toolkit.register
    def fail() -> str:
        raise OSError("no such file: a.txt")

    model = ScriptedModel([tool_reply(("fail", {})), "Sorry, the file is missing."])
    reply = await make_agent(model, toolkit).reply("read a.txt")
    result = model.requests[1].messages[-1].tool_results[0]
    assert result.is_error
    assert "OSError: no such file: a.txt" in result.text()
    assert reply.text == "Sorry, the file is missing."
    assert_valid(model)


async def test_unknown_tool_gets_error_result() -> None:
    model = ScriptedModel([tool_reply(("teleport", {"to": "mars"})), "I cannot."])
    reply = await make_agent(model).reply("go to mars")
    result = model.requests[1].messages[-1].tool_results[0]
    assert result.is_error
    assert "no tool named 'teleport'" in result.text()
    assert reply.text == "I cannot."
    assert_valid(model)


async def test_malformed_arguments_get_error_result_without_running_tool() -> None:
    ran: list[str] = []
    toolkit = Toolkit()

    @toolkit.register
    def write(path: str) -> str:
        ran.append(path)
        return "written"

    bad = ToolCallBlock(id="c1", name="write", raw_input='{"path": ', input_error="truncated JSON")
    model = ScriptedModel([tool_reply(bad), "retrying later"])
    await make_agent(model, toolkit).reply("write it")
    result = model.requests[1].messages[-1].tool_results[0]
    assert (result.id, result.is_error) == ("c1", True)
    assert "not a valid JSON object" in result.text()
    assert ran == []
    assert_valid(model)


async def test_schema_invalid_arguments_get_error_result() -> None:
    toolkit = Toolkit()
    toolkit.register(lambda n: n, name="square")
    toolkit.remove("square")

    @toolkit.register
    def square(n: int) -> int:
        return n * n

    model = ScriptedModel([tool_reply(("square", {"n": "four"})), "oops"])
    await make_agent(model, toolkit).reply("square four")
    result = model.requests[1].messages[-1].tool_results[0]
    assert result.is_error
    assert "'four' is not of type 'integer'" in result.text()


async def test_max_iters_ends_with_clear_message_not_exception() -> None:
    toolkit = Toolkit()
    toolkit.register(lambda: "again", name="loop")
    model = ScriptedModel(lambda request: tool_reply(("loop", {})))
    agent = make_agent(model, toolkit, max_iters=3)
    reply = await agent.reply("go")
    assert len(model.requests) == 3
    assert reply.role == "assistant"
    assert reply.metadata["stop_reason"] == "max_iters"
    assert "max_iters" in reply.text
    assert agent.context[-1] is reply
    assert agent.context[-2].tool_results  # the last step's results are kept
    assert_valid(model)


async def test_conversation_continues_after_max_iters() -> None:
    toolkit = Toolkit()
    toolkit.register(lambda: "again", name="loop")
    model = ScriptedModel([tool_reply(("loop", {})), "finally"])
    agent = make_agent(model, toolkit, max_iters=1)
    await agent.reply("go")
    assert (await agent.reply("continue")).text == "finally"
    assert_valid(model)


async def test_context_overflow_compresses_once_and_retries() -> None:
    model = ScriptedModel([ContextWindowExceededError("too long"), "fits now"])
    agent = make_agent(model)
    calls = Calls(agent)
    event = CompressionEvent(
        trigger="overflow",
        method="summary",
        tokens_before=10,
        tokens_after=5,
        messages_removed=1,
        messages_kept=1,
        duration_s=0.0,
    )

    async def compress(system_prompt: str, tools: Any, **kw: Any) -> CompressionEvent:
        calls.compress.append(kw)
        return event

    agent.engine.compress = compress  # type: ignore[method-assign]
    reply = await agent.reply("hi")
    assert reply.text == "fits now"
    assert [(c["trigger"], c["force"]) for c in calls.compress] == [("overflow", True)]
    assert len(model.requests) == 2


async def test_context_overflow_raises_when_nothing_can_be_compressed() -> None:
    model = ScriptedModel([ContextWindowExceededError("too long"), "never sent"])
    agent = make_agent(model)

    async def compress(system_prompt: str, tools: Any, **kw: Any) -> None:
        return None

    agent.engine.compress = compress  # type: ignore[method-assign]
    with pytest.raises(ContextWindowExceededError):
        await agent.reply("hi")
    assert len(model.requests) == 1


async def test_failed_tool_middleware_still_leaves_valid_context() -> None:
    from contextfold.middleware import MiddlewareStack, tool_call_middleware

    async def explode(ctx: Any, call_next: Any) -> Any:
        raise RuntimeError("middleware bug")

    toolkit = Toolkit()
    toolkit.register(lambda: "x", name="t")
    model = ScriptedModel([tool_reply(("t", {})), "after"])
    agent = make_agent(model, toolkit, middleware=[tool_call_middleware(explode)])
    with pytest.raises(RuntimeError, match="middleware bug"):
        await agent.reply("go")
    agent.middleware = MiddlewareStack([])
    assert (await agent.reply("again")).text == "after"
    assert_valid(model)


async def test_text_reply_helper_is_accepted() -> None:
    model = ScriptedModel([text_reply("plain")])
    assert (await make_agent(model).reply("x")).text == "plain"
