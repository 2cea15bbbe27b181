"""The OpenAI Agents SDK with ContextfoldInputFilter, on the embedded model over HTTP.

The same plan as the LangChain test: six long logs (each truncated and offloaded), a
``Read`` of the cut part, compressions inside the SDK's run loop, and every request the
SDK sent to llama.cpp's server a valid conversation.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

pytest.importorskip("agents", reason="needs contextfold[openai-agents]")

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.items import ModelResponse
from openai import AsyncOpenAI
from openai.types.responses import ResponseFunctionToolCall

from contextfold.integrations.openai_agents import ContextfoldInputFilter

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


class PlannedModel(OpenAIChatCompletionsModel):
    """Forces each call's tool (the 135M model is weak) and sets the plan's arguments."""

    def __init__(self, plan: Plan, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = plan
        self.logs = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        tool = self.plan.next_choice()
        settings = dataclasses.replace(kwargs.pop("model_settings"), tool_choice=tool)
        response = await super().get_response(*args, model_settings=settings, **kwargs)
        calls = [o for o in response.output if isinstance(o, ResponseFunctionToolCall)]
        if tool == "none" or not calls:
            return response
        arguments = self.plan.arguments(tool, self.logs)
        self.logs += tool == "read_log"
        call = calls[0].model_copy(update={"name": tool, "arguments": json.dumps(arguments)})
        return dataclasses.replace(response, output=[call])


async def test_compression_truncation_and_readback_inside_the_agents_sdk_loop(
    llama_server: str,
) -> None:
    set_tracing_disabled(True)
    plan = Plan()
    log = RequestLog()
    folding = ContextfoldInputFilter(
        counter=counter(),
        context_size=CONTEXT_SIZE,
        summarizer=summarizer(llama_server),
        offloader=plan.workspace,
        config=CONFIG,
        on_event=plan.record,
    )
    client = AsyncOpenAI(base_url=llama_server, api_key="unused", http_client=log.client())
    agent = Agent(
        name="logs",
        instructions=SYSTEM,
        model=PlannedModel(plan, model="smollm2", openai_client=client),
        tools=[function_tool(read_log), *folding.tools],
        model_settings=ModelSettings(temperature=0, max_tokens=ANSWER_TOKENS),
    )
    result = await Runner.run(
        agent, TASK, run_config=RunConfig(call_model_input_filter=folding), max_turns=10
    )

    assert result.final_output is not None
    check_plan_ran(plan, log)
