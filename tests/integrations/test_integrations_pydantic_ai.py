"""Pydantic AI with the ContextfoldHistory capability, on the embedded model over HTTP.

The same plan as the LangChain test: six long logs (each truncated and offloaded), a
``Read`` of the cut part, compressions inside Pydantic AI's loop, every request it sent
to llama.cpp's server a valid conversation, and the history it keeps folded too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="needs contextfold[pydantic-ai]")

from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings

from contextfold.integrations.pydantic_ai import ContextfoldHistory, PydanticAICodec
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


class PlannedModel(OpenAIChatModel):
    """Forces each call's tool (the 135M model is weak) and sets the plan's arguments."""

    def __init__(self, plan: Plan, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plan = plan
        self.logs = 0

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        tool = self.plan.next_choice()
        settings: Any = {
            **(model_settings or {}),
            "tool_choice": tool if tool == "none" else [tool],
        }
        response = await super().request(messages, settings, model_request_parameters)
        calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
        if tool == "none" or not calls:
            return response
        arguments = self.plan.arguments(tool, self.logs)
        self.logs += tool == "read_log"
        call = ToolCallPart(tool_name=tool, args=arguments, tool_call_id=calls[0].tool_call_id)
        return dataclasses.replace(response, parts=[call])


async def test_compression_truncation_and_readback_inside_pydantic_ais_loop(
    llama_server: str,
) -> None:
    plan = Plan()
    log = RequestLog()
    history = ContextfoldHistory(
        counter=counter(),
        context_size=CONTEXT_SIZE,
        summarizer=summarizer(llama_server),
        offloader=plan.workspace,
        config=CONFIG,
        on_event=plan.record,
    )
    client = AsyncOpenAI(base_url=llama_server, api_key="unused", http_client=log.client())
    model = PlannedModel(plan, "smollm2", provider=OpenAIProvider(openai_client=client))
    agent = Agent(
        model,
        instructions=SYSTEM,
        tools=[read_log],
        capabilities=[history],
        model_settings=ModelSettings(temperature=0, extra_body={"max_tokens": ANSWER_TOKENS}),
    )
    result = await agent.run(TASK)

    check_plan_ran(plan, log)
    kept = [m for m, _ in PydanticAICodec().to_msgs(result.all_messages())]
    check_requests_valid([kept])
    assert kept[0].metadata.get("contextfold") == "summary"
