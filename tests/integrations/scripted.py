"""The three frameworks driven by scripted models: each framework's own fake model class
(LangChain's ``GenericFakeChatModel``, Pydantic AI's ``FunctionModel``) or a minimal
implementation of its public model interface (the Agents SDK's ``Model``), answering
from a list and recording every request it is sent, as text."""

from __future__ import annotations

import json
from typing import Any

Calls = list[tuple[str, dict[str, Any]]]

SECRETS = {"thread-a": "ALPHA-7731", "thread-b": "BRAVO-4242"}
"""A line only each thread's tool output holds (cut from the context, kept offloaded)."""


def log_text(thread: str) -> str:
    """About 1,000 tokens; the thread's secret sits in the middle, which truncation cuts."""
    lines = [f"{thread} line {i}: request served, status ok" for i in range(60)]
    lines.insert(30, f"{thread} line 30: failure {SECRETS.get(thread, 'E-1')} in src/svc/mod.py")
    return "\n".join(lines)


async def fetch_log(thread: str) -> str:
    """Fetch a service log.

    Args:
        thread: Whose log.
    """
    return log_text(thread)


# -- LangChain v1 ------------------------------------------------------------------------


def langchain_agent(
    options: dict[str, Any],
    replies: list[Any],
    checkpointer: Any = None,
    requests: list[str] | None = None,
) -> Any:
    """``create_agent`` with the middleware, ``fetch_log`` and the read-back tools."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.tools import StructuredTool

    from contextfold.integrations.langchain import ContextfoldMiddleware

    class ToolCallingFake(GenericFakeChatModel):
        """The framework's scripted chat model; it records what it is sent."""

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            if requests is not None:
                requests.append(f"tools: {[getattr(t, 'name', t) for t in tools]}")
            return self

        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            if requests is not None:
                requests.append("\n".join(str(m.content) for m in messages))
            return super()._generate(messages, *args, **kwargs)

    middleware = ContextfoldMiddleware(**options)
    return create_agent(
        ToolCallingFake(messages=iter(replies)),
        tools=[StructuredTool.from_function(coroutine=fetch_log)],  # + the middleware's tools
        middleware=[middleware],
        checkpointer=checkpointer,
    )


def langchain_calls(calls: Calls, tag: str) -> Any:
    from langchain_core.messages import AIMessage

    return AIMessage(
        content="",
        tool_calls=[
            {"name": name, "args": args, "id": f"{tag}-{i}", "type": "tool_call"}
            for i, (name, args) in enumerate(calls)
        ],
    )


# -- Pydantic AI -------------------------------------------------------------------------


def pydantic_agent(
    options: dict[str, Any], replies: list[Any], requests: list[str] | None = None
) -> Any:
    """An ``Agent`` over ``FunctionModel`` with the capability and ``fetch_log``."""
    from pydantic_ai import Agent
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from contextfold.integrations.pydantic_ai import ContextfoldHistory

    def respond(messages: list[Any], info: AgentInfo) -> Any:
        if requests is not None:
            requests.append(f"tools: {[t.name for t in info.function_tools]}\n{messages}")
        return replies.pop(0)

    history = ContextfoldHistory(**options)
    return Agent(FunctionModel(respond), tools=[fetch_log], capabilities=[history])


def pydantic_calls(calls: Calls, tag: str) -> Any:
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    return ModelResponse(
        parts=[
            ToolCallPart(tool_name=name, args=args, tool_call_id=f"{tag}-{i}")
            for i, (name, args) in enumerate(calls)
        ]
    )


def pydantic_text(text: str) -> Any:
    from pydantic_ai.messages import ModelResponse, TextPart

    return ModelResponse(parts=[TextPart(text)])


# -- OpenAI Agents SDK -------------------------------------------------------------------


def agents_model(replies: list[Any], requests: list[str] | None = None) -> Any:
    from agents import Model, ModelResponse, Usage

    class Scripted(Model):
        """The SDK's model interface, answering from a list."""

        async def get_response(
            self,
            system_instructions: Any,
            input: Any,
            model_settings: Any,
            tools: Any,
            *args: Any,
            **kwargs: Any,
        ) -> ModelResponse:
            if requests is not None:
                requests.append(f"tools: {[t.name for t in tools]}\n{input}")
            return ModelResponse(output=replies.pop(0), usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return Scripted()


def agents_calls(calls: Calls, tag: str) -> list[Any]:
    from openai.types.responses import ResponseFunctionToolCall

    return [
        ResponseFunctionToolCall(
            type="function_call", name=name, arguments=json.dumps(args), call_id=f"{tag}-{i}"
        )
        for i, (name, args) in enumerate(calls)
    ]


def agents_text(text: str) -> list[Any]:
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    content = ResponseOutputText(type="output_text", text=text, annotations=[])
    return [
        ResponseOutputMessage(
            id="msg", type="message", role="assistant", status="completed", content=[content]
        )
    ]


async def agents_run(
    options: dict[str, Any],
    replies: list[Any],
    thread: str,
    session: Any,
    prompt: str,
    *,
    tools_of: str | None = None,
    requests: list[str] | None = None,
) -> list[Any]:
    """One run of ``thread``'s session with its own filter (and the read-back tools of
    ``tools_of``'s filter, the same by default); the new items."""
    from agents import Agent, RunConfig, Runner, function_tool

    from contextfold.integrations.openai_agents import ContextfoldInputFilter

    fold = ContextfoldInputFilter(session_id=thread, **options)
    tools = fold.tools
    if tools_of is not None:
        tools = ContextfoldInputFilter(session_id=tools_of, **options).tools
    agent = Agent(
        name="a",
        model=agents_model(replies, requests),
        tools=[function_tool(fetch_log), *tools],
    )
    result = await Runner.run(
        agent,
        prompt,
        session=session,
        run_config=RunConfig(call_model_input_filter=fold, tracing_disabled=True),
    )
    return list(result.new_items)
