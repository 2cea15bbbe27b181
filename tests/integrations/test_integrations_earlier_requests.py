"""The user's earlier messages stay word for word within their budget after the history
that held them is folded (issue 26): through our agent and the three framework
integrations, over several user turns whose tool results fill the window many times.

The grader reads only the requests as sent: each earlier turn's words must be in every
later request, wherever they are (as a message, or in the summary layer)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.golden.harness import FRAMEWORKS, TURNS, agent_scenario, folder_scenario


def _earlier_missing(requests: list[Any], turns: list[int], words: str) -> list[tuple[int, int]]:
    """(request, turn) for each earlier turn whose words a later request lacks."""
    missing = []
    for i, (request, turn) in enumerate(zip(requests, turns, strict=True)):
        sent = json.dumps(request)
        missing += [(i, t) for t in range(turn) if words.format(t) not in sent]
    return missing


async def test_our_agent_keeps_the_earlier_requests_word_for_word() -> None:
    turns: list[int] = []
    recorded = await agent_scenario("agent-append", turns)
    assert len(recorded["summarizer"]) >= 2
    assert max(turns) == TURNS - 1
    words = "Check service {} and report its error."
    assert _earlier_missing(recorded["agent"], turns, words) == []


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_each_integration_keeps_the_earlier_requests_word_for_word(framework: str) -> None:
    pytest.importorskip(
        {"langchain": "langchain", "pydantic-ai": "pydantic_ai"}.get(framework, "agents")
    )
    turns: list[int] = []
    recorded = await folder_scenario(framework, turns)
    assert len(recorded["summarizer"]) >= 2
    words = "Check service {} and report."
    assert _earlier_missing(recorded["requests"], turns, words) == []
