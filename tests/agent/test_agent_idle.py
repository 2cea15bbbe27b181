"""Idle compaction (issue 30, point 2): between turns, when the next turn would likely
cross the trigger, the agent compacts before the summarizer model's prompt cache expires,
so the summary call reads a warm prefix and the next turn starts compacted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from contextfold.agent import Agent
from contextfold.context import (
    BackgroundCompactionEvent,
    BackgroundConfig,
    CompressionEvent,
    ContextConfig,
    ContextEvent,
    SystemClock,
)
from contextfold.model import ScriptedModel, ScriptedRequest, tool_reply
from contextfold.tool import Toolkit
from contextfold.workspace import LocalWorkspace

from .agent_support import assert_valid

SUMMARY = {
    "task_overview": "Fetch a report per question.",
    "current_state": "Reports fetched.",
    "important_discoveries": "Each report is long.",
    "next_steps": "Answer the next question.",
    "context_to_preserve": "none",
}


class Script:
    """Each turn: fetch once, then answer; a summary request gets ``SUMMARY`` after
    ``summary_delay`` seconds."""

    def __init__(self, summary_delay: float = 0.0) -> None:
        self.summary_delay = summary_delay
        self.summaries: list[int] = []  # request index of each summary call
        self.model: ScriptedModel | None = None

    async def __call__(self, request: ScriptedRequest) -> Any:
        if request.is_summary:
            assert self.model is not None
            self.summaries.append(len(self.model.requests) - 1)
            await asyncio.sleep(self.summary_delay)
            return SUMMARY
        for msg in reversed(request.messages):  # past a trailing usage note, if any
            if msg.tool_results:
                return "done"
            if msg.text.startswith("Question"):
                return tool_reply(("fetch", {}))
        raise AssertionError("no question in the request")


class FrozenClock(SystemClock):
    """The system's clock for waits, but a time that does not move."""

    def now(self) -> float:
        return 0.0


def build(
    *, lifetime: float | None, margin: float = 0.4, summary_delay: float = 0.0, **kwargs: Any
) -> tuple[Agent, ScriptedModel, Script, list[ContextEvent]]:
    script = Script(summary_delay)
    model = ScriptedModel(script, context_size=3000, cache_lifetime=lifetime)
    script.model = model
    toolkit = Toolkit()
    toolkit.register(lambda: "report line " * 210, name="fetch")
    agent = Agent(
        name="assistant",
        system_prompt="You are helpful.",
        model=model,
        toolkit=toolkit,
        tasks_enabled=False,
        context_config=ContextConfig(
            trigger_ratio=0.8,
            reserve_ratio=0.1,
            tool_result_limit=2000,
            background=BackgroundConfig(start_ratio=0.79, idle_margin_s=margin),
        ),
        **kwargs,
    )
    # The usage-driven start reads how fast the context grows from the clock; frozen, no
    # growth rate is seen, so only the start mark (0.79, not reached) would start one:
    # these tests look at the idle compaction alone.
    agent.engine.background.clock = FrozenClock()
    events: list[ContextEvent] = []
    react = agent.engine.on_event
    assert react is not None

    async def record(event: ContextEvent) -> None:
        events.append(event)
        result = react(event)
        if result is not None:
            await result

    agent.engine.on_event = record
    return agent, model, script, events


def idle_phases(events: list[ContextEvent]) -> list[str]:
    return [
        e.phase for e in events if isinstance(e, BackgroundCompactionEvent) and e.cause == "idle"
    ]


def compressions(events: list[ContextEvent]) -> list[str]:
    return [e.trigger for e in events if isinstance(e, CompressionEvent)]


async def turns_until_due(agent: Agent) -> None:
    """Four turns: usage is below the trigger (and the background start mark), and one
    more turn like them would cross it."""
    for n in range(4):
        await agent.reply(f"Question {n}: fetch the report.")
    usage = agent.engine.usage(await agent.build_system_prompt(), agent.tool_specs()).total
    growth = agent.engine.context_tokens / 4
    assert agent.summary is None
    assert usage < 0.79 * 3000
    assert usage + growth > 0.8 * 3000


async def test_an_idle_agent_compacts_before_the_cache_expires() -> None:
    agent, model, script, events = build(lifetime=0.6)
    await turns_until_due(agent)
    assert compressions(events) == []
    answered = len(model.requests)
    await asyncio.sleep(0.5)  # the timer fires at 0.6 - 0.4 s; the summary is instant
    assert idle_phases(events) == ["started", "ready", "applied"]
    assert compressions(events) == ["idle"]
    assert script.summaries == [answered]  # the summary call came while idle
    assert agent.summary is not None
    await agent.reply("Question 4: fetch the report.")
    # The next turn starts from the compacted context and does not compact again.
    assert compressions(events) == ["idle"]
    first = model.requests[answered + 1]
    assert first.messages[1].id == agent.summary.id
    assert first.messages[-1].text == "Question 4: fetch the report."
    assert_valid(model)


async def test_a_user_back_before_the_timer_cancels_it() -> None:
    agent, _model, _script, events = build(lifetime=30.0)
    await turns_until_due(agent)
    assert agent._idle.pending
    await agent.reply("Question 4: fetch the report.")  # crosses the trigger in the turn
    assert idle_phases(events) == []
    assert compressions(events) == ["auto"]
    agent._idle.turn_started()  # stop the new timer before the loop closes


async def test_no_cache_lifetime_no_idle_compaction() -> None:
    agent, _model, script, events = build(lifetime=None, margin=0.0)
    await turns_until_due(agent)
    assert not agent._idle.pending
    await asyncio.sleep(0.2)
    assert idle_phases(events) == []
    assert script.summaries == []


async def test_an_idle_agent_far_from_the_trigger_does_nothing() -> None:
    agent, _model, script, events = build(lifetime=0.5)
    await agent.reply("Question 0: fetch the report.")
    await asyncio.sleep(0.4)
    assert idle_phases(events) == []
    assert script.summaries == []
    assert agent.summary is None


@pytest.mark.serial  # a wait < 0.5 s, measured alone
async def test_a_turn_that_starts_mid_summary_takes_it_at_the_trigger() -> None:
    agent, model, script, events = build(lifetime=0.5, summary_delay=0.5)
    await turns_until_due(agent)
    await asyncio.sleep(0.25)  # the idle summary is under way
    assert idle_phases(events) == ["started"]
    await agent.reply("Question 4: fetch the report.")
    # Not applied while the turn ran before its trigger; the trigger took the prepared
    # summary (no second summary call) and the turn waited only for what was left.
    assert idle_phases(events) == ["started", "ready", "applied"]
    assert len(script.summaries) == 1
    assert compressions(events) == ["idle"]
    applied = [e for e in events if isinstance(e, BackgroundCompactionEvent)][-1]
    assert applied.waited_s < 0.5
    assert_valid(model)
    agent._idle.turn_started()


async def test_the_idle_compaction_is_saved_with_a_held_session(tmp_path: Any) -> None:
    workspace = LocalWorkspace(tmp_path)
    await workspace.initialize()
    agent, _model, _script, events = build(lifetime=0.6, offloader=workspace, session_id="job")
    async with agent.hold_session():
        await turns_until_due(agent)
        await asyncio.sleep(0.5)
        assert compressions(events) == ["idle"]
    assert agent.summary is not None
    # A restart: a new agent on the same session resumes compacted, without a summary call.
    resumed, _model2, script2, _ = build(lifetime=0.6, offloader=workspace, session_id="job")
    async with resumed.hold_session():
        assert resumed.summary is not None
        assert resumed.summary.text == agent.summary.text
        assert [m.id for m in resumed.context] == [m.id for m in agent.context]
        await resumed.reply("Question 4: fetch the report.")
    assert script2.summaries == []
    resumed._idle.turn_started()
