"""Issue 27 point 1a: AgentScope's summarizer sees the span's tool calls as tool calls.

Runs only where AgentScope 2.0.11 is installed (the benchmark's own venv)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("agentscope")

from benchmarks._data import load_swebench
from benchmarks.retention_whole_run import _agentscope_summarize, summary_budget

from benchmarks import _agentscope


async def test_the_extractive_summarizer_reads_agentscopes_real_tool_calls() -> None:
    session = load_swebench(limit=2)[1]
    extract = _agentscope_summarize("extractive", summary_budget())
    seen: list[tuple[int, str]] = []

    async def spy(span, previous):  # type: ignore[no-untyped-def]
        converted = _agentscope.to_contextfold(span)
        calls = [b for m in converted for b in m.blocks() if b.type == "tool_call"]
        fields = await extract(span, previous)
        seen.append((len(calls), fields["current_state"]))
        assert all(b.name == "bash" and b.input.get("command") for b in calls)
        return fields

    await _agentscope.run_session(
        session, context_size=16_000, record=True, tool_result_limit=50_000, summarize_msgs=spy
    )
    assert seen
    for calls, state in seen:
        assert calls > 0
        reported = re.search(r"with (\d+) tool call", state)
        assert reported is not None
        assert int(reported.group(1)) == calls
        assert "- bash: " in state  # the last actions, as commands


async def test_the_paste_row_stays_within_its_budget() -> None:
    from contextfold.token import counter_for_model

    session = load_swebench(limit=2)[1]
    result = await _agentscope.run_session(
        session,
        context_size=16_000,
        record=True,
        tool_result_limit=50_000,
        summarize_msgs=_agentscope_summarize("paste", 1_600),
    )
    counter = counter_for_model("gpt-4o")
    assert result.compressions
    for compression in result.compressions:
        assert counter.count_text(compression.summary_text) <= 1_600
        assert "$ " in compression.summary_text
