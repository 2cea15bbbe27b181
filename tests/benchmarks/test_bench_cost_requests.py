"""The cost figure's inputs (issue 27 point 2): our real Agent's wire bodies, and the
trivial drop-oldest loop's."""

from __future__ import annotations

import json

import pytest
from benchmarks._agent_requests import agent_requests
from benchmarks._data import load_swebench
from benchmarks.fig_cost import _with_breakpoints, drop_oldest_bodies, price, tool_tokens


@pytest.fixture(scope="module")
def session():  # type: ignore[no-untyped-def]
    # astropy__astropy-14182: 25 steps, compacted twice at a 16k window.
    return load_swebench(limit=2)[1]


def _marked(body: dict) -> int:
    return json.dumps(body).count('"cache_control"')


async def test_our_agent_sends_its_default_tools_breakpoints_and_summary_calls(session) -> None:  # type: ignore[no-untyped-def]
    bodies, answers = await agent_requests(session, context_size=16_000, tool_result_limit=3000)
    kinds = [kind for kind, _, _ in bodies]
    assert kinds.count("reasoning") == len(session.steps) + 1  # and the final answer
    assert kinds.count("summary") == len(answers) >= 1
    first = bodies[0][2]
    names = {t["name"] for t in first["tools"]}
    assert {"bash", "Read", "Grep", "Glob", "TaskCreate"} <= names
    assert tool_tokens(first) > 1000
    assert all(_marked(body) >= 1 for kind, _, body in bodies if kind == "reasoning")
    last = bodies[-1][2]["messages"]
    assert any(
        b.get("type") == "tool_result" for m in last for b in m["content"] if isinstance(b, dict)
    )

    bare, _ = await agent_requests(
        session, context_size=16_000, tool_result_limit=3000, default_tools=False
    )
    assert [t["name"] for t in bare[0][2]["tools"]] == ["bash"]


def test_drop_oldest_keeps_the_newest_steps_that_fit(session) -> None:  # type: ignore[no-untyped-def]
    from contextfold.token import counter_for_model

    bash = [{"name": "bash", "description": "Run a command.", "input_schema": {"type": "object"}}]
    bodies = drop_oldest_bodies(session, 8_000, bash)
    assert len(bodies) == len(session.steps) + 1
    counter = counter_for_model("gpt-4o")
    dropped_somewhere = False
    for step, (_, at, body) in enumerate(bodies):
        assert at == step
        messages = body["messages"]
        assert messages[0]["content"][0]["text"] == session.task
        assert [m["role"] for m in messages[1:]] == ["assistant", "user"] * (len(messages) // 2)
        assert counter.count_text(json.dumps(body)) < 8_000 * 1.2
        dropped_somewhere |= len(messages) - 1 < 2 * step
        if step:  # the newest step is always the last one sent
            call = messages[-2]["content"][-1]
            assert call["input"]["command"] == session.steps[step - 1].command
    assert dropped_somewhere


def test_only_breakpoints_make_the_anthropic_model_read_the_cache(session) -> None:  # type: ignore[no-untyped-def]
    bash = [{"name": "bash", "description": "x", "input_schema": {"type": "object"}}]
    bodies = drop_oldest_bodies(session, 200_000, bash)
    outputs = [10] * len(session.steps)
    unmarked = price(bodies, outputs, [])
    marked = price(bodies, outputs, [], _with_breakpoints)
    assert unmarked[1] == 0.0
    assert marked[1] > 0.8
    assert marked[0] < unmarked[0]


async def test_the_cache_model_separates_drop_oldest_from_our_agent(session) -> None:  # type: ignore[no-untyped-def]
    """The grader of the cost figure (Anthropic's cache rules, simulated) tells the trivial
    loop from ours at 16k: dropping the oldest messages rewrites the prefix every step, so
    it reads less from the cache and costs more, with the same tool (bash) and outputs."""
    from benchmarks.fig_cost import agent

    outputs = [50] * len(session.steps)
    ours = await agent(session, 16_000, outputs, default_tools=False)
    bash = ours["tool_list"]
    trivial = price(drop_oldest_bodies(session, 16_000, bash), outputs, [], _with_breakpoints)
    dollars, read, _ = ours["priced"]
    assert read > trivial[1] + 0.05
    assert dollars < trivial[0]
