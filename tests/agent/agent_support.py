"""Shared helpers for the agent tests."""

from __future__ import annotations

from typing import Any

from contextfold.agent import Agent, check_requests_valid
from contextfold.model import ScriptedModel
from contextfold.tool import Toolkit


def make_agent(model: ScriptedModel, toolkit: Toolkit | None = None, **kwargs: Any) -> Agent:
    kwargs.setdefault("tasks_enabled", False)
    return Agent(
        name="assistant", system_prompt="You are helpful.", model=model, toolkit=toolkit, **kwargs
    )


def assert_valid(model: ScriptedModel) -> None:
    """Every request the model received follows the OpenAI and Anthropic rules."""
    assert model.requests, "the model received no request"
    check_requests_valid(model.requests)


class Calls:
    """Records what the engine was asked to do (wraps the real engine methods)."""

    def __init__(self, agent: Agent) -> None:
        self.prepare: list[dict[str, Any]] = []
        self.compress: list[dict[str, Any]] = []
        engine = agent.engine
        real_prepare, real_compress = engine.prepare, engine.compress

        async def prepare(system_prompt: str, tools: Any, **kw: Any) -> Any:
            self.prepare.append({"system_prompt": system_prompt, **kw})
            return await real_prepare(system_prompt, tools, **kw)

        async def compress(system_prompt: str, tools: Any, **kw: Any) -> Any:
            self.compress.append(kw)
            return await real_compress(system_prompt, tools, **kw)

        engine.prepare = prepare  # type: ignore[method-assign]
        engine.compress = compress  # type: ignore[method-assign]
