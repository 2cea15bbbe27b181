"""LangChain v1 ``create_agent`` with ContextfoldMiddleware, on the embedded model over HTTP.

The agent reads six long logs (each result is truncated and offloaded), the context is
compressed inside LangChain's loop, the agent reads the cut part back with ``Read``, and
every request LangChain sent to llama.cpp's server is a valid conversation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="needs contextfold[langchain]")
pytest.importorskip("langchain_openai", reason="needs contextfold[langchain]")

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI

from contextfold.integrations.langchain import ContextfoldMiddleware, LangChainCodec
from contextfold.testing import check_requests_valid

from .recording import RequestLog
from .support import (
    ANSWER_TOKENS,
    CONFIG,
    CONTEXT_SIZE,
    SYSTEM,
    TASK,
    Plan,
    check_plan_ran,
    counter,
    read_log,
    summarizer,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.usefixtures("pinned_prompt_time"),
]


class ForcePlan(AgentMiddleware):  # type: ignore[type-arg]
    """Forces each call's tool (the 135M model is weak) and sets the plan's arguments."""

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan
        self.logs = 0

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        tool = self.plan.next_choice()
        response = await handler(request.override(tool_choice=tool))
        answer = response.result[0]
        assert isinstance(answer, AIMessage)
        # A call cut at max_tokens is an invalid one; the plan writes its arguments anyway.
        made = [*answer.tool_calls, *answer.invalid_tool_calls]
        if tool == "none" or not made:
            return response
        args = self.plan.arguments(tool, self.logs)
        self.logs += tool == "read_log"
        call = {"id": made[0]["id"], "name": tool, "args": args or {}, "type": "tool_call"}
        return ModelResponse(result=[AIMessage(content="", tool_calls=[call], id=answer.id)])


async def test_compression_truncation_and_readback_inside_langchains_loop(
    llama_server: str,
) -> None:
    plan = Plan()
    log = RequestLog()
    folding = ContextfoldMiddleware(
        counter=counter(),
        context_size=CONTEXT_SIZE,
        summarizer=summarizer(llama_server),
        offloader=plan.workspace,
        config=CONFIG,
        on_event=plan.record,
    )
    model = ChatOpenAI(
        model="smollm2",
        base_url=llama_server,
        api_key="unused",
        temperature=0,
        # llama.cpp's server reads max_tokens, not the max_completion_tokens LangChain sends
        extra_body={"max_tokens": ANSWER_TOKENS},
        http_async_client=log.client(),
    )
    agent = create_agent(
        model,
        tools=[StructuredTool.from_function(coroutine=read_log, parse_docstring=True)],
        system_prompt=SYSTEM,
        middleware=[folding, ForcePlan(plan)],
    )
    state = await agent.ainvoke(
        {"messages": [HumanMessage(TASK)]}, config={"configurable": {"thread_id": "t1"}}
    )

    check_plan_ran(plan, log)
    # The state LangGraph keeps is a valid conversation that starts with the summary.
    messages = state["messages"]
    check_requests_valid([[m for m, _ in LangChainCodec().to_msgs(messages)]])
    assert "contextfold" in messages[0].additional_kwargs
