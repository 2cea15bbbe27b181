"""Replay of the 44 recorded SWE-bench runs at a 16,000-token window.

Run with ``-s`` to print compressions and truncations per run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfold.context import (
    CompressionEvent,
    ContextConfig,
    ContextEngine,
    ContextEvent,
    ModelSummarizer,
    TruncationEvent,
)
from contextfold.message import ToolSpec, check_openai_valid
from contextfold.model import ScriptedModel, ScriptedReply, ScriptedRequest
from contextfold.replay import load_trajectory

from .ctx_support import RecordingOffloader

RUNS = Path(__file__).parents[2] / "data" / "trajectories" / "swebench-verified-gemini3pro"
PATHS = sorted(RUNS.glob("*.traj.json"))
WINDOW = 16_000
TOOLS = [ToolSpec(name="bash", description="Run one bash command.")]
STATS: dict[tuple[str, int], tuple[int, int, int, int]] = {}


def summarize(request: ScriptedRequest) -> ScriptedReply:
    sent = sum(len(m.text) for m in request.messages)
    return {
        "task_overview": "Fix the issue described in the PR description.",
        "current_state": f"Summarized {sent} characters of history.",
        "important_discoveries": "See the artifacts below.",
        "next_steps": "Continue from the last command.",
        "context_to_preserve": "",
    }


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    print(f"\n{'run':<42} {'limit':>6} {'msgs':>5} {'compress':>8} {'truncate':>8} {'peak':>6}")
    for (name, limit), (msgs, comp, trunc, peak) in sorted(STATS.items()):
        print(f"{name:<42} {limit:>6} {msgs:>5} {comp:>8} {trunc:>8} {peak:>6}")


@pytest.mark.parametrize("limit", [4000, 50_000], ids=["limit4k", "default_limit"])
@pytest.mark.parametrize("path", PATHS, ids=[p.name.removesuffix(".traj.json") for p in PATHS])
async def test_replay_stays_in_the_window_and_loses_nothing(path: Path, limit: int) -> None:
    run = load_trajectory(path)
    model = ScriptedModel(summarize, context_size=WINDOW)
    offloader = RecordingOffloader()
    events: list[ContextEvent] = []
    engine = ContextEngine(
        config=ContextConfig(tool_result_limit=limit),
        counter=model.token_counter,
        context_size=model.context_size,
        summarizer=ModelSummarizer(model),
        session_id=path.name,
        offloader=offloader,
        on_event=events.append,
    )
    system = run.system or ""
    ids: list[str] = []
    originals = {r.id: r.text() for m in run.messages for r in m.tool_results}
    peak = 0
    for msg in run.messages:
        if msg.role == "assistant":
            before = sum(isinstance(e, CompressionEvent) for e in events)
            model_input = await engine.prepare(system, TOOLS)
            assert sum(isinstance(e, CompressionEvent) for e in events) - before <= 1
            assert model_input.usage.total <= WINDOW
            assert check_openai_valid(model_input.messages()) == []
            peak = max(peak, model_input.usage.total)
        if msg.tool_results:
            stored = await engine.add_tool_results(msg)
        else:
            engine.append(msg)
            stored = msg
        ids.append(stored.id)
    final = await engine.prepare(system, TOOLS)  # the step after the last message
    assert final.usage.total <= WINDOW
    assert check_openai_valid(final.messages()) == []
    peak = max(peak, final.usage.total)
    for request in model.requests:
        assert engine.counter.count_request(request.messages, request.tools) <= WINDOW
    offloaded = offloader.offloaded_ids()
    assert all(i in offloaded or i in {m.id for m in engine.context} for i in ids)
    whole: dict[str, list[str]] = {}
    for r in offloader.results:
        whole.setdefault(r.id, []).append(r.text())
    truncations = [e for e in events if isinstance(e, TruncationEvent)]
    assert all(originals[e.tool_call_id] in whole[e.tool_call_id] for e in truncations)
    compressions = sum(isinstance(e, CompressionEvent) for e in events)
    STATS[(path.name.removesuffix(".traj.json"), limit)] = (
        len(run.messages),
        compressions,
        len(truncations),
        peak,
    )
