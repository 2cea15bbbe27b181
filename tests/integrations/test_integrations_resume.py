"""A resumed or switched session redoes no work: a new folder (a new process) on the same
workspace re-truncates nothing, offloads nothing twice and calls the summarizer only when
new content needs it (issue 26: the Agents SDK's filter re-truncated all 18 old results,
offloaded 19 -> 40 items and summarized the history again from scratch)."""

from __future__ import annotations

from typing import Any

import pytest

from contextfold.context import (
    CompressionEvent,
    ContextConfig,
    ContextEngine,
    ContextEvent,
    ModelSummarizer,
    TruncationEvent,
)
from contextfold.integrations import HistoryFolder
from contextfold.model import ScriptedModel
from contextfold.workspace import MemoryWorkspace
from tests.golden.harness import SYSTEM, log_text

pytest.importorskip("agents", reason="needs contextfold[openai-agents]")

from contextfold.integrations.openai_agents import AgentsCodec

FIELDS = {
    "task_overview": "Check the services.",
    "current_state": "Logs read.",
    "important_discoveries": "Errors in mod*.py.",
    "next_steps": "Read more logs.",
    "context_to_preserve": "src/svc*/",
}


def history(turns: int, calls: int) -> list[dict[str, Any]]:
    """An Agents SDK session's items: user turns, function calls and their big outputs."""
    items: list[dict[str, Any]] = []
    for t in range(turns):
        items.append({"role": "user", "content": f"Check service {t} and report."})
        for c in range(calls):
            call_id = f"t{t}-{c}"
            items.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": "read_log",
                    "arguments": f'{{"service": {t}, "call": {c}}}',
                }
            )
            items.append(
                {"type": "function_call_output", "call_id": call_id, "output": log_text(t, c)}
            )
        items.append({"role": "assistant", "content": f"Service {t}: done."})
    return items


def folder(
    workspace: MemoryWorkspace, summaries: ScriptedModel, events: list[ContextEvent]
) -> HistoryFolder[Any]:
    engine = ContextEngine(
        counter=summaries.token_counter,
        context_size=6000,
        summarizer=ModelSummarizer(summaries),
        config=ContextConfig(trigger_ratio=0.7, reserve_ratio=0.1, tool_result_limit=600),
        offloader=workspace,
        session_id="conversation-1",
        on_event=events.append,
    )
    return HistoryFolder(engine, AgentsCodec(), rewrites_history=False)


async def offloaded(workspace: MemoryWorkspace) -> int:
    return len(await workspace.list_items("conversation-1"))


async def test_a_new_folder_on_the_same_workspace_redoes_nothing() -> None:
    workspace = MemoryWorkspace()
    await workspace.initialize()
    summaries = ScriptedModel(lambda request: FIELDS, context_size=16_000)
    items = history(turns=3, calls=4)
    events: list[ContextEvent] = []
    first = folder(workspace, summaries, events)
    for end in range(1, len(items) + 1):  # the SDK calls the filter as items arrive
        if items[end - 1].get("type") != "function_call":
            last = await first.fold(items[:end], SYSTEM)
    assert any(isinstance(e, CompressionEvent) for e in events)
    assert any(isinstance(e, TruncationEvent) for e in events)
    calls, saved = len(summaries.requests), await offloaded(workspace)

    events.clear()
    resumed = folder(workspace, summaries, events)  # a new process, the same session
    again = await resumed.fold(items, SYSTEM)
    assert not any(isinstance(e, TruncationEvent | CompressionEvent) for e in events)
    assert len(summaries.requests) == calls  # no summarizer call: nothing new arrived
    assert await offloaded(workspace) == saved  # nothing offloaded twice
    assert again.request == last.request  # the same request as before the restart


async def test_new_items_after_a_resume_are_folded_as_usual() -> None:
    workspace = MemoryWorkspace()
    await workspace.initialize()
    summaries = ScriptedModel(lambda request: FIELDS, context_size=16_000)
    items = history(turns=3, calls=4)
    events: list[ContextEvent] = []
    await folder(workspace, summaries, events).fold(items, SYSTEM)
    saved = await offloaded(workspace)
    resumed = folder(workspace, summaries, events)
    more = [*items, *history(turns=4, calls=4)[len(items) :]]
    events.clear()
    await resumed.fold(more, SYSTEM)
    truncated = [e for e in events if isinstance(e, TruncationEvent)]
    assert {e.tool_call_id for e in truncated} <= {f"t3-{c}" for c in range(4)}
    assert await offloaded(workspace) > saved


def _codec(framework: str) -> tuple[Any, bool]:
    if framework == "langchain":
        pytest.importorskip("langchain_core")
        from contextfold.integrations.langchain import LangChainCodec

        return LangChainCodec(), True
    pytest.importorskip("pydantic_ai")
    from contextfold.integrations.pydantic_ai import PydanticAICodec

    return PydanticAICodec(), True


@pytest.mark.parametrize("framework", ["langchain", "pydantic-ai"])
async def test_a_framework_that_stores_the_folded_history_resumes_without_redoing_work(
    framework: str,
) -> None:
    from contextfold.message import Msg, ToolCallBlock, ToolResultBlock

    codec, rewrites = _codec(framework)
    workspace = MemoryWorkspace()
    await workspace.initialize()
    summaries = ScriptedModel(lambda request: FIELDS, context_size=16_000)
    events: list[ContextEvent] = []

    def make() -> HistoryFolder[Any]:
        engine = ContextEngine(
            counter=summaries.token_counter,
            context_size=6000,
            summarizer=ModelSummarizer(summaries),
            config=ContextConfig(trigger_ratio=0.7, reserve_ratio=0.1, tool_result_limit=600),
            offloader=workspace,
            session_id="conversation-1",
            on_event=events.append,
        )
        return HistoryFolder(engine, codec, rewrites_history=rewrites)

    first = make()
    stored: list[Any] = []
    for t in range(3):
        stored.extend(codec.from_msg(Msg("user", f"Check service {t} and report.", "user")))
        for c in range(4):
            call = ToolCallBlock(id=f"t{t}-{c}", name="read_log", input={"service": t, "call": c})
            folded = await first.fold(stored, SYSTEM)
            stored = [*folded.history, *codec.from_msg(Msg("assistant", [call], "assistant"))]
            result = ToolResultBlock(id=call.id, name="read_log", output=log_text(t, c))
            stored.extend(codec.from_msg(Msg("tool", [result], "user")))
        last = await first.fold(stored, SYSTEM)
        stored = list(last.history)
    assert any(isinstance(e, CompressionEvent) for e in events)
    calls, saved = len(summaries.requests), await offloaded(workspace)

    events.clear()
    again = await make().fold(stored, SYSTEM)  # a new process, the checkpointed history
    assert not any(isinstance(e, TruncationEvent | CompressionEvent) for e in events)
    assert len(summaries.requests) == calls
    assert await offloaded(workspace) == saved
    assert [codec.to_msgs([i])[0][0].text for i in again.request] == [
        codec.to_msgs([i])[0][0].text for i in last.request
    ]


async def test_engines_per_process_are_bounded_and_an_evicted_one_resumes() -> None:
    from contextfold.integrations import Sessions

    workspace = MemoryWorkspace()
    await workspace.initialize()
    summaries = ScriptedModel(lambda request: FIELDS, context_size=16_000)
    events: list[ContextEvent] = []
    sessions: Sessions[Any] = Sessions(
        {
            "counter": summaries.token_counter,
            "context_size": 6000,
            "summarizer": ModelSummarizer(summaries),
            "offloader": workspace,
            "config": ContextConfig(trigger_ratio=0.7, reserve_ratio=0.1, tool_result_limit=600),
            "on_event": events.append,
        },
        AgentsCodec(),
        rewrites_history=False,
        max_sessions=2,
    )
    items = history(turns=2, calls=3)
    for name in ("a", "b", "c"):  # three conversations, two engines held
        await sessions.get(name).fold(items, SYSTEM)
    assert len(sessions) == 2
    events.clear()
    await sessions.get("a").fold(items, SYSTEM)  # "a" was evicted: it resumes
    assert not any(isinstance(e, TruncationEvent | CompressionEvent) for e in events)
