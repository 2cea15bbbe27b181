"""Issue 5 acceptance, end to end: what left the context is found again with Grep and Read.

A scripted agent works on a real workspace (files, then SQLite). A detail it saw early
leaves the context (by automatic compression, or by truncation of a long tool result); the
agent then searches the offloaded content with ``Grep``, takes the reference out of the
summary or the truncation marker, passes it to ``Read`` and answers with the detail.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from contextfold.agent import Agent, check_requests_valid
from contextfold.context import CompressionEvent, ContextConfig, TruncationEvent
from contextfold.model import ScriptedModel, ScriptedReply, ScriptedRequest, tool_reply
from contextfold.tool import Toolkit

from .integ_support import (
    GREP_HIT,
    MARKER_REF,
    SAVED_IN,
    EventLog,
    dump,
    is_summary,
    last_tool_result_text,
    open_workspace,
    summarizer,
)

DETAIL = "ERR-7731 in src/pkg/mod.py:42"
DETAIL_PATTERN = r"ERR-\d+ in [\w/.]+:\d+"


@pytest.fixture(params=["local", "sqlite"])
async def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    async for ws in open_workspace(request.param, tmp_path):
        yield ws


def check_output(step: int) -> str:
    """Output of one check run: only the first one reports the failure."""
    lines = [f"ok: module_{step}_{i} passed in {i * 3} ms" for i in range(30)]
    if step == 0:
        lines.insert(7, f"check 0 failed: {DETAIL}")
    return "\n".join(lines)


class Investigator:
    """A scripted agent: run checks until the history is compressed, then look the
    failure up in the offloaded history and answer with it."""

    def __init__(self, max_checks: int = 30) -> None:
        self.max_checks = max_checks
        self.checks = 0
        self.summary_ref: str | None = None

    def __call__(self, request: ScriptedRequest) -> ScriptedReply:
        last = last_tool_result_text(request)
        if last is not None and last[0] == "Read":
            found = re.search(DETAIL_PATTERN, last[1])
            return f"The failing check reported {found.group(0) if found else 'nothing'}."
        if last is not None and last[0] == "Grep":
            hit = GREP_HIT.search(last[1])
            if hit is None or self.summary_ref is None:
                return "I could not find the failure."
            # The reference comes out of the summary text, the line out of Grep.
            offset = int(hit.group("line")) - 1
            return tool_reply(("Read", {"path": self.summary_ref, "offset": offset, "limit": 1}))
        summary = next((m for m in request.messages if is_summary(m)), None)
        if summary is not None:
            saved = SAVED_IN.search(summary.text)
            if saved is None:
                return "The summary names no saved history."
            self.summary_ref = saved.group(1)
            return tool_reply(("Grep", {"pattern": r"ERR-\d+"}))
        if self.checks >= self.max_checks:
            return "The history was never compressed."
        self.checks += 1
        return tool_reply(("run_check", {"step": self.checks - 1}))


async def test_detail_from_compressed_history_is_found_with_grep_and_read(
    workspace: Any,
) -> None:
    toolkit = Toolkit()
    toolkit.register(check_output, name="run_check")
    agent_script = Investigator()
    model = ScriptedModel(agent_script, context_size=4000)
    log = EventLog()
    agent = Agent(
        name="investigator",
        system_prompt="Run the checks, then report the failing one.",
        model=model,
        toolkit=toolkit,
        summarizer=summarizer(),
        context_config=ContextConfig(trigger_ratio=0.8, reserve_ratio=0.15),
        offloader=workspace,
        middleware=[log],
        tasks_enabled=False,
        max_iters=40,
    )

    reply = await agent.reply("Run the checks until you have seen enough, then report.")

    assert reply.text == f"The failing check reported {DETAIL}."
    (compression,) = log.of(CompressionEvent)
    assert compression.trigger == "auto"
    assert compression.offload_ref == agent_script.summary_ref
    # The request that led to Grep: the detail is in neither the summary nor the context.
    grep_request = next(r for r in model.requests if any(is_summary(m) for m in r.messages))
    assert not any("ERR-7731" in dump(m) for m in grep_request.messages)
    # What the agent saw back: Grep names the very reference the summary gave, Read
    # accepts it and returns the line with the detail.
    tool_outputs = {
        r.name: r for req in model.requests for m in req.messages for r in m.tool_results
    }
    grep, read = tool_outputs["Grep"], tool_outputs["Read"]
    assert not grep.is_error
    assert DETAIL in grep.text()
    hit = GREP_HIT.search(grep.text())
    assert hit is not None
    # Grep prints the workspace-relative reference Read accepts; the summary may name the
    # same item by its absolute path (LocalWorkspace).
    assert agent_script.summary_ref.endswith(hit.group("ref"))
    assert not read.is_error
    assert DETAIL in read.text()
    check_requests_valid(model.requests)


async def test_detail_cut_from_a_long_tool_result_is_read_back_via_the_marker(
    workspace: Any,
) -> None:
    toolkit = Toolkit()
    log_lines = [f"step {i}: ok" for i in range(600)]
    log_lines[300] = f"step 300: {DETAIL}"
    toolkit.register(lambda: "\n".join(log_lines), name="build_log")
    refs: dict[str, str] = {}

    def script(request: ScriptedRequest) -> ScriptedReply:
        last = last_tool_result_text(request)
        if last is None:
            return tool_reply(("build_log", {}))
        name, text = last
        if name == "build_log":
            marker = MARKER_REF.search(text)
            if marker is None:
                return "The log was not truncated."
            refs["marker"] = marker.group(1)
            return tool_reply(("Grep", {"pattern": r"ERR-\d+", "path": refs["marker"]}))
        if name == "Grep":
            hit = GREP_HIT.search(text)
            if hit is None:
                return "No failure found."
            offset = int(hit.group("line")) - 1
            return tool_reply(("Read", {"path": refs["marker"], "offset": offset, "limit": 1}))
        found = re.search(DETAIL_PATTERN, text)
        return f"The build failed with {found.group(0) if found else 'nothing'}."

    model = ScriptedModel(script)
    log = EventLog()
    agent = Agent(
        name="builder",
        system_prompt="Read the build log.",
        model=model,
        toolkit=toolkit,
        context_config=ContextConfig(tool_result_limit=300),
        offloader=workspace,
        middleware=[log],
        tasks_enabled=False,
    )

    reply = await agent.reply("Why did the build fail?")

    assert reply.text == f"The build failed with {DETAIL}."
    (truncation,) = log.of(TruncationEvent)
    assert truncation.offload_ref == refs["marker"]
    kept = model.requests[1].messages[-1].tool_results[0].text()
    assert "ERR-7731" not in kept
    results = {r.name: r for m in agent.context for r in m.tool_results}
    assert not results["Grep"].is_error
    hit = GREP_HIT.search(results["Grep"].text())
    assert hit is not None
    assert refs["marker"].endswith(hit.group("ref"))
    assert hit.group("line") == "301"
    assert not results["Read"].is_error
    assert results["Read"].text().splitlines()[0] == f"   301\tstep 300: {DETAIL}"
    check_requests_valid(model.requests)
