"""Property: whatever mix of tool calls the model makes, every request stays valid."""

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.message import ToolCallBlock
from contextfold.model import ScriptedModel, text_reply, tool_reply
from contextfold.tool import Toolkit

from .agent_support import assert_valid, make_agent

KINDS = ["ok", "slow", "raises", "unknown", "malformed", "bad_args"]


def toolkit() -> Toolkit:
    kit = Toolkit()

    @kit.register
    def ok(n: int) -> int:
        return n

    @kit.register
    async def slow(n: int) -> int:
        await asyncio.sleep(0)
        return n

    @kit.register
    def raises(n: int) -> int:
        raise ValueError(n)

    return kit


def call_for(kind: str, i: int) -> ToolCallBlock:
    if kind == "unknown":
        return ToolCallBlock(id=f"c{i}", name="nope", input={"n": i})
    if kind == "malformed":
        return ToolCallBlock(id=f"c{i}", name="ok", raw_input="{", input_error="bad json")
    if kind == "bad_args":
        return ToolCallBlock(id=f"c{i}", name="ok", input={"n": "x"})
    return ToolCallBlock(id=f"c{i}", name=kind, input={"n": i})


turns = st.lists(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4), max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=turns, max_iters=st.integers(min_value=1, max_value=5))
def test_every_call_gets_one_result_in_order_and_requests_stay_valid(
    script: list[list[str]], max_iters: int
) -> None:
    kinds: dict[str, str] = {}
    replies: list[Any] = []
    for turn in script:
        calls = []
        for kind in turn:
            call = call_for(kind, len(kinds))
            kinds[call.id] = kind
            calls.append(call)
        replies.append(tool_reply(*calls))
    replies.append(text_reply("end"))
    model = ScriptedModel(replies)
    agent = make_agent(model, toolkit(), max_iters=max_iters)
    reply = asyncio.run(agent.reply("go"))

    steps = min(len(script) + 1, max_iters)
    assert len(model.requests) == steps
    finished = len(script) < max_iters
    assert (reply.metadata.get("stop_reason") == "max_iters") is not finished
    context = agent.context
    for i, msg in enumerate(context):
        if msg.tool_calls:
            results = context[i + 1].tool_results
            assert [r.id for r in results] == [c.id for c in msg.tool_calls]
            for call, result in zip(msg.tool_calls, results, strict=True):
                assert result.is_error is (kinds[call.id] not in ("ok", "slow"))
    assert_valid(model)
