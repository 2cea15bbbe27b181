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

import json
from typing import Any

import pytest

from contextfold.workspace import BaseWorkspace

from .isolation import (
    SECRETS,
    Opener,
    check_isolated,
    first_ref,
    log_text,
    options,
    readback_calls,
    reopen,
)

__all__ = ["reopen"]  # the fixture, imported to be found


async def fetch_log(thread: str) -> str:
    """Fetch a service log.

    Args:
        thread: Whose log.
    """
    return log_text(thread)


# -- LangChain v1 ------------------------------------------------------------------------


def _langchain_agent(workspace: BaseWorkspace, replies: list[Any], checkpointer: Any) -> Any:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.tools import StructuredTool

    from contextfold.integrations.langchain import ContextfoldMiddleware

    class ToolCallingFake(GenericFakeChatModel):
        """The framework's scripted chat model, which ignores the tools it is bound to."""

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    middleware = ContextfoldMiddleware(**options(workspace))
    return create_agent(
        ToolCallingFake(messages=iter(replies)),
        tools=[StructuredTool.from_function(coroutine=fetch_log), *middleware.tools],
        middleware=[middleware],
        checkpointer=checkpointer,
    )


def _ai_calls(calls: list[tuple[str, dict[str, Any]]], tag: str) -> Any:
    from langchain_core.messages import AIMessage

    return AIMessage(
        content="",
        tool_calls=[
            {"name": name, "args": args, "id": f"{tag}-{i}", "type": "tool_call"}
            for i, (name, args) in enumerate(calls)
        ],
    )


async def test_a_langchain_thread_reads_only_its_own_items(reopen: Opener) -> None:
    pytest.importorskip("langchain.agents", reason="needs contextfold[langchain]")
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver

    checkpointer = InMemorySaver()
    workspace = await reopen()
    replies = []
    for thread in SECRETS:
        replies += [_ai_calls([("fetch_log", {"thread": thread})], thread), AIMessage("Read.")]
    agent = _langchain_agent(workspace, replies, checkpointer)
    for thread in SECRETS:
        config = {"configurable": {"thread_id": thread}}
        await agent.ainvoke({"messages": [("user", f"Fetch the log of {thread}.")]}, config)

    workspace = await reopen()  # a restart: a new middleware and agent, the same stores
    other = await first_ref(workspace, "thread-a")
    replies = [_ai_calls(readback_calls(other), "rb"), AIMessage("Done.")]
    agent = _langchain_agent(workspace, replies, checkpointer)
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
    from contextfold.workspace import MemoryWorkspace

    workspace = MemoryWorkspace()
    middleware = ContextfoldMiddleware(**options(workspace))
    grep = next(t for t in middleware.tools if t.name == "Grep")
    assert grep.coroutine is not None
    answer = await grep.coroutine(None, pattern=".")
    assert answer.startswith("Error: Grep cannot tell which conversation"), answer


# -- Pydantic AI -------------------------------------------------------------------------


def _pydantic_agent(workspace: BaseWorkspace, replies: list[Any]) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from contextfold.integrations.pydantic_ai import ContextfoldHistory

    def respond(messages: list[Any], info: AgentInfo) -> Any:
        return replies.pop(0)

    history = ContextfoldHistory(**options(workspace))
    return Agent(FunctionModel(respond), tools=[fetch_log], capabilities=[history])


def _pydantic_calls(calls: list[tuple[str, dict[str, Any]]], tag: str) -> Any:
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    return ModelResponse(
        parts=[
            ToolCallPart(tool_name=name, args=args, tool_call_id=f"{tag}-{i}")
            for i, (name, args) in enumerate(calls)
        ]
    )


async def test_a_pydantic_ai_conversation_reads_only_its_own_items(reopen: Opener) -> None:
    pytest.importorskip("pydantic_ai", reason="needs contextfold[pydantic-ai]")
    from pydantic_ai.messages import ModelResponse, TextPart, ToolReturnPart

    workspace = await reopen()
    replies: list[Any] = []
    agent = _pydantic_agent(workspace, replies)
    histories: dict[str, Any] = {}
    for thread in SECRETS:
        replies += [
            _pydantic_calls([("fetch_log", {"thread": thread})], thread),
            ModelResponse(parts=[TextPart("Read.")]),
        ]
        result = await agent.run(f"Fetch the log of {thread}.", conversation_id=thread)
        histories[thread] = result.all_messages()

    workspace = await reopen()  # a restart: a new capability and agent, the same stores
    other = await first_ref(workspace, "thread-a")
    replies = [_pydantic_calls(readback_calls(other), "rb"), ModelResponse(parts=[TextPart("Ok")])]
    agent = _pydantic_agent(workspace, replies)
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


# -- OpenAI Agents SDK -------------------------------------------------------------------


def _agents_model(replies: list[Any]) -> Any:
    from agents import Model, ModelResponse, Usage

    class Scripted(Model):
        """The SDK's model interface, answering from a list."""

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            return ModelResponse(output=replies.pop(0), usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return Scripted()


def _agents_calls(calls: list[tuple[str, dict[str, Any]]], tag: str) -> list[Any]:
    from openai.types.responses import ResponseFunctionToolCall

    return [
        ResponseFunctionToolCall(
            type="function_call", name=name, arguments=json.dumps(args), call_id=f"{tag}-{i}"
        )
        for i, (name, args) in enumerate(calls)
    ]


def _agents_text(text: str) -> list[Any]:
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    content = ResponseOutputText(type="output_text", text=text, annotations=[])
    return [
        ResponseOutputMessage(
            id="msg", type="message", role="assistant", status="completed", content=[content]
        )
    ]


async def _agents_run(
    workspace: BaseWorkspace,
    replies: list[Any],
    thread: str,
    session: Any,
    prompt: str,
    *,
    tools_of: str | None = None,
) -> list[Any]:
    """One run of ``thread``'s session with its own filter (and the read-back tools of
    ``tools_of``'s filter, the same by default); the new items."""
    from agents import Agent, RunConfig, Runner, function_tool

    from contextfold.integrations.openai_agents import ContextfoldInputFilter

    fold = ContextfoldInputFilter(session_id=thread, **options(workspace))
    tools = fold.tools
    if tools_of is not None:
        tools = ContextfoldInputFilter(session_id=tools_of, **options(workspace)).tools
    agent = Agent(name="a", model=_agents_model(replies), tools=[function_tool(fetch_log), *tools])
    result = await Runner.run(
        agent,
        prompt,
        session=session,
        run_config=RunConfig(call_model_input_filter=fold, tracing_disabled=True),
    )
    return list(result.new_items)


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
        replies = [_agents_calls([("fetch_log", {"thread": thread})], thread), _agents_text("Ok")]
        await _agents_run(workspace, replies, thread, sessions[thread], f"Fetch {thread}'s log.")

    workspace = await reopen()  # a restart: a new filter and agent, the same stores
    other = await first_ref(workspace, "thread-a")
    replies = [_agents_calls(readback_calls(other), "rb"), _agents_text("Done.")]
    items = await _agents_run(workspace, replies, "thread-b", sessions["thread-b"], "Look back.")
    await check_isolated(workspace, _outputs(items), own="thread-b", other="thread-a")


async def test_agents_sdk_tools_of_another_sessions_filter_read_nothing() -> None:
    """Thread A's tools in a run that folds thread B (one filter per session, the wrong
    tools given to the agent) are refused, not served from A's items."""
    pytest.importorskip("agents", reason="needs contextfold[openai-agents]")
    from agents import SQLiteSession

    from contextfold.workspace import MemoryWorkspace

    workspace = MemoryWorkspace()
    replies = [_agents_calls([("fetch_log", {"thread": "thread-a"})], "a"), _agents_text("Ok")]
    await _agents_run(workspace, replies, "thread-a", SQLiteSession("a"), "Fetch.")
    replies = [_agents_calls([("Grep", {"pattern": "ALPHA"})], "rb"), _agents_text("Done.")]
    items = await _agents_run(
        workspace, replies, "thread-b", SQLiteSession("b"), "Grep.", tools_of="thread-a"
    )
    [answer] = _outputs(items)
    assert answer.startswith("Error: Grep cannot tell which conversation"), answer
    assert SECRETS["thread-a"] not in answer
