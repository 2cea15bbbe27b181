"""One conversation never reads another's offloaded items (issue 26, point 2: in LangChain
thread ``t2``, ``Grep`` returned thread ``t1``'s offloaded logs).

Each test drives the real framework with a scripted model: threads A and B each run a tool
whose output (with a secret line only that thread has) is cut and offloaded; then the
integration is built again over the same workspace (a restart), and thread B calls Grep,
Read, Glob and Search for A's secret and A's reference, and Grep for its own. B sees only
its own items, on the memory, local, SQLite and PostgreSQL workspaces. Before the tools
were bound to their conversation, B's Grep, Read and Search returned A's log.
"""

from __future__ import annotations

from typing import Any

import pytest

from contextfold.workspace import MemoryWorkspace

from .isolation import Opener, check_isolated, first_ref, options, readback_calls, reopen
from .scripted import (
    SECRETS,
    agents_calls,
    agents_run,
    agents_text,
    langchain_agent,
    langchain_calls,
    pydantic_agent,
    pydantic_calls,
    pydantic_text,
)

__all__ = ["reopen"]  # the fixture, imported to be found


async def test_a_langchain_thread_reads_only_its_own_items(reopen: Opener) -> None:
    pytest.importorskip("langchain.agents", reason="needs contextfold[langchain]")
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver

    checkpointer = InMemorySaver()
    workspace = await reopen()
    replies = []
    for thread in SECRETS:
        replies += [langchain_calls([("fetch_log", {"thread": thread})], thread), AIMessage("Ok")]
    agent = langchain_agent(options(workspace), replies, checkpointer)
    for thread in SECRETS:
        config = {"configurable": {"thread_id": thread}}
        await agent.ainvoke({"messages": [("user", f"Fetch the log of {thread}.")]}, config)

    workspace = await reopen()  # a restart: a new middleware and agent, the same stores
    other = await first_ref(workspace, "thread-a")
    replies = [langchain_calls(readback_calls(other), "rb"), AIMessage("Done.")]
    agent = langchain_agent(options(workspace), replies, checkpointer)
    state = await agent.ainvoke(
        {"messages": [("user", "Look back at everything.")]},
        {"configurable": {"thread_id": "thread-b"}},
    )
    answers = [
        str(m.content)
        for m in state["messages"]
        if isinstance(m, ToolMessage) and m.tool_call_id.startswith("rb-")
    ]
    await check_isolated(workspace, answers, own="thread-b", other="thread-a")


async def test_a_langchain_tool_without_a_runtime_reads_nothing() -> None:
    pytest.importorskip("langchain.agents", reason="needs contextfold[langchain]")
    from contextfold.integrations.langchain import ContextfoldMiddleware

    middleware = ContextfoldMiddleware(**options(MemoryWorkspace()))
    grep = next(t for t in middleware.tools if t.name == "Grep")
    assert grep.coroutine is not None
    answer = await grep.coroutine(None, pattern=".")
    assert answer.startswith("Error: Grep cannot tell which conversation"), answer


async def test_a_pydantic_ai_conversation_reads_only_its_own_items(reopen: Opener) -> None:
    pytest.importorskip("pydantic_ai", reason="needs contextfold[pydantic-ai]")
    from pydantic_ai.messages import ToolReturnPart

    workspace = await reopen()
    replies: list[Any] = []
    agent = pydantic_agent(options(workspace), replies)
    histories: dict[str, Any] = {}
    for thread in SECRETS:
        replies += [
            pydantic_calls([("fetch_log", {"thread": thread})], thread),
            pydantic_text("Ok"),
        ]
        result = await agent.run(f"Fetch the log of {thread}.", conversation_id=thread)
        histories[thread] = result.all_messages()

    workspace = await reopen()  # a restart: a new capability and agent, the same stores
    other = await first_ref(workspace, "thread-a")
    replies = [pydantic_calls(readback_calls(other), "rb"), pydantic_text("Done.")]
    agent = pydantic_agent(options(workspace), replies)
    result = await agent.run(
        "Look back at everything.",
        message_history=histories["thread-b"],
        conversation_id="thread-b",
    )
    answers = [
        str(part.content)
        for message in result.new_messages()
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_call_id.startswith("rb-")
    ]
    await check_isolated(workspace, answers, own="thread-b", other="thread-a")


def _outputs(items: list[Any]) -> list[str]:
    from agents.items import ToolCallOutputItem

    return [
        str(item.output)
        for item in items
        if isinstance(item, ToolCallOutputItem) and item.raw_item["call_id"].startswith("rb-")
    ]


async def test_an_agents_sdk_session_reads_only_its_own_items(reopen: Opener) -> None:
    pytest.importorskip("agents", reason="needs contextfold[openai-agents]")
    from agents import SQLiteSession

    workspace = await reopen()
    sessions = {thread: SQLiteSession(thread) for thread in SECRETS}
    for thread in SECRETS:
        replies = [agents_calls([("fetch_log", {"thread": thread})], thread), agents_text("Ok")]
        prompt = f"Fetch {thread}'s log."
        await agents_run(options(workspace), replies, thread, sessions[thread], prompt)

    workspace = await reopen()  # a restart: a new filter and agent, the same stores
    other = await first_ref(workspace, "thread-a")
    replies = [agents_calls(readback_calls(other), "rb"), agents_text("Done.")]
    items = await agents_run(
        options(workspace), replies, "thread-b", sessions["thread-b"], "Look back."
    )
    await check_isolated(workspace, _outputs(items), own="thread-b", other="thread-a")


async def test_agents_sdk_tools_of_another_sessions_filter_read_nothing() -> None:
    """Thread A's tools in a run that folds thread B (one filter per session, the wrong
    tools given to the agent) are refused, not served from A's items."""
    pytest.importorskip("agents", reason="needs contextfold[openai-agents]")
    from agents import SQLiteSession

    opts = options(MemoryWorkspace())
    replies = [agents_calls([("fetch_log", {"thread": "thread-a"})], "a"), agents_text("Ok")]
    await agents_run(opts, replies, "thread-a", SQLiteSession("a"), "Fetch.")
    replies = [agents_calls([("Grep", {"pattern": "ALPHA"})], "rb"), agents_text("Done.")]
    items = await agents_run(
        opts, replies, "thread-b", SQLiteSession("b"), "Grep.", tools_of="thread-a"
    )
    [answer] = _outputs(items)
    assert answer.startswith("Error: Grep cannot tell which conversation"), answer
    assert SECRETS["thread-a"] not in answer
