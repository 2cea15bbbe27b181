from typing import Any

from contextfold.agent import Agent
from contextfold.context import CompressionEvent, ContextEvent, TruncationEvent
from contextfold.message import Msg, ToolResultBlock
from contextfold.middleware import (
    CompressionContext,
    Middleware,
    ModelCallContext,
    ReplyContext,
    ToolCallContext,
    model_call_middleware,
    system_prompt_middleware,
    tool_call_middleware,
)
from contextfold.model import ChatResponse, ScriptedModel, text_reply, tool_reply
from contextfold.tool import Toolkit

from .agent_support import assert_valid, make_agent


async def test_system_prompt_hooks_apply_in_order() -> None:
    model = ScriptedModel(["ok"])
    agent = make_agent(
        model,
        middleware=[
            system_prompt_middleware(lambda p, a: p + "\nCWD: /repo"),
            system_prompt_middleware(lambda p, a: p.replace("/repo", "/work/repo")),
        ],
    )
    await agent.reply("hi")
    assert model.requests[0].messages[0].text == "You are helpful.\nCWD: /work/repo"


async def test_async_system_prompt_hook_sees_the_agent() -> None:
    class Named(Middleware):
        async def on_system_prompt(self, prompt: str, agent: Agent) -> str:
            return f"{prompt} I am {agent.name}."

    model = ScriptedModel(["ok"])
    await make_agent(model, middleware=[Named()]).reply("hi")
    assert model.requests[0].messages[0].text == "You are helpful. I am assistant."


class Recorder(Middleware):
    def __init__(self, label: str, log: list[str]) -> None:
        self.label, self.log = label, log

    async def on_reply(self, ctx: ReplyContext, call_next: Any) -> Msg:
        self.log.append(f"{self.label}>reply")
        result: Msg = await call_next(ctx)
        self.log.append(f"{self.label}<reply")
        return result

    async def on_model_call(self, ctx: ModelCallContext, call_next: Any) -> ChatResponse:
        self.log.append(f"{self.label}>model{ctx.step}")
        result: ChatResponse = await call_next(ctx)
        self.log.append(f"{self.label}<model{ctx.step}")
        return result

    async def on_tool_call(self, ctx: ToolCallContext, call_next: Any) -> ToolResultBlock:
        self.log.append(f"{self.label}>tool:{ctx.call.name}")
        result: ToolResultBlock = await call_next(ctx)
        self.log.append(f"{self.label}<tool:{ctx.call.name}")
        return result


async def test_wrappers_form_an_onion_in_list_order() -> None:
    log: list[str] = []
    toolkit = Toolkit()
    toolkit.register(lambda: "x", name="t")
    model = ScriptedModel([tool_reply(("t", {})), "done"])
    agent = make_agent(model, toolkit, middleware=[Recorder("A", log), Recorder("B", log)])
    await agent.reply("go")
    assert log == [
        "A>reply",
        "B>reply",
        "A>model0",
        "B>model0",
        "B<model0",
        "A<model0",
        "A>tool:t",
        "B>tool:t",
        "B<tool:t",
        "A<tool:t",
        "A>model1",
        "B>model1",
        "B<model1",
        "A<model1",
        "B<reply",
        "A<reply",
    ]


async def test_model_call_wrapper_can_change_request_and_response() -> None:
    async def force_and_rewrite(ctx: ModelCallContext, call_next: Any) -> ChatResponse:
        ctx.tool_choice = "none"
        ctx.messages = [*ctx.messages[:-1], Msg("user", "rewritten", "user")]
        response: ChatResponse = await call_next(ctx)
        return text_reply(response.text.upper())

    model = ScriptedModel(["quiet"])
    agent = make_agent(model, middleware=[model_call_middleware(force_and_rewrite)])
    reply = await agent.reply("original")
    assert model.requests[0].tool_choice == "none"
    assert model.requests[0].messages[-1].text == "rewritten"
    assert reply.text == "QUIET"
    assert agent.context[0].text == "original"  # the stored context is untouched


async def test_model_call_context_carries_the_prepared_input() -> None:
    seen: list[tuple[int, int]] = []

    async def observe(ctx: ModelCallContext, call_next: Any) -> ChatResponse:
        seen.append((len(ctx.messages), ctx.model_input.usage.total))
        assert ctx.messages == ctx.model_input.messages()
        result: ChatResponse = await call_next(ctx)
        return result

    model = ScriptedModel(["ok"])
    await make_agent(model, middleware=[model_call_middleware(observe)]).reply("hi")
    assert seen[0][0] == 2
    assert seen[0][1] > 0


async def test_tool_call_wrapper_can_replace_the_result() -> None:
    async def redact(ctx: ToolCallContext, call_next: Any) -> ToolResultBlock:
        result: ToolResultBlock = await call_next(ctx)
        return result.model_copy(update={"output": "[redacted]"})

    toolkit = Toolkit()
    toolkit.register(lambda: "secret=42", name="env")
    model = ScriptedModel([tool_reply(("env", {})), "ok"])
    await make_agent(model, toolkit, middleware=[tool_call_middleware(redact)]).reply("go")
    assert model.requests[1].messages[-1].tool_results[0].output == "[redacted]"
    assert_valid(model)


async def test_reply_wrapper_can_change_the_incoming_message() -> None:
    class Prefix(Middleware):
        async def on_reply(self, ctx: ReplyContext, call_next: Any) -> Msg:
            ctx.msg = [Msg("user", "[from cli] hi", "user")]
            result: Msg = await call_next(ctx)
            return result

    model = ScriptedModel(["ok"])
    await make_agent(model, middleware=[Prefix()]).reply("hi")
    assert model.requests[0].messages[1].text == "[from cli] hi"


SUMMARY = {
    "task_overview": "Say hello.",
    "current_state": "Greeted.",
    "important_discoveries": "none",
    "next_steps": "none",
    "context_to_preserve": "none",
}


class RecordCompressions(Middleware):
    def __init__(self, *, force: bool = False) -> None:
        self.seen: list[str] = []
        self.events: list[CompressionEvent | None] = []
        self.force = force

    async def on_compression(
        self, ctx: CompressionContext, call_next: Any
    ) -> CompressionEvent | None:
        self.seen.append(ctx.trigger)
        if self.force:
            ctx.force = True
        result: CompressionEvent | None = await call_next(ctx)
        self.events.append(result)
        return result


async def test_compression_wrapper_sees_manual_compression_and_can_change_config() -> None:
    recorder = RecordCompressions(force=True)
    agent = make_agent(ScriptedModel([SUMMARY]), middleware=[recorder])
    for i in range(4):
        agent.engine.append(Msg("user", f"hello {i}", "user"))
        agent.engine.append(Msg("assistant", f"hi {i}", "assistant"))
    # Far below the threshold: only the middleware's force makes it compress.
    event = await agent.compress_context()
    assert recorder.seen == ["manual"]
    assert event is not None
    assert event.trigger == "manual"
    assert recorder.events == [event]


async def test_automatic_compression_passes_through_the_compression_middleware() -> None:
    recorder = RecordCompressions()
    model = ScriptedModel([SUMMARY, "done"], context_size=2000)
    agent = make_agent(model, middleware=[recorder])
    for i in range(30):
        agent.engine.append(Msg("user", f"question {i} " + "word " * 60, "user"))
        agent.engine.append(Msg("assistant", f"answer {i}", "assistant"))
    await agent.reply("and now?")
    assert recorder.seen == ["auto"]
    (event,) = recorder.events
    assert event is not None
    assert event.trigger == "auto"
    assert event.method == "summary"


async def test_a_middleware_can_skip_an_automatic_compression() -> None:
    class Skip(Middleware):
        async def on_compression(self, ctx: CompressionContext, call_next: Any) -> None:
            return None

    model = ScriptedModel(["done"], context_size=2000)
    agent = make_agent(model, middleware=[Skip()])
    for i in range(30):
        agent.engine.append(Msg("user", f"question {i} " + "word " * 60, "user"))
    await agent.reply("go")
    assert agent.summary is None
    assert len(model.requests) == 1


async def test_context_events_reach_middleware() -> None:
    events: list[ContextEvent] = []

    class Observer(Middleware):
        async def on_context_event(self, event: ContextEvent, agent: Agent) -> None:
            events.append(event)

    agent = make_agent(ScriptedModel(), middleware=[Observer()])
    event = TruncationEvent(tool_call_id="c", tool_name="t", tokens_before=9, tokens_after=3)
    assert agent.engine.on_event is not None
    await agent.engine.on_event(event)  # type: ignore[misc]
    assert events == [event]
