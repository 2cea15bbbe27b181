"""With ``readback=False`` nothing in the model's input names a tool it lacks (issue 26,
point 6: the truncation marker, the summary, the ledger and the usage note still told the
model to Read, Grep or Search the workspace).

Each framework runs four turns of three big tool results each, with a scripted model, so
results are cut and offloaded and the history is summarized. Without read-back tools no
request mentions Read, Grep, Glob or Search, nor refers the model to a file; with them
(the control) the notes do. Before the fix the requests without the tools held
``You can refer to the file in '...'``, ``find details there with Search (by a few words),
Grep or Read`` and ``find them with Search (a few words), then Read``.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from contextfold.context import CompressionEvent, ContextConfig, ContextEvent, TruncationEvent
from contextfold.token import counter_for_model
from contextfold.workspace import MemoryWorkspace

from .scripted import (
    agents_calls,
    agents_run,
    agents_text,
    langchain_agent,
    langchain_calls,
    pydantic_agent,
    pydantic_calls,
    pydantic_text,
)

TURNS, CALLS = 4, 3
TOOL_WORDS = re.compile(r"\b(Read|Grep|Glob|Search)\b|refer to the file")
FRAMEWORKS = ["langchain", "pydantic-ai", "openai-agents"]


def _options(readback: bool, events: list[ContextEvent]) -> dict[str, Any]:
    return {
        "counter": counter_for_model("gpt-4o"),
        "context_size": 1000,
        "offloader": MemoryWorkspace(),
        "config": ContextConfig(tool_result_limit=120),
        "on_event": events.append,
        "readback": readback,
    }


def _calls(turn: int) -> list[list[tuple[str, dict[str, Any]]]]:
    return [[("fetch_log", {"thread": f"svc-{turn}-{c}"})] for c in range(CALLS)]


async def _langchain(options: dict[str, Any], requests: list[str]) -> None:
    pytest.importorskip("langchain.agents", reason="needs contextfold[langchain]")
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver

    replies: list[Any] = []
    for turn in range(TURNS):
        replies += [langchain_calls(c, f"t{turn}-{i}") for i, c in enumerate(_calls(turn))]
        replies.append(AIMessage(f"Turn {turn} done."))
    agent = langchain_agent(options, replies, InMemorySaver(), requests)
    for turn in range(TURNS):
        await agent.ainvoke(
            {"messages": [("user", f"Check the services of turn {turn}.")]},
            {"configurable": {"thread_id": "t"}},
        )


async def _pydantic_ai(options: dict[str, Any], requests: list[str]) -> None:
    pytest.importorskip("pydantic_ai", reason="needs contextfold[pydantic-ai]")
    replies: list[Any] = []
    agent = pydantic_agent(options, replies, requests)
    history: list[Any] = []
    for turn in range(TURNS):
        replies += [pydantic_calls(c, f"t{turn}-{i}") for i, c in enumerate(_calls(turn))]
        replies.append(pydantic_text(f"Turn {turn} done."))
        result = await agent.run(
            f"Check the services of turn {turn}.", message_history=history, conversation_id="t"
        )
        history = result.all_messages()


async def _openai_agents(options: dict[str, Any], requests: list[str]) -> None:
    pytest.importorskip("agents", reason="needs contextfold[openai-agents]")
    from agents import SQLiteSession

    session = SQLiteSession("t")
    for turn in range(TURNS):
        replies: list[Any] = [agents_calls(c, f"t{turn}-{i}") for i, c in enumerate(_calls(turn))]
        replies.append(agents_text(f"Turn {turn} done."))
        prompt = f"Check the services of turn {turn}."
        await agents_run(options, replies, "t", session, prompt, requests=requests)


RUNS = {"langchain": _langchain, "pydantic-ai": _pydantic_ai, "openai-agents": _openai_agents}


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_without_readback_no_request_names_a_readback_tool(framework: str) -> None:
    events: list[ContextEvent] = []
    requests: list[str] = []
    await RUNS[framework](_options(False, events), requests)
    assert any(isinstance(e, TruncationEvent) and e.offload_ref for e in events)
    assert any(isinstance(e, CompressionEvent) for e in events)
    named = [m.group(0) for r in requests for m in TOOL_WORDS.finditer(r)]
    assert not named, f"{len(named)} mentions of tools the model lacks: {sorted(set(named))}"
    omitted = "The remaining content has been omitted for limited context."
    assert any(omitted in r for r in requests)
    assert any("not readable from here: this summary is what remains" in r for r in requests)


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_with_readback_the_notes_name_the_tools(framework: str) -> None:
    """The control: the same run with the tools, whose notes point at them."""
    events: list[ContextEvent] = []
    requests: list[str] = []
    await RUNS[framework](_options(True, events), requests)
    assert any(isinstance(e, CompressionEvent) for e in events)
    assert any("You can refer to the file in 'sessions/t/" in r for r in requests)
    assert any(
        "find details there with Search (by a few words), Grep or Read" in r for r in requests
    )
