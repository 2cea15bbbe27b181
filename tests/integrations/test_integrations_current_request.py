"""The user's request in progress is in every request sent, through our agent and the
three framework integrations, over several user turns whose tool results fill the window
many times (issue 26: it was missing from 14 to 20 of 40 requests)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.golden.harness import FRAMEWORKS, TURNS, agent_scenario, folder_scenario


def _sent_as_user_message(request: Any, turn: int) -> bool:
    """Whether ``request`` (the framework's items or the OpenAI wire form) holds the
    request of ``turn`` as a message of its own, not only inside a summary."""
    wanted = f"Check service {turn} and report"
    return any(
        wanted in json.dumps(item) and "Summary of the earlier part" not in json.dumps(item)
        for item in request
    )


async def test_our_agent_sends_the_current_request_in_every_request() -> None:
    turns: list[int] = []
    recorded = await agent_scenario("agent-append", turns)
    requests = recorded["agent"]
    assert len(turns) == len(requests) > 4 * TURNS
    assert len(recorded["summarizer"]) >= 2  # the window was folded more than once
    missing = [
        i
        for i, (r, t) in enumerate(zip(requests, turns, strict=True))
        if not _sent_as_user_message(r, t)
    ]
    assert missing == []


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_each_integration_sends_the_current_request_in_every_request(
    framework: str,
) -> None:
    pytest.importorskip(
        {"langchain": "langchain", "pydantic-ai": "pydantic_ai"}.get(framework, "agents")
    )
    turns: list[int] = []
    recorded = await folder_scenario(framework, turns)
    requests = recorded["requests"]
    assert len(turns) == len(requests) > 4 * TURNS
    assert len(recorded["summarizer"]) >= 2
    missing = [
        i
        for i, (r, t) in enumerate(zip(requests, turns, strict=True))
        if not _sent_as_user_message(r, t)
    ]
    assert missing == []
