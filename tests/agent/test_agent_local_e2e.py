"""End to end: the embedded model completes a task that needs a tool call, through the loop."""

from typing import Any

import pytest

from contextfold.agent import Agent, check_requests_valid
from contextfold.message import Msg
from contextfold.middleware import ModelCallContext, model_call_middleware
from contextfold.model import ChatResponse
from contextfold.tool import Toolkit

pytestmark = [pytest.mark.slow, pytest.mark.model]  # runs the embedded model


def local_model() -> Any:
    try:
        from contextfold.model._local import LocalChatModel

        return LocalChatModel(context_size=4096, max_tokens=96)
    except ImportError as exc:  # MissingDependencyError is an ImportError
        pytest.skip(f"the embedded model cannot be loaded: {exc}")


async def test_local_model_answers_after_a_tool_call() -> None:
    model = local_model()
    ran: list[str] = []
    toolkit = Toolkit()

    @toolkit.register
    def get_secret_code() -> str:
        """Return the secret code the user asks about."""
        ran.append("get_secret_code")
        return "The secret code is 7413."

    sent: list[list[Msg]] = []

    async def steer(ctx: ModelCallContext, call_next: Any) -> ChatResponse:
        # A 135M model does not choose tools reliably: force the call on the first step,
        # then ask for a plain answer, so the test exercises the loop, not the model's IQ.
        ctx.tool_choice = "get_secret_code" if ctx.step == 0 else "none"
        sent.append(list(ctx.messages))
        response: ChatResponse = await call_next(ctx)
        return response

    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant. Use tools to look things up.",
        model=model,
        toolkit=toolkit,
        middleware=[model_call_middleware(steer)],
        tasks_enabled=False,
        max_iters=3,
    )
    reply = await agent.reply(Msg("user", "What is the secret code?", "user"))

    assert ran == ["get_secret_code"]
    assert reply.role == "assistant"
    assert reply.metadata.get("stop_reason") != "max_iters"
    assert reply.text.strip()
    roles = [m.role for m in agent.context]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert agent.context[2].tool_results[0].output == "The secret code is 7413."
    assert len(sent) == 2
    check_requests_valid(sent)
