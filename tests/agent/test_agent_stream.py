from collections.abc import AsyncIterator, Sequence

import pytest

from contextfold.agent import (
    ContextChangeEvent,
    ReplyEvent,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from contextfold.context import TruncationEvent
from contextfold.message import Msg, ToolChoice, ToolSpec
from contextfold.middleware import Middleware
from contextfold.model import (
    ModelStreamEvent,
    ResponseCompleted,
    ScriptedModel,
    TextDelta,
    tool_reply,
)
from contextfold.tool import Toolkit

from .agent_support import assert_valid, make_agent


class ChunkingModel(ScriptedModel):
    """Streams text answers word by word."""

    async def _stream(
        self, messages: Sequence[Msg], *, tools: Sequence[ToolSpec], tool_choice: ToolChoice | None
    ) -> AsyncIterator[ModelStreamEvent]:
        response = await self._generate(messages, tools=tools, tool_choice=tool_choice)
        words = response.text.split(" ") if response.text else []
        for i, word in enumerate(words):
            yield TextDelta(text=word if i == 0 else " " + word)
        yield ResponseCompleted(response=response)


async def test_stream_yields_deltas_tool_events_and_final_reply() -> None:
    toolkit = Toolkit()
    toolkit.register(lambda city: f"sunny in {city}", name="weather")
    model = ChunkingModel([tool_reply(("weather", {"city": "Oslo"})), "It is sunny."])
    agent = make_agent(model, toolkit)
    events = [e async for e in agent.stream(Msg("user", "Weather in Oslo?", "user"))]
    kinds = [e.type for e in events]
    assert kinds == ["tool_call", "tool_result", "text_delta", "text_delta", "text_delta", "reply"]
    assert isinstance(events[0], ToolCallEvent)
    assert events[0].call.input == {"city": "Oslo"}
    assert isinstance(events[1], ToolResultEvent)
    assert events[1].result.output == "sunny in Oslo"
    assert "".join(e.text for e in events if isinstance(e, TextDeltaEvent)) == "It is sunny."
    final = events[-1]
    assert isinstance(final, ReplyEvent)
    assert final.msg.text == "It is sunny."
    assert agent.context[-1].id == final.msg.id
    assert_valid(model)


async def test_stream_forwards_context_events() -> None:
    event = TruncationEvent(tool_call_id="c", tool_name="t", tokens_before=9, tokens_after=3)

    class Emit(Middleware):
        async def on_reply(self, ctx, call_next):  # type: ignore[no-untyped-def]
            await ctx.agent.engine.on_event(event)
            return await call_next(ctx)

    agent = make_agent(ChunkingModel(["ok"]), middleware=[Emit()])
    events = [e async for e in agent.stream("hi")]
    assert isinstance(events[0], ContextChangeEvent)
    assert events[0].event == event


async def test_stream_raises_model_errors() -> None:
    agent = make_agent(ScriptedModel([RuntimeError("backend down")]))
    seen: list[object] = []

    async def drain() -> None:
        async for e in agent.stream("hi"):
            seen.append(e)

    with pytest.raises(RuntimeError, match="backend down"):
        await drain()
    assert seen == []


async def test_closing_the_stream_early_cancels_the_reply() -> None:
    toolkit = Toolkit()
    toolkit.register(lambda: "x", name="t")
    model = ChunkingModel([tool_reply(("t", {})), "never reached"])
    agent = make_agent(model, toolkit)
    stream = agent.stream("go")
    first = await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert first.type == "tool_call"
    assert len(model.requests) == 1
    # The agent is usable afterwards: its lock was released.
    model.add("back")
    assert (await agent.reply("again")).text in ("never reached", "back")


async def test_an_agent_run_as_a_tool_inside_a_stream_emits_nothing_into_it() -> None:
    inner = make_agent(ChunkingModel(["inner words here"]))
    inner.name = "inner"

    async def ask_inner(question: str) -> str:
        """Ask the inner agent.

        Args:
            question: What to ask.
        """
        return (await inner.reply(question)).text

    toolkit = Toolkit()
    toolkit.register(ask_inner)
    outer = make_agent(
        ChunkingModel([tool_reply(("ask_inner", {"question": "hi"})), "outer done"]), toolkit
    )
    outer.name = "outer"
    events = [e async for e in outer.stream("go")]
    texts = "".join(e.text for e in events if isinstance(e, TextDeltaEvent))
    assert texts == "outer done"
    assert {e.agent for e in events} == {"outer"}
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.result.text() == "inner words here"


async def test_an_agent_streamed_inside_another_agents_stream_has_its_own_events() -> None:
    inner = make_agent(ChunkingModel(["inner words"]))
    inner.name = "inner"
    seen: list[str] = []

    async def ask_inner() -> str:
        """Stream the inner agent."""
        async for event in inner.stream("hi"):
            seen.append(event.agent)
        return "ok"

    toolkit = Toolkit()
    toolkit.register(ask_inner)
    outer = make_agent(ChunkingModel([tool_reply(("ask_inner", {})), "outer done"]), toolkit)
    outer.name = "outer"
    outer_events = [e.agent async for e in outer.stream("go")]
    assert set(seen) == {"inner"}
    assert seen
    assert set(outer_events) == {"outer"}
