"""Replay of a Pydantic AI message history, as the framework itself serializes it.

The history is made by a real ``pydantic_ai.Agent`` (its offline ``TestModel``), with a
tool call, a tool that asks for a retry, and a final answer, then dumped with
``ModelMessagesTypeAdapter``: the loader reads what users actually have on disk.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="needs contextfold[pydantic-ai]")

from pydantic_ai import Agent, ModelMessagesTypeAdapter, ModelRetry
from pydantic_ai.models.test import TestModel

from contextfold import MessageFormatError
from contextfold.message import ToolResultBlock
from contextfold.replay import load_any, replay_run
from contextfold.testing import check_requests_valid


async def _history(tmp_path: Path) -> Path:
    agent = Agent(TestModel(), system_prompt="You fix bugs.")
    tries: list[str] = []

    @agent.tool_plain
    def bash(command: str) -> str:
        """Run a shell command."""
        return f"ran {command}: " + "output line\n" * 40

    @agent.tool_plain
    def edit(path: str) -> str:
        """Edit a file."""
        tries.append(path)
        if len(tries) == 1:
            raise ModelRetry("path must be absolute")
        return f"edited {path}"

    result = await agent.run("Fix the failing test in src/app.py")
    path = tmp_path / "history.json"
    path.write_bytes(ModelMessagesTypeAdapter.dump_json(result.all_messages()))
    return path


async def test_a_pydantic_ai_history_loads_with_its_calls_results_and_usage(
    tmp_path: Path,
) -> None:
    path = await _history(tmp_path)
    [run] = load_any(path)
    assert run.format == "pydantic-ai"
    assert run.system == "You fix bugs."
    assert run.messages[0].role == "user"
    assert run.messages[0].text == "Fix the failing test in src/app.py"
    calls = {c.id: c.name for m in run.messages for c in m.tool_calls}
    results = [b for m in run.messages for b in m.blocks() if isinstance(b, ToolResultBlock)]
    assert set(calls.values()) == {"bash", "edit"}
    assert {r.id for r in results} == set(calls)
    assert all(r.name == calls[r.id] for r in results)
    assert [r.is_error for r in results if r.name == "edit"] == [True, False]
    assert "path must be absolute" in next(r for r in results if r.is_error).text()
    recorded = json.loads(path.read_text())
    responses = [m for m in recorded if m["kind"] == "response"]
    assistants = [m for m in run.messages if m.role == "assistant"]
    assert len(assistants) == len(responses)
    for msg, raw in zip(assistants, responses, strict=True):
        assert msg.usage is not None
        assert msg.usage.input_tokens == raw["usage"]["input_tokens"]
        assert msg.usage.output_tokens == raw["usage"]["output_tokens"]
    assert assistants[-1].text  # the final answer


async def test_a_pydantic_ai_history_replays_into_valid_requests(tmp_path: Path) -> None:
    [run] = load_any(await _history(tmp_path), format="pydantic-ai")
    check_requests_valid([run.messages])  # raises naming a broken pair or role order
    result = await replay_run(run, context_size=4000)
    assert result.error is None
    assert len(result.steps) == sum(m.role == "assistant" for m in run.messages)


def test_a_pydantic_ai_tool_call_without_an_id_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps(
            [
                {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "hi"}]},
                {"kind": "response", "parts": [{"part_kind": "tool-call", "tool_name": "x"}]},
            ]
        )
    )
    with pytest.raises(MessageFormatError, match="message 1"):
        load_any(path)
